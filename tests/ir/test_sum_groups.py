"""group_warp_sums (kgen/ir/passes/sum_groups.py): sums across warps side by side write their
slices, pass one barrier and read (in emulation: tests/emulate/test_runner.py); a sum that reads the one before it, or a group that would
cost more shared memory than the bound, stays alone."""
import copy
from pathlib import Path

import pytest

from kgen.driver import build_kernel, compile_kernel
from kgen.hw.descriptor import load_target
from kgen.ir.analysis import scratch_bytes
from kgen.ir.attrs import attr
from kgen.ir.core import walk
from kgen.ir.passes.sum_groups import GROUP_GROWTH_BYTES
from kgen.ir.verify import VerifyError, verify
from kgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]

LN_BWD = ROOT / "specs/layernorm_bwd.yaml"
ONE_ROW = {"RL": 0, "SA": 0, "BLOCK_M": 1, "WARPS": 8, "ROWS": 16, "SPLIT": 1, "BLOCK_C": 256}


def warp_sums(k):
    return [op for op in walk(k.body) if op.kind == "reduce" and scratch_bytes(op)]


def test_layernorm_bwd_row_sums_share_one_barrier():
    k = compile_kernel(load_spec(LN_BWD), "rows", {"dtype": "bf16", "ROW": 4096}, ONE_ROW, load_target("sm_90"))
    loop = next(op for op in walk(k.body) if op.kind == "for")
    sums = [op for op in loop.body.ops if op.kind == "reduce" and scratch_bytes(op)]
    assert [op.attrs["axis"] for op in sums] == [1, 1]  # sum(g) and sum(g * xhat)
    first, second = sums
    body = loop.body.ops
    assert attr(first, "joins_next") and not attr(second, "joins_next")
    assert body.index(second) == body.index(first) + 1
    lo1, lo2 = first.attrs["smem_offset"], second.attrs["smem_offset"]
    assert lo1 + scratch_bytes(first) <= lo2 or lo2 + scratch_bytes(second) <= lo1  # slices side by side
    # in a loop the previous iteration's reads may be pending: the group waits before its writes
    assert attr(first, "sync_before") and attr(second, "sync_before")


def test_the_group_is_one_statement_with_one_barrier_between_its_writes_and_reads():
    ls = load_spec(LN_BWD)
    bk = build_kernel(ls, 0, {"dtype": "bf16", "ROW": 4096}, ONE_ROW, load_target("sm_90"))
    text = "".join(src for _, src in bk.includes)
    writes = text.index("scratch1_[(warp & 7) * 1 + 0] = ")
    assert text.index("scratch0_[(warp & 7) * 1 + 0] = ") < writes
    between = text[text.index("scratch0_ = "):text.index("float a_ = scratch1_[lane & 7]")]
    assert between.count("kg::sync();") == 2  # before the writes (the loop) and between writes and reads
    assert text.count("kg::sync();") == 2  # the loop's only barriers: the two sums had four


def test_a_sum_that_reads_the_sum_before_it_stays_alone():
    """layernorm's forward: the variance's sum reads the mean."""
    k = compile_kernel(load_spec(ROOT / "specs/layernorm.yaml"), "fwd", {"dtype": "bf16", "ROW": 4096},
                       {"BLOCK_M": 1, "WARPS": 8, "OCC": 1}, load_target("sm_90"))
    sums = warp_sums(k)
    assert len(sums) == 2 and not any(attr(op, "joins_next") for op in sums)


def test_a_group_that_would_grow_shared_memory_past_the_bound_stays_apart():
    """Two rows a program: dw's and db's column sums across the rows' warps take 2 x 4096 floats
    each, far above the bound; the row sums beside them still share their barrier."""
    tiles = {"RL": 0, "SA": 1, "BLOCK_M": 2, "WARPS": 8, "ROWS": 16, "SPLIT": 1, "BLOCK_C": 256}
    k = compile_kernel(load_spec(LN_BWD), "rows", {"dtype": "bf16", "ROW": 4096}, tiles, load_target("sm_90"))
    columns = [op for op in warp_sums(k) if op.attrs["axis"] == 0]
    rows = [op for op in warp_sums(k) if op.attrs["axis"] == 1]
    assert len(columns) == 2 and all(scratch_bytes(op) > GROUP_GROWTH_BYTES for op in columns)
    assert not any(attr(op, "joins_next") for op in columns)
    assert [attr(op, "joins_next") for op in rows] == [True, False]


def test_the_verifier_rejects_a_group_whose_next_op_is_not_a_sum_across_warps():
    k = compile_kernel(load_spec(ROOT / "specs/layernorm.yaml"), "fwd", {"dtype": "bf16", "ROW": 4096},
                       {"BLOCK_M": 1, "WARPS": 8, "OCC": 1}, load_target("sm_90"))
    k = copy.deepcopy(k)
    warp_sums(k)[-1].attrs["joins_next"] = True  # the last sum: what follows is no sum
    with pytest.raises(VerifyError, match="joins the next"):
        verify(k, "test")
