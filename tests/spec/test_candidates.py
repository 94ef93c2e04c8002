"""A choice of tunables that names only some of a spec's (kgen/spec/candidates.py) is completed
with the first candidate that agrees with it, so that tiles written before the spec gained a
tunable keep meaning the kernels they meant."""
from pathlib import Path

from kgen.build import build_variant
from kgen.hw.descriptor import load_target
from kgen.spec.candidates import complete_tunables, tunable_candidates
from kgen.spec.load import backward_spec, load_spec

FA2_BWD = Path(__file__).resolve().parents[2] / "specs" / "fa2_bwd.yaml"
TILES = {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4, "DSPLIT": 1}


def _variant(deterministic, head_dim=128):
    return {"dtype": "bf16", "head_dim": head_dim, "causal": True, "deterministic": deterministic}


def test_the_left_out_tunable_takes_the_first_agreeing_candidate():
    ls = load_spec(FA2_BWD)
    # deterministic takes only the recomputed dq (a constraint); at head_dim 32 the other variant
    # takes the atomic form
    assert complete_tunables(ls, _variant(True, 32), TILES) == {**TILES, "RECOMPUTE_DQ": 1}
    assert complete_tunables(ls, _variant(False, 32), TILES) == {**TILES, "RECOMPUTE_DQ": 0}
    # at head_dims 33-128 the preference puts the recomputed form over 64 keys first; 128 keys keep
    # the atomic form, which the product order puts first among the rest
    assert complete_tunables(ls, _variant(False), TILES) == {**TILES, "RECOMPUTE_DQ": 1}
    wide = {**TILES, "BLOCK_N": 128, "WARPS": 8}
    assert complete_tunables(ls, _variant(False), wide) == {**wide, "RECOMPUTE_DQ": 0}
    # what is given is kept: the first candidate of the given scheme, whatever the order puts first
    first = complete_tunables(ls, _variant(False), {"RECOMPUTE_DQ": 0})
    assert first == next(c for c in tunable_candidates(ls, _variant(False)) if c["RECOMPUTE_DQ"] == 0)


def test_variants_with_transcendental_scores_or_rewritten_probabilities_keep_the_atomic_form_first():
    # the preference asks, of each derived backward, how many transcendental functions score_mod
    # calls (softcap's tanh: one; ALiBi's linear bias: none) and whether prob_mod is the identity
    root = FA2_BWD.parent
    for spec, recomputed in (("fa2_fwd.yaml", 1), ("variants/document.yaml", 1), ("variants/alibi.yaml", 1),
                             ("variants/softcap.yaml", 0), ("variants/window_softcap.yaml", 0),
                             ("variants/dropout.yaml", 0)):
        ls = backward_spec(load_spec(root / spec))
        variant = {axis: values[0] for axis, values in ls.spec.variants.items()}
        first = tunable_candidates(ls, {**variant, "head_dim": 128, "deterministic": False})[0]
        assert first["RECOMPUTE_DQ"] == recomputed, spec


def test_a_whole_choice_and_one_no_candidate_agrees_with_stay_as_given():
    ls = load_spec(FA2_BWD)
    whole = tunable_candidates(ls, _variant(False))[3]
    assert complete_tunables(ls, _variant(False), whole) is whole
    odd = {"BLOCK_M": 48}
    assert complete_tunables(ls, _variant(False), odd) == odd


def test_the_build_takes_a_partial_first_choice():
    ls = load_spec(FA2_BWD)
    built = build_variant(ls, _variant(True), load_target("sm_90"), compile=False, first=TILES)
    assert built.tunables == {**TILES, "RECOMPUTE_DQ": 1}
    # and the recomputed form's dkdv adds nothing to dq_acc
    dkdv = next(k for k in built.kernels if k.name.endswith("dkdv"))
    assert "dq_acc" not in dkdv.arguments["tensors"]
