"""The pipeline passes on the shipped attention specs and small test specs: what each decides.

Correctness of the emitted code is checked lane by lane in tests/codegen and on the GPU in
tests/ops; these tests pin the decisions themselves, so that a change in a pass shows up here
with a name rather than as a slower kernel."""
from pathlib import Path

import pytest

from kgen.hw.descriptor import load_target
from kgen.ir.core import walk
from kgen.ir.passes.accumulate import MAX_REGS
from kgen.ir.pipeline import compile_kernel
from kgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
FWD = {"BLOCK_M": 128, "BLOCK_N": 64, "WARPS": 8}
BWD = {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 8}


def lower(spec, kernel, variant, tunables, target):
    return compile_kernel(load_spec(ROOT / spec), kernel, variant, tunables, load_target(target))


def ops(k, kind):
    return [op for op in walk(k.body) if op.kind == kind]


@pytest.mark.parametrize("head_dim, folded", [(64, True), (128, False)])
def test_small_accumulators_are_accumulated_in_place(head_dim, folded):
    """acc * alpha + dot(p, v): with 8 warps over 128 rows, head_dim 64 is 32 fp32 registers per
    thread (folded), 128 is 64 (left alone: measured slower folded, see accumulate.py)."""
    k = lower("specs/fa2_fwd.yaml", 0, {"dtype": "bf16", "head_dim": head_dim, "causal": False}, FWD, "sm_90")
    pv = ops(k, "dot")[1:]  # the second dot of the loop: p @ v
    assert len(pv) == 1 and pv[0].result.shape == (128, head_dim)
    acc = pv[0].operands[2]
    from_zero = any(op.kind == "full" and op.result is acc for op in walk(k.body))
    assert from_zero != folded
    assert (pv[0].result.layout.nregs <= MAX_REGS) == folded


def test_the_forward_reads_p_from_registers_on_mma_and_stages_it_on_mfma():
    variant = {"dtype": "bf16", "head_dim": 64, "causal": False}
    nv = lower("specs/fa2_fwd.yaml", 0, variant, FWD, "sm_90")
    amd = lower("specs/fa2_fwd.yaml", 0, variant, {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4}, "gfx942")
    assert [(d.attrs["a_load"], d.attrs["b_load"]) for d in ops(nv, "dot")] == [("matrix", "matrix"), ("reg", "matrix_trans")]
    assert [(d.attrs["a_load"], d.attrs["b_load"]) for d in ops(amd, "dot")] == [("vec", "vec"), ("vec", "vec")]


def test_the_forward_prefetches_k_and_v_one_iteration_ahead():
    k = lower("specs/fa2_fwd.yaml", 0, {"dtype": "bf16", "head_dim": 128, "causal": True}, FWD, "sm_90")
    loop = ops(k, "for")[0]
    copies = [op for op in loop.body.ops if op.kind == "copy_async"]
    waits = [op for op in loop.body.ops if op.kind == "wait_async"]
    assert [c.attrs["tensor"] for c in copies] == ["k", "v"] and all(c.attrs["pred"] for c in copies)
    assert [w.attrs["pending"] for w in waits] == [1, 1]
    # the first iteration's copies are issued before the loop, in the same order
    assert [op.attrs["tensor"] for op in ops(k, "copy_async") if op not in copies] == ["q", "k", "v"]
    barriers = [op for op in loop.body.ops if op.attrs.get("sync_before") or op.kind == "wait_async"]
    assert len(barriers) == 4  # after each wait, before each prefetch
    amd = lower("specs/fa2_fwd.yaml", 0, {"dtype": "bf16", "head_dim": 128, "causal": True},
                {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4}, "gfx942")
    assert not ops(amd, "copy_async")  # the descriptor lists no cp.async


def test_a_tile_read_both_ways_is_staged_once():
    """dkdv reads k as kt.T (scores) and as kt (dq), q and do both ways too: one buffer each,
    filled by an async copy, the transposed reads through views (kt.T, vt.T, and p.T and ds.T
    of the staged register tiles p and ds)."""
    k = lower("specs/fa2_bwd.yaml", 1, {"dtype": "bf16", "head_dim": 128, "causal": False, "deterministic": False}, BWD, "sm_90")
    assert sorted({op.attrs["tensor"] for op in ops(k, "copy_async")}) == ["do", "k", "q", "v"]
    assert len(ops(k, "alloc_shared")) == 4
    views = ops(k, "view_shared")
    buffers = {a.result for a in ops(k, "alloc_shared")} | {s.result for s in ops(k, "stage")}
    assert len(views) == 4 and {v.operands[0] for v in views} <= buffers and len(ops(k, "stage")) == 3
    assert not ops(k, "trans")  # the register transposes the views replaced are gone


def test_prefetches_keep_the_prologue_order_when_they_share_an_anchor():
    """matmul's a and b tiles are both last read by its one dot: the loop issues their next copies
    in the prologue's order, so the wait counts of the first iteration equal the others'."""
    k = lower("specs/matmul.yaml", 0, {"dtype": "bf16"}, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "WARPS": 4}, "sm_90")
    loop = ops(k, "for")[0]
    inside = [op.attrs["tensor"] for op in loop.body.ops if op.kind == "copy_async"]
    before = [op.attrs["tensor"] for op in ops(k, "copy_async") if op not in loop.body.ops]
    assert inside == before == ["a", "b"]
    assert [op.attrs["pending"] for op in loop.body.ops if op.kind == "wait_async"] == [1, 0]
