"""specs/ssd_fwd.yaml (Mamba-2 chunked scan) on the CPU interpreter against its sequential reference.

test_interp_examples.py runs every variant with torch.randn inputs, where dt * A has either sign
and the state grows like exp(sum of dt * A): the comparison is relative, so it still holds, but
the values are far from what a model feeds in. Here the inputs are shaped like Mamba-2's
(dt = softplus(.) > 0, A = -exp(.) < 0, so every decay is in (0, 1)), and the sequence lengths
cover one position, a chunk less one, a partial second chunk and several chunks, with the spec's
blocks and with blocks that differ from each other (BLOCK_M != BLOCK_K) so that the output
loop's bound at the diagonal is exercised. Two cases pack several sequences into each row
(seq_idx), with starts inside chunks, on a chunk's first position and on its last.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for helpers
import helpers  # noqa: E402

from kgen.ops.ssd import SOFTPLUS_BELOW  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = Path(__file__).resolve().parents[2] / "specs" / "ssd_fwd.yaml"
# BLOCK_N 32: the state columns in blocks, as gfx942 takes them at dstate 256
SMALL_BLOCKS = {"BLOCK_S": 16, "BLOCK_M": 16, "BLOCK_K": 32, "BLOCK_N": 32}


def _mamba_like_inputs(ls, variant, env, seed, softplus):
    """dt > 0 as Mamba-2 feeds it: raw (bias added, softplus in the kernel) with softplus,
    already softplus'ed otherwise; dt_bias small either way."""
    gen = torch.Generator().manual_seed(seed)
    inputs = helpers.random_inputs(ls.spec, variant, env, gen)
    dt = inputs["dt"]
    if not softplus:
        inputs["dt"] = torch.nn.functional.softplus(dt.float() - 1.0).to(dt.dtype)
    inputs["dt_bias"] = 0.1 * inputs["dt_bias"]
    inputs["A"] = -torch.exp(inputs["A"])
    return inputs


@pytest.mark.parametrize("chunk_size, dstate, seqlen, nheads, ngroups, blocks, softplus, limits, starts", [
    (64, 64, 1, 4, 2, "spec", False, {}, ()),
    (64, 64, 63, 4, 2, "spec", True, {}, ()),
    (64, 128, 100, 4, 2, "spec", True, {"dt_min": 0.2, "dt_max": 0.9}, ()),
    (64, 64, 100, 3, 1, "small", False, {"dt_max": 0.5}, ()),
    (128, 64, 200, 2, 2, "small", True, {}, ()),
    (64, 64, 17, 2, 1, "small", True, {}, ()),
    (64, 64, 150, 2, 1, "spec", True, {}, (40, 64, 130)),
    (128, 64, 300, 4, 2, "small", True, {}, (100, 127, 256)),
    (64, 256, 90, 2, 1, "spec", True, {}, ()),
    (64, 256, 90, 2, 1, "small", True, {}, (50,)),
])
def test_ssd_fwd_matches_sequential_recurrence(chunk_size, dstate, seqlen, nheads, ngroups, blocks, softplus, limits,
                                                starts):
    ls = load_spec(SPEC)
    variant = {"dtype": "bf16", "chunk_size": chunk_size, "headdim": 64, "dstate": dstate, "packed": bool(starts), "dt_dtype": "bf16", "gated": False}
    limits = {**limits, "softplus_below": SOFTPLUS_BELOW} if softplus else limits
    tunables = helpers.default_tunables(ls, variant)
    if blocks == "small":
        tunables.update(SMALL_BLOCKS)
    sizes = {"batch": 2, "seqlen": seqlen, "nheads": nheads, "ngroups": ngroups}
    inputs = _mamba_like_inputs(ls, variant, {**variant, **tunables, **sizes}, seed=seqlen + 7 * nheads,
                                softplus=softplus)
    inputs["seq_idx"] = helpers.packed_seq_idx(2, seqlen, starts)

    got = helpers.run_spec_cpu(ls, variant, dict(inputs), sizes, limits, tunables)
    scalars = helpers.scalar_values(ls.spec, limits)
    ref = helpers.reference(ls, {**inputs, **scalars}, variant=variant)
    ref_lowp = helpers.reference(ls, {**inputs, **scalars}, exact=False, variant=variant)
    for name in ("y", "final_states"):
        helpers.check_close(name, got[name], ref[name], ref_lowp[name])
    # the yardstick above is PyTorch's own bf16 recurrence, which is loose over long sequences;
    # with decays in (0, 1) the outputs are O(10), so also bound the error against their scale
    for name in ("y", "final_states"):
        err = helpers.max_err(got[name], ref[name])
        scale = float(ref[name].abs().max())
        assert err <= 0.02 * scale, f"{name}: max error {err:.3g} is over 2% of max |ref| = {scale:.3g}"


def test_reference_agrees_with_closed_form_for_one_position():
    # one position: h = exp(dt A) h0 + dt x B^T, y = h C: pins the reference the kernels are held to
    ls = load_spec(SPEC)
    variant = {"dtype": "bf16", "chunk_size": 64, "headdim": 64, "dstate": 64, "packed": False, "dt_dtype": "bf16", "gated": False}
    sizes = {"batch": 1, "seqlen": 1, "nheads": 2, "ngroups": 1}
    inputs = _mamba_like_inputs(ls, variant, {**variant, **sizes}, seed=3, softplus=False)
    inputs["dt_bias"] = torch.zeros_like(inputs["dt_bias"])
    ref = helpers.reference(ls, {**inputs, **helpers.scalar_values(ls.spec, {})}, variant=variant)
    x, dt, A, B, C, D, h0 = (inputs[n].double() for n in ("x", "dt", "A", "B", "C", "D", "initial_states"))
    cb = (C[0, 0, 0] * B[0, 0, 0]).sum()
    decay = torch.exp(dt[0, 0] * A)  # (nheads,): what is left of the initial state after one step
    want = decay[:, None] * (h0[0] * C[0, 0, 0]).sum(-1) + dt[0, 0, :, None] * cb * x[0, 0] + D * x[0, 0]
    assert torch.allclose(ref["y"][0, 0], want, rtol=1e-12, atol=1e-12)
    want_state = decay[:, None, None] * h0[0] + dt[0, 0, :, None, None] * x[0, 0, :, :, None] * B[0, 0, 0][None, None, :]
    assert torch.allclose(ref["final_states"][0], want_state, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("starts", [(), (50,)])
def test_gated_output_matches_the_recurrence(starts):
    # gated=true: chunk_scan gates its fp32 sum by silu(z) and stores the ungated sum to out_x
    ls = load_spec(SPEC)
    variant = {"dtype": "bf16", "chunk_size": 64, "headdim": 64, "dstate": 64, "packed": bool(starts), "dt_dtype": "bf16",
               "gated": True}
    limits = {"softplus_below": SOFTPLUS_BELOW}
    tunables = helpers.default_tunables(ls, variant)
    sizes = {"batch": 2, "seqlen": 90, "nheads": 2, "ngroups": 1}
    inputs = _mamba_like_inputs(ls, variant, {**variant, **tunables, **sizes}, seed=31, softplus=True)
    inputs["seq_idx"] = helpers.packed_seq_idx(2, 90, starts)
    assert inputs["z"].shape == inputs["x"].shape
    got = helpers.run_spec_cpu(ls, variant, dict(inputs), sizes, limits, tunables)
    scalars = helpers.scalar_values(ls.spec, limits)
    ref = helpers.reference(ls, {**inputs, **scalars}, variant=variant)
    ref_lowp = helpers.reference(ls, {**inputs, **scalars}, exact=False, variant=variant)
    for name in ("y", "out_x", "final_states"):
        helpers.check_close(name, got[name], ref[name], ref_lowp[name])
    # the gate changes y far beyond the bound: the ungated sum is not what y holds
    assert helpers.max_err(ref["out_x"], ref["y"]) > 10 * helpers.max_err(got["y"], ref["y"])
