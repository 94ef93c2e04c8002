"""pipeline_staged_loads (kgen/ir/passes/staged_loads.py): staged loads of a loop issued one
iteration ahead into registers and written into the other slot after the body's compute, on a
target without cp.async. What the emitted kernels compute, and that their barriers leave no
race, is checked in the wave64 emulation (tests/emulate)."""
from pathlib import Path

from kgen.build import spill_retry_options, tunable_candidates
from kgen.driver import compile_kernel
from kgen.hw.descriptor import load_target
from kgen.ir.core import walk
from kgen.options import DEFAULT, CompileOptions
from kgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
ATTENTION = {"dtype": "bf16", "head_dim": 64, "causal": False}


def lower(spec, variant, target="gfx942", options=DEFAULT, tunables=None):
    ls = load_spec(ROOT / "specs" / spec)
    t = load_target(target) if isinstance(target, str) else target
    return compile_kernel(ls, ls.spec.kernels[-1].name, variant, {**tunable_candidates(ls, variant)[0], **(tunables or {})}, t, options=options)


def kinds(block, *wanted):
    return [op for op in block.ops if op.kind in wanted]


def test_the_forward_loads_k_and_v_an_iteration_ahead_and_writes_k_into_the_other_slot():
    k = lower("fa2_fwd.yaml", ATTENTION)
    # dense: the key blocks below SK, then the last partial one (kgen/lang/phases.py), each loop
    # with its own buffers
    loops = [op for op in k.body.ops if op.kind == "for"]
    assert len(loops) == 2
    for loop in loops:
        # the loop's loads are of the next key block, predicated on there being one
        loads = kinds(loop.body, "load")
        assert [ld.attrs["tensor"] for ld in loads] == ["k", "v"] and all(ld.attrs["pred"] for ld in loads)
        # written after the body's last dot, k into the next slot (no barrier before it), v into
        # its one buffer behind the barrier that ends the reads of this iteration
        body = loop.body.ops
        writes = kinds(loop.body, "stage_into")
        assert max(body.index(d) for d in kinds(loop.body, "dot")) < body.index(writes[0])
        assert [(w.attrs["ahead"], w.attrs["sync_before"], w.attrs["sync_after"]) for w in writes] == \
            [(True, False, False), (False, True, True)]
        # before the loop: its first key block's loads, predicated on the loop running, and writes
        first = [op for op in k.body.ops[:k.body.ops.index(loop)] if op.kind in ("load", "stage_into")]
        assert [(op.kind, op.attrs.get("tensor")) for op in first][-4:] == \
            [("load", "k"), ("stage_into", None), ("load", "v"), ("stage_into", None)]
        assert all(op.attrs["pred"] for op in first[-4:] if op.kind == "load")
    allocs = [op for op in k.body.ops if op.kind == "alloc_shared"]
    assert [(a.attrs["role"], a.attrs["slots"]) for a in allocs] == [("b", 2), ("b", 1)] * 2
    assert k.notes["staged_loads"] == ["k 64x64: loaded an iteration ahead into the other of 2 slots",
                                       "v 64x64: loaded an iteration ahead into registers, 1 slot"] * 2


def test_a_second_slot_that_would_cost_a_block_per_cu_is_not_taken():
    """matmul's 64x64 blocks use 10 KiB, six blocks per CU; a second slot of a and b would leave
    three, so each keeps one slot (the write waits for the reads) and still loads ahead."""
    k = lower("matmul.yaml", {"dtype": "bf16"})
    assert [a.attrs["slots"] for a in walk(k.body) if a.kind == "alloc_shared"] == [1, 1]
    assert k.shared_bytes == 10240
    loop = next(op for op in k.body.ops if op.kind == "for")
    assert [op.kind for op in loop.body.ops if op.kind in ("load", "dot", "stage_into")] == \
        ["load", "load", "dot", "stage_into", "stage_into"]


def test_off_or_where_cp_async_copies_them_the_stages_stay():
    off = lower("fa2_fwd.yaml", ATTENTION, options=CompileOptions(register_pipeline=False))
    assert not [op for op in walk(off.body) if op.kind in ("stage_into", "alloc_shared")]
    hopper = lower("fa2_fwd.yaml", ATTENTION, "sm_80")
    assert not [op for op in walk(hopper.body) if op.kind == "stage_into"]


def test_a_staged_load_of_a_tensor_the_kernel_writes_stays_in_place(tmp_path):
    # b's blocks read from the output instead: a later program's store could land between
    spec = (ROOT / "specs" / "matmul.yaml").read_text().replace("load(b[block(k, BLOCK_K), cols])",
                                                                "load(c[block(k, BLOCK_K), cols])")
    path = tmp_path / "matmul.yaml"
    path.write_text(spec)
    ls = load_spec(path)
    variant = {"dtype": "bf16"}
    k = compile_kernel(ls, 0, variant, tunable_candidates(ls, variant)[0], load_target("gfx942"))
    assert [op.operands[1].shape for op in walk(k.body) if op.kind == "stage_into"] == [(64, 32)] * 2  # a only


def test_a_kernel_that_spills_with_them_is_retried_without_first():
    forms = spill_retry_options(load_target("gfx942"), staged=True)
    assert forms[0] == CompileOptions(register_pipeline=False)
    assert CompileOptions(register_pipeline=False) not in spill_retry_options(load_target("gfx942"))
