"""A backward spec whose tensor names are off the d<in> / d<out> / saves convention is an error
when the forward loads, at the backward's tensor, naming what was expected."""
from __future__ import annotations

from pathlib import Path

import pytest

import kgen
from kgen.errors import SpecError

SPECS = Path(__file__).resolve().parents[2] / "specs"


@pytest.fixture
def pair(tmp_path):
    """matmul.yaml and matmul_bwd.yaml copied, renamed so no op of the shipped ones is touched."""
    def write(bwd_edit=("", ""), fwd_edit=("", "")):
        fwd = (SPECS / "matmul.yaml").read_text().replace("name: matmul", "name: mm_pair").replace("matmul_bwd.yaml", "mm_pair_bwd.yaml")
        bwd = (SPECS / "matmul_bwd.yaml").read_text().replace("name: matmul_bwd", "name: mm_pair_bwd")
        (tmp_path / "mm_pair.yaml").write_text(fwd.replace(*fwd_edit) if fwd_edit[0] else fwd)
        (tmp_path / "mm_pair_bwd.yaml").write_text(bwd.replace(*bwd_edit) if bwd_edit[0] else bwd)
        return tmp_path / "mm_pair.yaml", tmp_path / "mm_pair_bwd.yaml"
    return write


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_misnamed_gradient_output(pair):
    fwd, bwd = pair(("  da: {", "  d_a: {"))
    with pytest.raises(SpecError) as e:
        kgen.load(fwd)
    assert str(e.value) == (f"{bwd}:{_line_of(bwd, 'd_a:')}:3: backward output 'd_a' is not the gradient of a forward input "
                            "that takes one; a gradient output is named d<input>: expected da, db; did you mean 'da'?")


def test_a_misnamed_incoming_gradient(pair):
    fwd, bwd = pair(("  dc: {", "  grad_c: {"))
    with pytest.raises(SpecError) as e:
        kgen.load(fwd)
    assert str(e.value) == (f"{bwd}:{_line_of(bwd, 'grad_c:')}:3: backward input 'grad_c' is neither a tensor mm_pair.yaml "
                            "saves (autograd.saves: a, b) nor the gradient of a differentiable forward output (d<output>: dc)")


def test_an_input_that_is_not_saved(pair):
    fwd, bwd = pair(fwd_edit=("saves: [a, b]", "saves: [a]"))
    with pytest.raises(SpecError, match=r"backward input 'b' is neither a tensor mm_pair.yaml saves \(autograd.saves: a\)"):
        kgen.load(fwd)


def test_a_gradient_the_backward_does_not_compute(pair):
    fwd, bwd = pair(fwd_edit=("  b: {shape: [K, N], dtype: $dtype}", "  b: {shape: [K, N], dtype: $dtype}\n  bias: {shape: [N], dtype: $dtype}"))
    with pytest.raises(SpecError) as e:
        kgen.load(fwd)
    assert str(e.value).endswith("forward input 'bias' takes a gradient but mm_pair_bwd.yaml computes no 'dbias'; "
                                 "add that output, or give bias grad: false in mm_pair.yaml")


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_an_integer_input_takes_no_gradient(pair, dtype):
    """Ids and targets have no gradient: the backward need not compute one, and a float input
    added the same way would need one (the test above)."""
    fwd, _ = pair(fwd_edit=("  b: {shape: [K, N], dtype: $dtype}", f"  b: {{shape: [K, N], dtype: $dtype}}\n  ids: {{shape: [N], dtype: {dtype}}}"))
    kgen.load(fwd)


def test_the_shipped_pairs_hold():
    for fwd in sorted(SPECS.glob("*.yaml")):
        if not fwd.stem.endswith("_bwd"):
            kgen.load(fwd)
