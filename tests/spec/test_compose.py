"""Composed specs (`extends: [a.yaml, b.yaml]`, kgen/spec/compose.py; kgen.compose): what the
composition unites, intersects and joins, its derived backward, that it computes what its parts
mean together (tests/lang/specs' row softmax with a window and a cap at once, on the interpreter),
and its errors, each one sentence at the composing file's place."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import helpers  # noqa: E402

from kgen.errors import SpecError, UsageError  # noqa: E402
from kgen.spec.load import backward_spec, load_spec  # noqa: E402

VARIANTS = ROOT / "specs" / "variants"
LANG = ROOT / "tests" / "lang" / "specs"


def _composed(tmp_path: Path, *parents: Path, name: str = "composed") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"kgen: 1\nextends: [{', '.join(str(p) for p in parents)}]\nname: {name}\n")
    return path


def test_attention_parts_unite_intersect_and_join(tmp_path):
    parts = [VARIANTS / f"{n}.yaml" for n in ("document", "sliding_window", "softcap", "alibi")]
    ls = load_spec(_composed(tmp_path, *parts))
    s = ls.spec
    assert s.variants["causal"] == [False]  # the window takes causal false only; the document both
    assert s.sizes == ["B", "SQ", "SK", "H", "HKV", "N1"]
    assert [n for n in s.tensors if n not in load_spec(ROOT / "specs" / "fa2_fwd.yaml").spec.tensors] == ["seg", "starts", "slopes"]
    assert list(s.scalars) == ["softmax_scale", "window_left", "window_right", "softcap"]
    assert s.hooks["mask_mod"].body == ("mask_mod_document(b, h, q_idx, kv_idx) and "
                                        "mask_mod_sliding_window(b, h, q_idx, kv_idx)")
    assert s.hooks["score_mod"].body == ("score_mod_alibi(score_mod_softcap(score, b, h, q_idx, kv_idx), "
                                         "b, h, q_idx, kv_idx)")
    assert s.hooks["prob_mod"].body == "p" and s.hooks["diagonal"].body == "q_idx + (SK - SQ)"
    # each part keeps its file's place; the joined hooks are at the composing file's extends
    assert ls.where("hooks", "mask_mod_document", "body").file.endswith("document.yaml")
    assert ls.where("hooks", "score_mod_alibi", "body").file.endswith("alibi.yaml")
    assert ls.where("hooks", "mask_mod", "body").file.endswith("composed.yaml")
    assert s.autograd.saves == ["q", "k", "v", "o", "lse", "seg", "starts", "slopes"]
    bwd = backward_spec(ls)
    assert bwd.spec.name == "composed_bwd" and bwd.spec.hooks == s.hooks
    assert bwd.spec.variants["causal"] == [False] and {"seg", "starts", "slopes"} <= set(bwd.spec.tensors)
    assert list(bwd.spec.scalars) == list(s.scalars)


def test_the_same_override_twice_is_taken_once(tmp_path):
    """window_softcap extends sliding_window: both give the window's mask, which is not joined with itself."""
    s = load_spec(_composed(tmp_path, VARIANTS / "sliding_window.yaml", VARIANTS / "window_softcap.yaml")).spec
    assert "window_left" in s.hooks["mask_mod"].body and s.hooks["score_mod"].body == "softcap * tanh(score / softcap)"
    assert not any(n.startswith("mask_mod_") for n in s.hooks)


def _row_base(tmp_path: Path) -> None:
    """tests/lang/specs' scored softmax and two specs extending it, the base's hooks with combine rules."""
    base = (LANG / "scored_softmax.yaml").read_text()
    base = base.replace("    body: score\n", "    body: score\n    combine: chain\n")
    base = base.replace('    body: "True"\n', '    body: "True"\n    combine: all\n')
    (tmp_path / "scored_softmax.yaml").write_text(base)
    for n in ("softcap_softmax", "window_softmax"):
        (tmp_path / f"{n}.yaml").write_text((LANG / f"{n}.yaml").read_text())


def test_a_composition_computes_what_its_parts_mean_together(tmp_path):
    _row_base(tmp_path)
    ls = load_spec(_composed(tmp_path, tmp_path / "softcap_softmax.yaml", tmp_path / "window_softmax.yaml"))
    m, n, cap, window = 37, 300, 2.0, 40
    gen = torch.Generator().manual_seed(1)
    x, slope = torch.randn(m, n, generator=gen) * 4, torch.rand(1, generator=gen)
    row, col = torch.arange(m)[:, None], torch.arange(n)[None, :]
    t = cap * torch.tanh(x.double() / cap) - slope.double() * (row - col)  # the cap first, then the window's slope
    want = torch.softmax(torch.where((col <= row) & (row - col <= window), t, -math.inf), -1)
    got = helpers.run_spec_cpu(ls, {"dtype": "fp32"}, {"x": x, "slope": slope}, {"M": m, "N": n}, {"cap": cap, "window": window})
    torch.testing.assert_close(got["y"].double(), want, rtol=1e-5, atol=1e-6)
    ref = helpers.reference(ls, {"x": x, "slope": slope, "cap": cap, "window": window})
    torch.testing.assert_close(ref["y"], want, rtol=1e-9, atol=1e-12)


def _error(path: Path) -> str:
    with pytest.raises(SpecError) as e:
        load_spec(path)
    return str(e.value)


def test_two_overrides_of_a_hook_without_a_combine_rule(tmp_path):
    message = _error(_composed(tmp_path, LANG / "softcap_softmax.yaml", LANG / "window_softmax.yaml"))
    assert "composed.yaml:2:" in message
    assert ("extends: softcap_softmax.yaml and window_softmax.yaml each override hook 'score_mod', which declares no "
            "`combine:` (all, any or chain) in scored_softmax.yaml") in message


def test_specs_of_other_bases_are_not_composed(tmp_path):
    message = _error(_composed(tmp_path, VARIANTS / "softcap.yaml", LANG / "softcap_softmax.yaml"))
    assert "do not extend one base (their bases: fa2_fwd.yaml, scored_softmax.yaml); composed specs share one" in message


def test_a_list_of_one(tmp_path):
    path = tmp_path / "one.yaml"
    path.write_text(f"kgen: 1\nextends: [{VARIANTS / 'softcap.yaml'}]\nname: one\n")
    assert "extends: a list names two or more specs that extend one base" in _error(path)


@pytest.mark.parametrize("a, b, message", [
    ("variants: {dtype: [fp32]}\n", "variants: {dtype: [bf16]}\n",
     "extends: no value of variant axis 'dtype' is taken by every composed spec (b.yaml takes ['bf16'])"),
    ("scalars: {w: {}}\n", "scalars: {w: {dtype: int32}}\n",
     "extends: a.yaml and b.yaml give scalars.w differently; composed specs may change it in one of them only"),
    ("tunables: {BLOCK_N: 64}\n", "tunables: {BLOCK_N: 32}\n",
     "extends: a.yaml and b.yaml give tunables.BLOCK_N differently"),
])
def test_parts_that_disagree(tmp_path, a, b, message):
    _row_base(tmp_path)
    for n, extra in (("a", a), ("b", b)):
        (tmp_path / f"{n}.yaml").write_text(f"kgen: 1\nextends: scored_softmax.yaml\nname: {n}\nsummary: s\n{extra}")
    got = _error(_composed(tmp_path, tmp_path / "a.yaml", tmp_path / "b.yaml"))
    assert message in got and "composed.yaml:2:" in got


def test_kgen_compose_writes_the_composition_and_loads_it(tmp_path, monkeypatch):
    import kgen

    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "cache"))
    op = kgen.compose(VARIANTS / "softcap.yaml", VARIANTS / "dropout.yaml")
    assert op.opname == "fa2_softcap_dropout"
    written = tmp_path / "cache" / "composed" / "fa2_softcap_dropout.yaml"
    assert op.ls.path == written and "extends: [" in written.read_text()
    assert kgen.compose(VARIANTS / "softcap.yaml", VARIANTS / "dropout.yaml").ls.path == written  # written once


@pytest.mark.parametrize("args, kw, message", [
    ((VARIANTS / "softcap.yaml",), {}, "kgen.compose: give two or more spec files, got 1; one spec is loaded with kgen.load"),
    ((VARIANTS / "softcap.yaml", VARIANTS / "nope.yaml"), {}, "kgen.compose: no spec file"),
    ((VARIANTS / "softcap.yaml", VARIANTS / "alibi.yaml"), {"name": "a-b"},
     "kgen.compose: name 'a-b' is not an identifier; an op's name is letters, digits and _"),
])
def test_kgen_compose_usage_errors(args, kw, message):
    import kgen

    with pytest.raises(UsageError) as e:
        kgen.compose(*args, **kw)
    assert message in str(e.value)
