"""kgen/ir/passes/bulk_reduce.py: which atomic adds become bulk reductions (the spec's per-kernel
choice, else the byte model: the descriptor's measured rates and the shared memory the staging
costs), the one shared buffer they get, and the spec error for an expression that cannot be
evaluated. The emitted code is simulated in tests/codegen/test_atomic_dot.py and run on the GPU
there and in tests/ops."""
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


def test_the_causal_backward_shares_one_buffer_between_its_passes():
    ls = load_spec(ROOT / "specs/fa2_bwd.yaml")
    variant = {"dtype": "bf16", "head_dim": 64, "causal": True, "deterministic": False}
    atomic = {"RECOMPUTE_DQ": 0, "BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4, "DSPLIT": 1}
    k = compile_kernel(ls, "dkdv", variant, atomic, load_target("sm_90"))
    adds = _adds(k)
    # masked before the whole blocks, then the whole blocks (the last partial one among them)
    assert len(adds) == 2 and all("bulk" in a.attrs for a in adds)
    assert len({a.attrs["smem_offset"] for a in adds}) == 1


def _unasked(tmp_path, target, **facts):
    """atomic_dot without the spec's choice, compiled for `target` with `facts` changed."""
    tg = load_target(target)
    if facts:
        tg = tg.model_copy(update=facts)
    path = tmp_path / "atomic_dot.yaml"
    path.write_text(ATOMIC_DOT.read_text().replace("    bulk_reductions: true  # where the target has them (sm_90)\n", ""))
    k = compile_kernel(load_spec(path), 0, {"dtype": "bf16", "n": 64}, TUNABLES, tg)
    (add,) = _adds(k)
    return add, k.notes.get("reductions", [])


def test_without_the_spec_s_choice_the_faster_path_is_taken(tmp_path):
    add, why = _unasked(tmp_path, "sm_90")  # the descriptor's measured rates: bulk is faster
    assert "bulk" in add.attrs and why == ["out (16 rows x 64 fp32 per warp): bulk, 2.62 TB/s against atomics 1.93 TB/s"]
    add, why = _unasked(tmp_path, "sm_90", fp32_reduce_tbps={"atomic": 3.0, "bulk": 2.5})
    assert "bulk" not in add.attrs and why == ["out (16 rows x 64 fp32 per warp): atomics, 3.0 TB/s against bulk 2.5 TB/s"]
    add, why = _unasked(tmp_path, "sm_90", fp32_reduce_tbps={})
    assert "bulk" not in add.attrs and "no measured rate" in why[0]


def test_a_staging_buffer_that_costs_a_block_per_multiprocessor_is_refused(tmp_path):
    # 4 warps at up to 256 registers: the register file holds 2 blocks. Beside the operands the
    # 18 KiB staging buffer leaves room for 2 blocks in 64 KiB per multiprocessor (kept), for 1
    # in 48 KiB, where at least 2 fit without it (refused).
    add, _ = _unasked(tmp_path, "sm_90", lds_bytes_per_cu=64 * 1024, lds_bytes_per_block=64 * 1024)
    assert "bulk" in add.attrs
    add, why = _unasked(tmp_path, "sm_90", lds_bytes_per_cu=48 * 1024, lds_bytes_per_block=48 * 1024)
    assert "bulk" not in add.attrs and "leaves shared memory for 1 block(s) per multiprocessor, 2 without it" in why[0]


def test_an_expression_that_cannot_be_evaluated_is_named(tmp_path):
    with pytest.raises(SpecError, match=r"bulk_reductions must be true, false or an expression.*'no_such_axis'") as e:
        compile_kernel(load_spec(_spec(tmp_path, "no_such_axis")), 0, {"dtype": "bf16", "n": 64}, TUNABLES, load_target("sm_90"))
    assert "atomic_dot.yaml:" in str(e.value)
