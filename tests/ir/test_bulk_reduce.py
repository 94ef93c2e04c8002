"""kgen/ir/passes/bulk_reduce.py: which atomic adds become bulk reductions (the spec's per-kernel
choice, the target's descriptor), the one shared buffer they get, and the spec error for an
expression that cannot be evaluated. The emitted code is simulated in
tests/codegen/test_atomic_dot.py and run on the GPU there and in tests/ops."""
from __future__ import annotations

from pathlib import Path

import pytest

from kgen.errors import SpecError
from kgen.hw.descriptor import load_target
from kgen.ir.core import walk
from kgen.driver import compile_kernel
from kgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
ATOMIC_DOT = ROOT / "tests/codegen/specs/atomic_dot.yaml"
TUNABLES = {"BLOCK_M": 64, "BLOCK_K": 32, "WARPS": 4}


def _adds(k):
    return [op for op in walk(k.body) if op.kind == "atomic_add"]


def _spec(tmp_path, choice: str) -> Path:
    text = ATOMIC_DOT.read_text().replace("bulk_reductions: true", f"bulk_reductions: {choice}")
    path = tmp_path / "atomic_dot.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("target, choice, bulk", [
    ("sm_90", "true", True), ("sm_90", "false", False), ("sm_90", "n == 64", True), ("sm_90", "n == 32", False),
    ("sm_80", "true", False), ("gfx942", "true", False),  # no bulk reductions in their descriptors
])
def test_the_spec_and_the_descriptor_decide(tmp_path, target, choice, bulk):
    k = compile_kernel(load_spec(_spec(tmp_path, choice)), 0, {"dtype": "bf16", "n": 64}, TUNABLES, load_target(target))
    (add,) = _adds(k)
    assert ("bulk" in add.attrs) == bulk
    if bulk:  # a warp of the wgmma accumulator: 16 rows x 64 columns, rows padded to 72
        assert add.attrs["bulk"] == {"rows": 16, "cols": 64, "ld": 72, "bytes": 4 * 16 * 72 * 4}
        assert k.shared_bytes >= add.attrs["smem_offset"] + add.attrs["bulk"]["bytes"]


def test_the_causal_backward_shares_one_buffer_between_its_two_passes():
    ls = load_spec(ROOT / "specs/fa2_bwd.yaml")
    variant = {"dtype": "bf16", "head_dim": 64, "causal": True, "deterministic": False}
    k = compile_kernel(ls, 1, variant, {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4}, load_target("sm_90"))
    adds = _adds(k)
    assert len(adds) == 2 and all("bulk" in a.attrs for a in adds)
    assert adds[0].attrs["smem_offset"] == adds[1].attrs["smem_offset"]
    plain = compile_kernel(ls, 1, {**variant, "causal": False}, {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4}, load_target("sm_90"))
    assert not any("bulk" in a.attrs for a in _adds(plain))  # `bulk_reductions: causal`


def test_an_expression_that_cannot_be_evaluated_is_named(tmp_path):
    with pytest.raises(SpecError, match=r"bulk_reductions must be true, false or an expression.*'no_such_axis'") as e:
        compile_kernel(load_spec(_spec(tmp_path, "no_such_axis")), 0, {"dtype": "bf16", "n": 64}, TUNABLES, load_target("sm_90"))
    assert "atomic_dot.yaml:" in str(e.value)
