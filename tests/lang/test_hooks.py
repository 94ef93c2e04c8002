"""Hooks and `extends:` (docs/SPEC_LANGUAGE.md, "Hooks and extends"): tests/lang/specs/scored_softmax.yaml
declares `score_mod` and `mask_mod`; softcap_softmax.yaml and window_softmax.yaml extend it and
override them (a scalar, an int32 scalar, an extra tensor, a multi-line body). Each runs on the CPU
interpreter and in the gfx942 emulation against its reference (the base's, calling the overridden
hooks in torch), compiles for both targets, and runs on the GPU; then the errors."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
import helpers  # noqa: E402

import kgen  # noqa: E402
from kgen.backends import available  # noqa: E402
from kgen.build import build_variant  # noqa: E402
from kgen.errors import SpecError  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPECS = HERE / "specs"
M, N = 37, 300  # ragged: several column blocks, a partial last one


def _want(name: str, x: torch.Tensor, scalars: dict, slope: torch.Tensor | None = None) -> torch.Tensor:
    """Each spec's meaning written out here, independently of the hooks' text."""
    x = x.double()
    row, col = torch.arange(x.shape[0])[:, None], torch.arange(x.shape[1])[None, :]
    if name == "scored_softmax":
        t = x
    elif name == "softcap_softmax":
        cap = scalars.get("cap", 5.0)
        t = cap * torch.tanh(x / cap)
    else:
        seen = (col <= row) & (row - col <= scalars["window"])
        t = torch.where(seen, x - slope.double()[0] * (row - col).double(), -math.inf)
    return torch.softmax(t, dim=-1)


CASES = [("scored_softmax", {}), ("softcap_softmax", {}), ("softcap_softmax", {"cap": 2.0}),
         ("window_softmax", {"window": 7}), ("window_softmax", {"window": 0})]


def _inputs(name: str) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(len(name))
    ins = {"x": torch.randn(M, N, generator=gen) * 4}
    if name == "window_softmax":
        ins["slope"] = torch.rand(1, generator=gen)
    return ins


@pytest.mark.parametrize("name, scalars", CASES)
def test_interpreter_and_reference_mean_what_the_hooks_say(name, scalars):
    ls = load_spec(SPECS / f"{name}.yaml")
    ins = _inputs(name)
    want = _want(name, ins["x"], scalars, ins.get("slope"))
    every = {n: p.value(scalars.get(n, p.default)) for n, p in ls.spec.scalars.items()}
    got = helpers.run_spec_cpu(ls, {"dtype": "fp32"}, dict(ins), {"M": M, "N": N}, every)
    torch.testing.assert_close(got["y"].double(), want, rtol=1e-5, atol=1e-6)
    ref = helpers.reference(ls, {**ins, **scalars})
    torch.testing.assert_close(ref["y"], want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name, scalars", CASES[1::2])
def test_gfx942_emulation_matches(name, scalars):
    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    ins = _inputs(name)
    y = kgen.load(SPECS / f"{name}.yaml", target="gfx942", emulate=True)(**ins, **scalars)
    torch.testing.assert_close(y.double(), _want(name, ins["x"], scalars, ins.get("slope")), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_a_derived_spec_compiles_with_its_hooks_inlined(target):
    backend = load_target(target).backend
    if not available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found")
    (k,) = build_variant(load_spec(SPECS / "window_softmax.yaml"), {"dtype": "bf16"}, load_target(target), compile=True).kernels
    assert "int scalar_window" in k.text and k.resources["spill_bytes"] == 0
    # the base's program and the derived spec's hooks, each op at its own file's line
    assert "Tile program: line 26 of tests/lang/specs/scored_softmax.yaml" in k.text
    assert "// spec: tests/lang/specs/scored_softmax.yaml:33:" in k.text and "// spec: 15:" in k.text


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("name, scalars", CASES)
def test_gpu_matches(name, scalars):
    ins = {k: v.cuda() for k, v in _inputs(name).items()}
    y = kgen.load(SPECS / f"{name}.yaml")(**ins, **scalars)
    want = _want(name, ins["x"].cpu(), scalars, ins["slope"].cpu() if "slope" in ins else None)
    torch.testing.assert_close(y.cpu().double(), want, rtol=1e-5, atol=1e-6)


# ---- what extends merges -----------------------------------------------------------------------

def test_extends_merges_maps_and_replaces_the_rest():
    base, ls = load_spec(SPECS / "scored_softmax.yaml"), load_spec(SPECS / "window_softmax.yaml")
    s = ls.spec
    assert s.name == "window_softmax" and s.kernels == base.spec.kernels and s.reference == base.spec.reference
    assert list(s.tensors) == ["x", "y", "slope"] and list(s.scalars) == ["window"]
    assert s.hooks["mask_mod"].args == ["row", "col"] and "row - col <= window" in s.hooks["mask_mod"].body
    assert s.hooks["score_mod"].args == ["score", "row", "col"]
    # positions: the derived spec's own content in its file, the base's in the base's
    assert ls.where("hooks", "mask_mod").file.endswith("window_softmax.yaml")
    assert ls.where("kernels", 0, "program").file.endswith("scored_softmax.yaml")


# ---- errors: one sentence at the place ------------------------------------------------------------

def _derived(tmp_path, text: str, base: str = "scored_softmax.yaml") -> Path:
    (tmp_path / base).write_text((SPECS / base).read_text())
    path = tmp_path / "derived.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("kgen: 1\nextends: scored_softmax.yaml\nname: d\nsummary: s\nhooks:\n  bias_mod: score\n",
     "hooks: 'bias_mod' is not a hook of scored_softmax.yaml; its hooks: score_mod, mask_mod"),
    ("kgen: 1\nextends: scored_softmax.yaml\nsummary: s\n",
     "a spec that extends another needs its own name"),
    ("kgen: 1\nextends: missing.yaml\nname: d\nsummary: s\n",
     "extends: cannot read missing.yaml"),
    ("kgen: 1\nextends: derived.yaml\nname: d\nsummary: s\n",
     "extends: derived.yaml extends itself"),
    ("kgen: 1\nextends: scored_softmax.yaml\nname: d\nsummary: s\nhooks:\n  mask_mod: {args: [a, b, c], body: a}\n",
     "hooks: 'mask_mod' takes (row, col) in scored_softmax.yaml; an override keeps them"),
    ("kgen: 1\nextends: scored_softmax.yaml\nname: d\nsummary: s\nhooks:\n  score_mod: score +\n",
     "hook score_mod: invalid syntax"),
    ("kgen: 1\nextends: scored_softmax.yaml\nname: d\nsummary: s\nhooks:\n  score_mod: |\n    t = score * 2\n",
     "hook score_mod: a body of statements ends with `return <expression>`"),
])
def test_a_bad_derived_spec_is_one_sentence_at_its_place(tmp_path, text, message):
    path = _derived(tmp_path, text)
    with pytest.raises(SpecError) as err:
        ls = load_spec(path)
        build_variant(ls, {"dtype": "fp32"}, load_target("sm_90"), compile=False)
    assert message in str(err.value) and "derived.yaml:" in str(err.value)


def test_a_hook_called_with_the_wrong_arguments_is_an_error_at_the_call(tmp_path):
    text = (SPECS / "scored_softmax.yaml").read_text().replace(
        "seen = (c[None, :] < N) and mask_mod(r[:, None], c[None, :])\n          t = where(seen, score_mod(",
        "seen = (c[None, :] < N) and mask_mod(r[:, None])\n          t = where(seen, score_mod(", 1)
    path = tmp_path / "scored_softmax.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        build_variant(load_spec(path), {"dtype": "fp32"}, load_target("sm_90"), compile=False)
    assert "mask_mod takes 2 arguments (row, col), got 1" in str(err.value) and "scored_softmax.yaml:32:39:" in str(err.value)
