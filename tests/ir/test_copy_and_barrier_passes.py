"""issue_copies_early, the hoisting of invariant layout conversions, and the barriers that
merge_stage_barriers and drop_scratch_barriers leave out: what each decides on the chunked
scan's kernels (their generated code ran on the H200: tests/ops/test_ssd_gpu.py)."""
from pathlib import Path

from kgen.build import tunable_candidates
from kgen.hw.descriptor import load_target
from kgen.ir.core import Op, Value, walk
from kgen.ir.passes.early_copies import _crossable
from kgen.ir.analysis import scratch_bytes
from kgen.driver import compile_kernel
from kgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
VARIANT = {"dtype": "bf16", "chunk_size": 256, "headdim": 64, "dstate": 128, "packed": False, "dt_dtype": "bf16", "gated": False}


def lower(spec: str, kernel: str, target="sm_90"):
    ls = load_spec(ROOT / "specs" / spec)
    index = [k.name for k in ls.spec.kernels].index(kernel)
    t = load_target(target) if isinstance(target, str) else target
    return compile_kernel(ls, index, VARIANT, tunable_candidates(ls, VARIANT)[0], t)


def top(k, *kinds):
    return [op for op in k.body.ops if op.kind in kinds]


def test_the_copies_of_a_product_are_in_flight_together():
    """dx's B_s . G^T before its loop and C_t . H_c after it: both copies of each product are
    issued before the first of their waits, and only the second wait ends in a barrier."""
    k = lower("ssd_bwd.yaml", "dx")
    seq = [(op.kind, op.attrs.get("tensor")) for op in top(k, "copy_async", "wait_async", "dot", "for")
           if not op.attrs.get("pred")]
    assert seq == [("copy_async", "B"), ("copy_async", "out_grad_state"), ("wait_async", None), ("wait_async", None),
                   ("dot", None), ("for", None),
                   ("copy_async", "C"), ("copy_async", "prev_states"), ("wait_async", None), ("wait_async", None),
                   ("dot", None)]
    waits = top(k, "wait_async")
    assert [w.attrs["barrier"] for w in waits] == [False, True, False, True]


def test_a_cp_async_wait_leaves_the_later_groups_in_flight():
    """Without the copy engine the same copies are cp.async groups: the first product's first
    wait lets the second group run on (pending 1), the second waits for all."""
    hopper = load_target("sm_90")
    k = lower("ssd_bwd.yaml", "dx", hopper.model_copy(update={"async_copy": ("cp.async",)}))
    waits = top(k, "wait_async")
    assert not any(w.attrs.get("tma") for w in waits)
    assert [w.attrs["pending"] for w in waits] == [1, 0, 1, 0]


def test_a_copy_stays_behind_a_store_to_what_it_reads_and_behind_shared_memory_work():
    copy = Op("copy_async", [Value((64, 64), "bf16", place="shared")], [], {"tensor": "x"})
    tile = Value((64, 64), "fp32")
    assert _crossable(Op("store", [tile], [], {"tensor": "y"}), copy, set())
    assert not _crossable(Op("store", [tile], [], {"tensor": "x"}), copy, set())
    assert not _crossable(Op("atomic_add", [tile], [], {"tensor": "x"}), copy, set())
    assert _crossable(Op("load", [], [tile], {"tensor": "x"}), copy, set())
    assert not _crossable(Op("load", [], [tile], {"tensor": "x"}), copy, {id(tile)})  # defines its index
    for kind in ("dot", "stage", "convert", "for"):
        assert not _crossable(Op(kind, [], [Value((64, 64), "fp32")], {}), copy, set())


def test_a_loop_invariant_layout_conversion_runs_once_before_the_loop():
    """chunk_scan's cumsum column is converted to the (rows x sources) weights' layout: before
    the loop, not in every step (two barriers each)."""
    k = lower("ssd_fwd.yaml", "chunk_scan")
    loop = top(k, "for")[0]
    assert not [op for op in walk(loop.body) if op.kind == "convert"]
    assert len(top(k, "convert")) == 1


def _overlaps(a, b):
    return a[0] < b[1] and b[0] < a[1]


def test_a_scratch_write_no_pending_read_overlaps_needs_no_barrier_first():
    """dx's loop sums each step's (rows x positions) tile over the rows across the warps: the
    step's earlier shared reads are its products' operands (the dy slots), at other offsets, so
    the sum writes its scratch without a barrier. The epilogue's sum over the rows writes where
    the C and prev_states tiles its product has just read lie: its barrier stays."""
    k = lower("ssd_bwd.yaml", "dx")
    loop = top(k, "for")[0]
    inner = [op for op in loop.body.ops if op.kind == "reduce" and scratch_bytes(op)]
    assert len(inner) == 1 and inner[0].attrs["sync_before"] is False
    dy = next(op for op in k.body.ops if op.kind == "alloc_shared" and op.attrs.get("slots"))
    span = (inner[0].attrs["smem_offset"], inner[0].attrs["smem_offset"] + scratch_bytes(inner[0]))
    assert not _overlaps(span, (dy.attrs["smem_offset"], dy.attrs["smem_offset"] + dy.attrs["bytes"]))
    after = [op for op in k.body.ops[k.body.ops.index(loop):] if op.kind == "reduce" and scratch_bytes(op)]
    assert len(after) == 1 and after[0].attrs["sync_before"] is True
    c_tile = top(k, "alloc_shared")[-2]
    span = (after[0].attrs["smem_offset"], after[0].attrs["smem_offset"] + scratch_bytes(after[0]))
    assert _overlaps(span, (c_tile.attrs["smem_offset"], c_tile.attrs["smem_offset"] + c_tile.attrs["bytes"]))



def test_the_first_shared_write_of_a_kernel_needs_no_barrier():
    """Nothing has read shared memory when a kernel starts: dx's first copy (sm_90) and its first
    register write into a buffer (gfx942, passes/staged_loads.py) go without a barrier before."""
    for target in ("sm_90", "gfx942"):
        k = lower("ssd_bwd.yaml", "dx", target)
        first = next(op for op in walk(k.body) if op.kind in ("stage", "stage_into", "copy_async"))
        assert first.attrs["sync_before"] is False, target
