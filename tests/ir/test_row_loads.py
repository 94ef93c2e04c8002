"""copy_row_loads (kgen/ir/passes/row_loads.py): loop loads too large to prefetch in registers
copied an iteration ahead into shared memory and read from there; and the barriers
(passes/barriers.py) that copies into the next slot, tensor-copy waits and rows each thread
copies for itself (checked on the emitted expressions) no longer need. What
the kernels compute is checked lane by lane (tests/codegen/test_dot_fragments.py, two_starts)
and on the GPU by the attention tests."""
import copy
import sys
from pathlib import Path

import pytest
import torch

from kgen.driver import compile_kernel
from kgen.errors import SpecError
from kgen.hw.descriptor import load_target
from kgen.ir.core import walk
from kgen.options import DEFAULT, CompileOptions
from kgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # helpers
import helpers  # noqa: E402
BWD = {"dtype": "bf16", "head_dim": 64, "causal": False, "deterministic": False}
ROWS = CompileOptions(shared_row_loads=True)
TILES = {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4, "DSPLIT": 1}


def dkdv(target="sm_90", options=ROWS, variant=BWD, tiles=TILES):
    return compile_kernel(load_spec(ROOT / "specs/fa2_bwd.yaml"), "dkdv", variant, tiles, load_target(target), options=options)


def inner_loop(k):
    return [op for op in walk(k.body) if op.kind == "for"][-1]


def tensor_of(k):
    """buffer (or slot view) id -> the tensor its copies read."""
    root = {id(op.result): op.operands[0] for op in walk(k.body) if op.kind == "slot"}
    copied = {id(root.get(id(op.operands[0]), op.operands[0])): op.attrs["tensor"] for op in walk(k.body) if op.kind == "copy_async"}
    return lambda v: copied.get(id(root.get(id(v), v)))


def test_the_backward_copies_its_lse_and_delta_rows_an_iteration_ahead():
    k = dkdv()
    name = tensor_of(k)
    loop = inner_loop(k)
    reads = [name(op.operands[0]) for op in loop.body.ops if op.kind == "read_shared"]
    assert sorted(reads) == ["delta", "lse"] and not any(op.kind == "load" for op in loop.body.ops)
    rows = [op for op in walk(k.body) if op.kind == "copy_async" and op.attrs["tensor"] in ("lse", "delta")]
    # one copy of each before the loop (the first query block) and one in it (the next)
    assert sorted(c.attrs["tensor"] for c in rows) == ["delta", "delta", "lse", "lse"]
    assert all(c.attrs["shape"] == (1, 64) and c.attrs["pred"] and not c.attrs.get("tma") for c in rows)
    allocs = [op for op in walk(k.body) if op.kind == "alloc_shared" and name(op.result) in ("lse", "delta")]
    assert [(a.attrs["slots"], a.attrs["slot_bytes"]) for a in allocs] == [(2, 256), (2, 256)]
    assert k.notes["row_loads"] == ["lse 64: copied an iteration ahead into shared memory",
                                    "delta 64: copied an iteration ahead into shared memory"]


def test_each_row_is_read_after_the_wait_for_its_copy():
    k = dkdv()
    name = tensor_of(k)
    body = inner_loop(k).body.ops
    for read in (op for op in body if op.kind == "read_shared"):
        waits = [i for i, op in enumerate(body[:body.index(read)]) if op.kind == "wait_async" and name(op.operands[0]) == name(read.operands[0])]
        assert waits, f"no wait for {name(read.operands[0])} before its read"


def test_rows_stay_loads_where_there_is_no_async_copy_or_by_default():
    for k in (dkdv("gfx942", tiles={"BLOCK_M": 64, "BLOCK_N": 32, "WARPS": 4, "DSPLIT": 1}), dkdv(options=DEFAULT)):
        assert not any(op.kind == "read_shared" for op in walk(k.body))
        loads = {op.attrs["tensor"] for op in inner_loop(k).body.ops if op.kind == "load"}
        assert {"delta", "lse"} <= loads  # (on gfx942 q and do are loaded too, staged_loads.py)


def test_loads_that_prefetch_takes_stay_in_registers():
    """scaled_rev asks for prefetch_loads: its row of scales (4 registers per thread) is issued an
    iteration ahead into registers, not copied."""
    ls = load_spec(ROOT / "tests/codegen/specs/scaled_rev.yaml")
    k = compile_kernel(ls, 0, {"dtype": "bf16"}, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16, "WARPS": 4}, load_target("sm_90"),
                       options=ROWS)
    assert not any(op.kind == "read_shared" for op in walk(k.body))
    assert any(op.kind == "load" and op.attrs["tensor"] == "s" and op.attrs.get("pred") for op in walk(k.body))


def test_copies_into_the_next_slot_need_no_barrier_after_one_in_the_iteration():
    """dkdv at head_dim 64: the first wait of the body ends the previous iteration's reads; every
    copy into the next iteration's slot after it goes without a barrier of its own, reads of
    this iteration's rows and tiles in between notwithstanding."""
    k = dkdv()
    body = inner_loop(k).body.ops
    first = next(i for i, op in enumerate(body) if op.kind == "wait_async" and op.attrs["barrier"])
    later = [op for op in body[first:] if op.kind == "copy_async"]
    assert len(later) == 4 and not any(op.attrs["sync_before"] for op in later)


def test_tensor_copy_waits_after_a_barrier_keep_none_but_the_last_keeps_one_if_nothing_follows():
    """At head_dim 128 (rows loaded, the default) the q wait has the body's first barrier; the do
    wait after it needs none (each thread waits on the mbarrier itself). The body has barriers
    after it (the staged ds), so none is added back."""
    k = dkdv(options=DEFAULT, tiles={"BLOCK_M": 64, "BLOCK_N": 128, "WARPS": 8, "DSPLIT": 1}, variant={**BWD, "head_dim": 128})
    waits = [op for op in inner_loop(k).body.ops if op.kind == "wait_async"]
    assert [(w.attrs["tma"], w.attrs["barrier"]) for w in waits] == [(True, True), (True, False)]


def row_walk(stage, target="sm_90", slots=2):
    ls = load_spec(ROOT / "tests/codegen/specs/row_walk.yaml")
    return compile_kernel(ls, 0, {"dtype": "bf16", "ROW": 1024}, {"ROWS": 4, "STAGE": stage, "SLOTS": slots}, load_target(target))


def test_a_kernel_that_asks_copies_its_rows_whatever_the_blocks_per_multiprocessor():
    """row_walk asks (`shared_row_loads: STAGE == 1`): its x row is copied though the copies cut
    the blocks a multiprocessor's shared memory holds (the rule for the options' copies); w, the
    same tile every iteration, stays a load."""
    k = row_walk(1)
    assert k.notes["row_loads"] == ["x 1x1024: copied an iteration ahead into shared memory"]
    assert sorted(op.attrs["tensor"] for op in walk(k.body) if op.kind == "copy_async") == ["x", "x"]
    assert any(op.kind == "load" and op.attrs["tensor"] == "w" for op in walk(k.body))
    assert k.shared_bytes >= 2 * 1024 * 2  # two slots of a bf16 row


def test_a_kernel_that_declines_or_a_target_without_async_copies_keeps_its_loads():
    for k in (row_walk(0), row_walk(1, "gfx942")):
        assert "row_loads" not in k.notes and not any(op.kind == "copy_async" for op in walk(k.body))
    # the spec's `false` wins over options that ask for the copies everywhere
    ls = load_spec(ROOT / "tests/codegen/specs/row_walk.yaml")
    k = compile_kernel(ls, 0, {"dtype": "bf16", "ROW": 1024}, {"ROWS": 4, "STAGE": 0, "SLOTS": 2}, load_target("sm_90"), options=ROWS)
    assert "row_loads" not in k.notes


@pytest.mark.parametrize("slots", [3, 4])
def test_rows_asked_for_in_more_slots_are_copied_that_many_iterations_ahead(slots):
    """row_walk with `row_load_slots: SLOTS`: the x row's buffer has SLOTS slots, the loop
    copies the row SLOTS - 1 iterations ahead (the prologue the first SLOTS - 1), and its wait
    leaves the SLOTS - 2 later copies in flight."""
    k = row_walk(1, slots=slots)
    alloc = next(op for op in walk(k.body) if op.kind == "alloc_shared")
    assert (alloc.attrs["slots"], alloc.attrs["slot_bytes"]) == (slots, 1024 * 2)
    loop = next(op for op in k.body.ops if op.kind == "for")
    assert sum(op.kind == "copy_async" for op in k.body.ops[:k.body.ops.index(loop)]) == slots - 1
    waits = [op for op in loop.body.ops if op.kind == "wait_async"]
    assert [w.attrs["pending"] for w in waits] == [slots - 2]
    assert k.shared_bytes >= slots * 1024 * 2


def test_copied_rows_are_read_back_in_16_byte_vectors():
    """A thread's registers of a copied row that are 8 consecutive bf16 columns, at a column
    that is a multiple of 8, are read with one 16-byte shared load (kgen/codegen/emit.py
    `_row_vector`), as the global load they replace read them."""
    from kgen.driver import build_kernel

    ls = load_spec(ROOT / "tests/codegen/specs/row_walk.yaml")
    built = build_kernel(ls, 0, {"dtype": "bf16", "ROW": 1024}, {"ROWS": 4, "STAGE": 1, "SLOTS": 2}, load_target("sm_90"))
    text = built.source + "".join(t for _, t in built.includes)
    buffers = {op.attrs["tensor"] for op in walk(compile_kernel(ls, 0, {"dtype": "bf16", "ROW": 1024},
                                                               {"ROWS": 4, "STAGE": 1, "SLOTS": 2}, load_target("sm_90")).body)
               if op.kind == "copy_async"}
    assert buffers == {"x"}
    reads = [line for line in text.splitlines() if "kg::copy_vec<8>(&" in line and "[tc0_" in line]
    assert len(reads) == 1 and "KG_FOR_STEP(e, " in reads[0]


def test_a_16384_wide_row_copied_with_its_sums_in_shared_memory_fits_the_registers():
    """rmsnorm_bwd's rows kernel at 16384-wide rows over 16 warps with x and dy copied through
    shared memory (RL 1) and dw in shared memory (SA 1): read back element by element, each
    16-bit element took a register of its own and the kernel spilled (nvcc 13.0: 128 registers,
    128 bytes of spill); read in vectors it fits in 128 without spilling."""
    sys.path.insert(0, str(ROOT / "tests" / "codegen"))
    from test_occupancy import _need

    from kgen.codeobjects import CodeObjects
    from kgen.driver import build_kernel

    _need("cuda")
    ls = load_spec(ROOT / "specs/rmsnorm_bwd.yaml")
    tiles = {"RL": 1, "SA": 1, "BLOCK_M": 1, "WARPS": 16, "OCC": 1, "ROWS": 64, "SPLIT": 1, "BLOCK_C": 256}
    res = build_kernel(ls, 0, {"dtype": "bf16", "ROW": 16384}, tiles, load_target("sm_90"), objects=CodeObjects()).resources
    assert res["spill_bytes"] == 0 and res["stack_bytes"] == 0 and res["registers"] <= 128


def _contexts(ctxs, macro):
    for c in ctxs:
        if c.get("macro") == macro:
            yield c
        yield from _contexts(c.get("body") or [], macro)


def _slots_per_thread(k, target):
    """Per thread (warp, lane): the buffer slots its copies write and those its reads of the
    copied rows read, from the emitted expressions (lane_sim evaluates them as C)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests" / "codegen"))
    from lane_sim import ProgramSim

    from kgen.codegen.emit import Emitter
    from kgen.codegen.render import name_values, tensor_dims

    name_values(k)
    emitter = Emitter(k, target, tensor_dims(k))
    ctxs = emitter.ops(k.body)
    sim = ProgramSim(k, target, {}, {}, macros=emitter.macros())
    sim.scalars, sim.regs, sim.block = {}, {}, (0, 0, 0)
    written, read = [], []
    for c in _contexts(ctxs, "copy_async"):
        slots = [set() for _ in range(sim.W * sim.L)]
        for i in range(c["iters"]):
            ch = sim.grid_shape(sim.ev(c["chunk"], i=i), 1)[..., 0]
            r, col = sim.ev(c["row"], c_=ch), sim.ev(c["col"], c_=ch)
            slot = np.asarray(sim.ev(c["slot"], r_=r, k_=col, i=i, c_=ch))
            slot = np.broadcast_to(slot[..., 0] if slot.ndim == 3 else slot, (sim.W, sim.L))
            for t, (s0, ok) in enumerate(zip(slot.reshape(-1), (ch < c["chunks"]).reshape(-1))):
                if ok:
                    slots[t] |= set(range(int(s0), int(s0) + c["vec"]))
        written.append(slots)
    # the reads of copied rows (not those of a buffer of sums, passes/shared_sums.py)
    from kgen.codegen.emit import name as c_name

    root = {id(op.result): op.operands[0] for op in walk(k.body) if op.kind == "slot"}
    copied = {id(op.operands[0]) for op in walk(k.body) if op.kind == "copy_async"}
    copied |= {id(root.get(i)) for i in list(copied) if i in root}
    rows = {c_name(op.result) for op in walk(k.body) if op.kind == "read_shared"
            and (id(op.operands[0]) in copied or id(root.get(id(op.operands[0]))) in copied)}
    for c in _contexts(ctxs, "read_shared"):
        if c["out"]["name"] not in rows:
            continue
        n, vec = c["out"]["n"], c["vec"]
        first = sim.grid_shape(sim.ev(c["slot"], e=np.arange(0, n, vec).reshape(1, 1, -1)), n // vec)
        assert not (first % vec).any(), f"a {vec}-element read of {c['src']} starts off a {vec}-element boundary"
        every = (first[..., :, None] + np.arange(vec)).reshape(sim.W * sim.L, n)
        read.append([set(map(int, row)) for row in every])
    return written, read


@pytest.mark.parametrize("spec, variant, tiles", [
    ("tests/codegen/specs/row_walk.yaml", {"dtype": "bf16", "ROW": 1024}, {"ROWS": 4, "STAGE": 1, "SLOTS": 2}),
    ("specs/rmsnorm_bwd.yaml", {"dtype": "bf16", "ROW": 16384},
     {"RL": 1, "SA": 1, "BLOCK_M": 1, "WARPS": 16, "OCC": 1, "ROWS": 64, "SPLIT": 1, "BLOCK_C": 256}),
    ("specs/layernorm_bwd.yaml", {"dtype": "bf16", "ROW": 4096},
     {"RL": 1, "SA": 0, "BLOCK_M": 1, "WARPS": 8, "ROWS": 64, "SPLIT": 1, "BLOCK_C": 256}),
])
def test_a_row_each_thread_copies_and_alone_reads_back_has_no_barrier_after_its_wait(spec, variant, tiles):
    """Where every element a thread reads of a copied row lies in a chunk it copies itself
    (passes/row_loads.py `_copied_by_its_reader`), the copy, its wait and its read are
    `private`: the wait is no block barrier, nor is there one before the next copy. Checked on
    the emitted expressions: each thread reads only slots its own copies write."""
    target = load_target("sm_90")
    ls = load_spec(ROOT / spec)
    k = compile_kernel(ls, 0, variant, tiles, target)
    copies = [op for op in walk(k.body) if op.kind == "copy_async"]
    waits = [op for op in walk(k.body) if op.kind == "wait_async"]
    assert copies and all(op.attrs["private"] and not op.attrs["sync_before"] for op in copies)
    assert waits and all(op.attrs["private"] and not op.attrs["barrier"] for op in waits)
    written, read = _slots_per_thread(copy.deepcopy(k), target)
    assert written and read
    for mine in read:
        for t, slots in enumerate(mine):
            assert any(slots <= w[t] for w in written), f"thread {t} reads slots no copy of its own writes"


def test_rows_other_threads_copy_keep_the_barrier_after_the_wait():
    """The backward's lse and delta rows, read in a wgmma accumulator's column layout (the
    lanes of a row group hold the same columns), are read by other threads than copied them
    (the emitted expressions say so): nothing is private, the waits keep their barriers."""
    k = dkdv()
    ops = [op for op in walk(k.body) if op.kind in ("copy_async", "wait_async", "read_shared")]
    assert ops and not any(op.attrs.get("private") for op in ops)
    written, read = _slots_per_thread(copy.deepcopy(k), load_target("sm_90"))
    assert read and any(not any(s <= w[t] for w in written) for mine in read for t, s in enumerate(mine))


def test_row_load_slots_outside_two_to_four_is_an_error_at_its_place(tmp_path):
    text = (ROOT / "tests/codegen/specs/row_walk.yaml").read_text().replace("SLOTS: [2, 3, 4]", "SLOTS: [2, 5]")
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(SpecError) as e:
        compile_kernel(load_spec(tmp_path / "bad.yaml"), 0, {"dtype": "bf16", "ROW": 1024}, {"ROWS": 4, "STAGE": 1, "SLOTS": 5},
                       load_target("sm_90"))
    line = text.splitlines().index("    row_load_slots: SLOTS") + 1
    assert f"bad.yaml:{line}:" in str(e.value) and "row_load_slots must be an integer from 2 to 4" in str(e.value)


def test_an_expression_that_names_nothing_known_is_an_error_at_its_place(tmp_path):
    text = (ROOT / "tests/codegen/specs/row_walk.yaml").read_text().replace("STAGE == 1", "STAGES == 1")
    (tmp_path / "bad.yaml").write_text(text)
    ls = load_spec(tmp_path / "bad.yaml")
    with pytest.raises(SpecError) as e:
        compile_kernel(ls, 0, {"dtype": "bf16", "ROW": 1024}, {"ROWS": 4, "STAGE": 1, "SLOTS": 2}, load_target("sm_90"))
    line = text.splitlines().index("    shared_row_loads: STAGES == 1") + 1
    assert f"bad.yaml:{line}:" in str(e.value) and "shared_row_loads must be true, false or an expression" in str(e.value)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("slots", [2, 3, 4])
def test_rows_copied_through_shared_memory_compute_what_the_reference_does(slots):
    """row_walk with its copies (STAGE = 1) in 2, 3 and 4 slots on the GPU: 37 rows (the last
    program's copies past M read zeros and store nothing), 1000 of 1024 columns, fresh bf16
    inputs, against float64 within twice the error of the same computation in bf16."""
    import kgen

    ls = load_spec(ROOT / "tests/codegen/specs/row_walk.yaml")
    op = kgen.load(ROOT / "tests/codegen/specs/row_walk.yaml")
    op.force_tunables({"ROWS": 4, "STAGE": 1, "SLOTS": slots})
    x, w = torch.randn(37, 1000, device="cuda").bfloat16(), torch.randn(1000, device="cuda").bfloat16()
    got = op(x, w)
    assert op.last_tunables == {"ROWS": 4, "STAGE": 1, "SLOTS": slots}
    helpers.check_outputs(ls, {"y": got.cpu()}, {"x": x.cpu(), "w": w.cpu()}, {"eps": 1e-6}, {"dtype": "bf16", "ROW": 1024})
