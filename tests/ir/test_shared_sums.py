"""keep_sums_in_shared (kgen/ir/passes/shared_sums.py): the fp32 sums a loop carries kept in
shared memory, each thread's elements its own, where the kernel asks (`shared_accumulators`);
the row backwards' dw and db (specs/layernorm_bwd.yaml and rmsnorm_bwd.yaml, tunable SA)."""
import sys
from pathlib import Path

import pytest
import torch

from kgen.driver import build_kernel, compile_kernel
from kgen.errors import DoesNotFit
from kgen.hw.descriptor import load_target
from kgen.ir.attrs import attr
from kgen.ir.core import walk
from kgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # helpers
import helpers  # noqa: E402

LN_BWD = ROOT / "specs/layernorm_bwd.yaml"
WHOLE = {"RL": 0, "SA": 1, "BLOCK_M": 1, "WARPS": 16, "ROWS": 64, "SPLIT": 1}


def rows(spec=LN_BWD, tiles=WHOLE, row=16384, target="sm_90"):
    return compile_kernel(load_spec(spec), "rows", {"dtype": "bf16", "ROW": row}, tiles, load_target(target))


def loop_of(k):
    return next(op for op in walk(k.body) if op.kind == "for")


def test_dw_and_db_leave_the_loop_carried_values_for_shared_memory():
    k = rows()
    loop = loop_of(k)
    assert len(loop.body.args) == 1 and not loop.results  # the induction variable alone
    allocs = [op for op in k.body.ops if op.kind == "alloc_shared"]
    # 16 warps of 32 threads, 32 columns of fp32 a thread: 64 KB a sum, laid out by thread
    assert [(a.attrs["smem_layout"], a.attrs["bytes"]) for a in allocs] == [("threads", 65536)] * 2
    assert k.shared_bytes >= 2 * 65536
    assert sorted(k.notes["shared_sums"]) == ["db_acc 16384: carried in shared memory, 65536 bytes",
                                               "dw_acc 16384: carried in shared memory, 65536 bytes"]


def test_each_iteration_reads_and_writes_back_its_own_elements_without_a_barrier():
    k = rows()
    body = loop_of(k).body.ops
    reads = [op for op in body if op.kind == "read_shared"]
    writes = [op for op in body if op.kind == "stage_into"]
    assert len(reads) == len(writes) == 2
    assert all(attr(op, "private") for op in reads + writes)
    assert not any(attr(op, "sync_before") or attr(op, "sync_after") for op in writes)
    for read, write in zip(reads, writes):  # read, add, write back: the add reads the read
        add = body[body.index(read) + 1]
        assert add.kind == "binary" and add.attrs["fn"] == "add" and read.result in add.operands
        assert write.operands[1] is add.result
    # before the loop: the zeros written once (a barrier before the loop's reads); after it: read
    # back, as any read
    first = [op for op in k.body.ops if op.kind == "stage_into"]
    assert len(first) == 2 and not any(attr(op, "private") for op in first)
    after = k.body.ops[k.body.ops.index(loop_of(k)) + 1:]
    assert sum(op.kind == "read_shared" and not attr(op, "private") for op in after) == 2


def test_the_thread_layout_is_consecutive_16_byte_vectors():
    ls = load_spec(LN_BWD)
    bk = build_kernel(ls, 0, {"dtype": "bf16", "ROW": 16384}, WHOLE, load_target("sm_90"))
    # register e of thread t: vector e / 4 of every thread in turn, 4 fp32 a vector
    assert "kg::copy_vec<4>(&dw_acc_shared[e / 4 * 2048 + (lane + warp * 32) * 4 + e % 4]" in bk.text


def test_without_the_ask_the_sums_stay_in_registers():
    k = rows(tiles={**WHOLE, "SA": 0, "SPLIT": 2})
    assert len(loop_of(k).body.args) == 3 and not any(op.kind == "alloc_shared" for op in walk(k.body))


def test_sums_larger_than_the_shared_memory_do_not_fit():
    """gfx942's 64 KiB of LDS hold neither 64 KB sum of a 16384-wide row over 16 waves of 64."""
    with pytest.raises(DoesNotFit, match="shared memory"):
        rows(target="gfx942")


@pytest.mark.parametrize("spec, tiles", [
    ("layernorm_bwd", {"RL": 0, "SA": 1, "BLOCK_M": 2, "WARPS": 4, "ROWS": 16, "SPLIT": 1}),
    ("rmsnorm_bwd", {"RL": 0, "SA": 1, "OCC": 1, "BLOCK_M": 1, "WARPS": 4, "ROWS": 16, "SPLIT": 1}),
])
def test_the_row_backwards_with_shared_sums_match_float64_in_emulation(spec, tiles):
    """gfx942's kernels on the CPU (kgen.emulate), the form forced; rows not a multiple of ROWS,
    columns not of the tile."""
    import kgen
    from kgen.backends import available
    from kgen.knobs import knobs

    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    op = kgen.load(ROOT / "specs" / f"{spec}.yaml", target="gfx942", emulate=True)
    helpers.check_row_backward(op, spec, tiles, 37, 1000, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("spec, tiles", [
    ("layernorm_bwd", WHOLE),
    ("rmsnorm_bwd", {"OCC": 1, **WHOLE}),
])
def test_the_shipped_whole_row_forms_match_float64_on_the_gpu(spec, tiles):
    """The 16384-wide forms the tuning database ships (64 rows a program, 16 warps, the sums in
    128 or 64 KB of shared memory): 300 rows (the last program's past M), 9000 columns."""
    import kgen

    helpers.check_row_backward(kgen.load(ROOT / "specs" / f"{spec}.yaml"), spec, tiles, 300, 9000, "cuda")
