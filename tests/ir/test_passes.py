"""The pipeline passes on the shipped attention specs and small test specs: what each decides.

Correctness of the emitted code is checked lane by lane in tests/codegen and on the GPU in
tests/ops; these tests pin the decisions themselves, so that a change in a pass shows up here
with a name rather than as a slower kernel."""
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest

from kgen.build import tunable_candidates
from kgen.spec.candidates import complete_tunables
from kgen.hw.descriptor import load_target
from kgen.ir.core import walk
from kgen.ir.passes.accumulate import MAX_REGS
from kgen.driver import compile_kernel
from kgen.options import DEFAULT, CompileOptions
from kgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
FWD = {"BLOCK_M": 128, "BLOCK_N": 64, "WARPS": 8}
BWD = {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 8, "DSPLIT": 1}
UNSPECIALIZED = CompileOptions(warp_specialize=False)
NO_ROWS = CompileOptions(shared_row_loads=False)  # lse and delta loaded, not copied (tests/ir/test_row_loads.py)


def lower(spec, kernel, variant, tunables, target, options=DEFAULT):
    """The kernel's IR with `tunables`; those not given take the first allowed choice that agrees
    with them (kgen/spec/candidates.py), else the variant's first allowed choice."""
    ls = load_spec(ROOT / spec)
    tunables = {**tunable_candidates(ls, variant)[0], **complete_tunables(ls, variant, tunables)}
    return compile_kernel(ls, kernel, variant, tunables, load_target(target), options=options)


def ops(k, kind):
    return [op for op in walk(k.body) if op.kind == kind]


@pytest.mark.parametrize("target, head_dim, folded", [("sm_80", 64, True), ("sm_80", 128, False), ("sm_90", 128, True)])
def test_small_accumulators_are_accumulated_in_place(target, head_dim, folded):
    """acc * alpha + dot(p, v): with 8 warps over 128 rows on mma.sync, head_dim 64 is 32 fp32
    registers per thread (folded), 128 is 64 (left alone: measured slower folded, see
    accumulate.py). wgmma (sm_90) always accumulates in place."""
    k = lower("specs/fa2_fwd.yaml", "fwd", {"dtype": "bf16", "head_dim": head_dim, "causal": False}, FWD, target)
    # p @ v: the second dot of each loop (dense: the key blocks below SK, then the last partial
    # one), and the last block's after the loops
    dots = ops(k, "dot")
    pv = [d for d in dots if d.loc.line != dots[0].loc.line]
    assert len(dots) == 5 and len(pv) == 3 and all(d.result.shape == (128, head_dim) for d in pv)
    for d in pv:
        acc = d.operands[2]
        from_zero = any(op.kind == "full" and op.result is acc for op in walk(k.body))
        assert from_zero != folded
        if target == "sm_80":
            assert (d.result.layout.nregs <= MAX_REGS) == folded


def test_the_forward_reads_p_from_registers_on_mma_and_wgmma_and_stages_it_on_mfma():
    variant = {"dtype": "bf16", "head_dim": 64, "causal": False}
    hopper = lower("specs/fa2_fwd.yaml", "fwd", variant, FWD, "sm_90")
    ampere = lower("specs/fa2_fwd.yaml", "fwd", variant, FWD, "sm_80")
    amd = lower("specs/fa2_fwd.yaml", "fwd", variant, {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4}, "gfx942")
    # q k^T and p v in each loop (dense: the key blocks below SK, then the last partial one), and
    # the last block's p v after them
    assert [d.attrs["instr"] for d in ops(hopper, "dot")] == ["wgmma_m64n64k16_bf16"] * 5
    qk_pv = [("desc", "desc"), ("reg", "desc")]
    assert [(d.attrs["a_load"], d.attrs["b_load"]) for d in ops(hopper, "dot")] == qk_pv * 2 + [("reg", "desc")]
    # q and k are read K-major; v, K x N with N contiguous, through the transpose bit
    assert [(d.attrs.get("a_major"), d.attrs["b_major"]) for d in ops(hopper, "dot")] == [("k", "k"), (None, "mn")] * 2 + [(None, "mn")]
    assert [(d.attrs["a_load"], d.attrs["b_load"]) for d in ops(ampere, "dot")] == [("matrix", "matrix"), ("reg", "matrix_trans")] * 2 + [("reg", "matrix_trans")]
    assert [(d.attrs["a_load"], d.attrs["b_load"]) for d in ops(amd, "dot")] == [("vec", "vec")] * 5


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_the_forward_prefetches_k_and_v_a_whole_iteration_ahead_into_a_second_slot(target):
    # the consumers' own copies, as a kernel without a producer warpgroup has them (passes/specialize.py)
    k = lower("specs/fa2_fwd.yaml", "fwd", {"dtype": "bf16", "head_dim": 128, "causal": True}, FWD, target, UNSPECIALIZED)
    loops = ops(k, "for")
    assert len(loops) == 2  # causal: the key blocks every row sees whole, then the diagonal ones
    # both loops take a second slot on both targets: one runs after the other, so their buffers
    # share bytes (sm_80 had room for the first loop's only with every buffer counted as live)
    for loop in loops:
        body = [op.kind if op.kind != "copy_async" else op.attrs["tensor"] for op in loop.body.ops
                if op.kind in ("copy_async", "wait_async", "dot")]
        assert body == ["wait_async", "k", "dot", "wait_async", "v", "dot"]  # each copy right after its wait
        copies = [op for op in loop.body.ops if op.kind == "copy_async"]
        assert all(c.attrs["pred"] and not c.attrs["sync_before"] for c in copies)  # no barrier of their own
        waits = [w for w in ops(k, "wait_async") if w in loop.body.ops]
        if target == "sm_90":  # tensor copies: each wait names its slot's barrier by the iteration count
            assert all(w.attrs["tma"] and len(w.operands) == 2 for w in waits)
            assert all(c.attrs["tma"] for c in copies)
        else:
            assert [w.attrs["pending"] for w in waits] == [1, 1]
    slots = sorted(a.attrs.get("slots", 1) for a in ops(k, "alloc_shared"))
    assert slots == [1, 1, 2, 2, 2, 2]  # q and the last v once
    # each loop's first copies are issued before it, in the same order, and the last block's v after
    inner = [op for loop in loops for op in loop.body.ops if op.kind == "copy_async"]
    assert [op.attrs["tensor"] for op in ops(k, "copy_async") if op not in inner] == ["q", "k", "v", "k", "v", "v"]
    amd = lower("specs/fa2_fwd.yaml", "fwd", {"dtype": "bf16", "head_dim": 128, "causal": True},
                {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4}, "gfx942")
    assert not ops(amd, "copy_async")  # the descriptor lists no cp.async


def test_without_room_for_a_second_slot_the_prefetch_follows_the_last_read():
    small = load_target("sm_90").model_copy(update={"lds_bytes_per_block": 80 * 1024})
    k = compile_kernel(load_spec(ROOT / "specs/fa2_fwd.yaml"), "fwd", {"dtype": "bf16", "head_dim": 128, "causal": True}, FWD, small)
    loop = ops(k, "for")[0]
    assert not ops(k, "slot")
    body = [op.kind if op.kind != "copy_async" else op.attrs["tensor"] for op in loop.body.ops
            if op.kind in ("copy_async", "wait_async", "dot")]
    assert body == ["wait_async", "dot", "k", "wait_async", "dot", "v"]
    barriers = [op for op in loop.body.ops if op.attrs.get("sync_before") or op.kind == "wait_async"]
    assert len(barriers) == 4  # after each wait, before each prefetch


PREFIX_LM_BWD = {"RECOMPUTE_DQ": 1, "BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4, "DSPLIT": 1}


def _prefix_lm_dkdv(target, options=DEFAULT):
    from kgen.spec.load import backward_spec

    ls = backward_spec(load_spec(ROOT / "specs/variants/prefix_lm.yaml"))
    return compile_kernel(ls, "dkdv", {"dtype": "bf16", "head_dim": 128, "causal": False,
                                                         "deterministic": False}, PREFIX_LM_BWD, target, options=options)


def test_loops_one_after_another_each_take_two_slots_in_the_same_bytes():
    """prefix-LM's dkdv walks the query blocks in three phases (masked, whole, masked), each a
    loop copying q and do: every loop gets two slots, because the planner places the loops'
    buffers over each other; counted as all live at once, the third loop's would not fit."""
    sm90 = load_target("sm_90")
    k = _prefix_lm_dkdv(sm90)
    loops = [loop for loop in ops(k, "for") if not any(op.kind == "for" for op in loop.body.ops)]
    assert len(loops) == 3  # inside the loop over the heads of a group
    for loop in loops:
        assert {op.attrs["tensor"] for op in loop.body.ops if op.kind == "copy_async"} == {"q", "do"}
    slotted = [a for a in ops(k, "alloc_shared") if a.attrs.get("slots") == 2]
    assert len(slotted) == 6  # q and do in each of the three loops
    from kgen.ir.analysis import buffer_bytes

    assert buffer_bytes(k.body) > sm90.lds_bytes_per_block
    assert k.shared_bytes <= sm90.lds_bytes_per_block


def test_slots_that_the_later_passes_push_past_the_limit_are_given_back():
    """The live-range estimate runs before the later passes add their scratch: where the kernel
    then planned does not fit, the pass runs again with every buffer counted as live, and the
    kernel still builds (the third loop copies into one slot)."""
    sm90 = load_target("sm_90")
    fits = _prefix_lm_dkdv(sm90).shared_bytes
    # a limit between the buffers alone (which the estimate checks) and the planned kernel
    tight = sm90.model_copy(update={"lds_bytes_per_block": fits - 16})
    k = _prefix_lm_dkdv(tight)
    assert k.shared_bytes <= tight.lds_bytes_per_block
    assert len([a for a in ops(k, "alloc_shared") if a.attrs.get("slots") == 2]) < 6


def test_a_kernel_with_a_producer_counts_every_buffer_as_live():
    """Rings live for the whole kernel (passes/specialize.py), so the forward that asks for a
    producer warpgroup keeps the sum: with three loops (prefix-LM's phases) the third keeps its
    copies in one slot and the first two are fed by the producer."""
    from kgen.spec.load import load_spec as load

    k = compile_kernel(load(ROOT / "specs/variants/prefix_lm.yaml"), "fwd",
                       {"dtype": "bf16", "head_dim": 128, "causal": False}, FWD, load_target("sm_90"))
    assert "warp_specialized" in k.notes and "fills 4 rings" in k.notes["warp_specialized"]


def test_a_tile_read_both_ways_is_staged_once():
    """dkdv at head_dim 64 reads k as kt.T (scores) and as kt (dq), q and do both ways too: one
    buffer each, filled by an async copy, the transposed reads through views (kt.T, vt.T, and
    p.T and ds.T of the staged register tiles p and ds; ds, cast once, is staged once)."""
    k = lower("specs/fa2_bwd.yaml", "dkdv", {"dtype": "bf16", "head_dim": 64, "causal": False, "deterministic": False}, BWD, "sm_90",
              NO_ROWS)
    assert sorted({op.attrs["tensor"] for op in ops(k, "copy_async")}) == ["do", "k", "q", "v"]
    assert len(ops(k, "alloc_shared")) == 4
    views = ops(k, "view_shared")
    buffers = {a.result for a in ops(k, "alloc_shared")} | {s.result for s in ops(k, "stage")} | {s.result for s in ops(k, "slot")}
    assert len(views) == 4 and {v.operands[0] for v in views} <= buffers and len(ops(k, "stage")) == 2
    assert not ops(k, "trans")  # the register transposes the views replaced are gone


def test_the_transposed_backward_keeps_p_and_ds_in_registers():
    """At head_dim 128 dkdv computes s^T = k q^T: p^T and ds^T are the left operands of the dv
    and dk dots straight from registers; only ds^T is staged (for dq, read as its transpose),
    and the lse and delta terms start the two score dots (no zero accumulators)."""
    variant = {"dtype": "bf16", "head_dim": 128, "causal": True, "deterministic": False}
    k = lower("specs/fa2_bwd.yaml", "dkdv", variant, {"BLOCK_M": 64, "BLOCK_N": 128, "WARPS": 8, "DSPLIT": 1}, "sm_90")
    dots = ops(k, "dot")
    # s^T, dp^T (issued together), dv, dk, dq: one masked pass (the 128-key form has no unmasked
    # second pass, fa2_bwd.yaml)
    assert [d.attrs["a_load"] for d in dots] == ["desc", "desc", "reg", "reg", "desc"]
    assert len(ops(k, "stage")) == 1
    starts = {id(r): op for op in walk(k.body) for r in op.results}
    assert [starts[id(d.operands[2])].kind for d in dots[:2]] == ["where", "broadcast"]


def test_prefetches_keep_the_prologue_order():
    """matmul's a and b tiles: the loop issues their next copies in the prologue's order, so the
    wait counts of the first iteration equal the others' (each wait leaves the other tile's
    copy, issued after it or before it, in flight)."""
    k = lower("specs/matmul.yaml", 0, {"dtype": "bf16"}, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "WARPS": 4}, "sm_90")
    loop = ops(k, "for")[0]
    inside = [op.attrs["tensor"] for op in loop.body.ops if op.kind == "copy_async"]
    before = [op.attrs["tensor"] for op in ops(k, "copy_async") if op not in loop.body.ops]
    assert inside == before == ["a", "b"]
    assert [op.attrs["pending"] for op in loop.body.ops if op.kind == "wait_async"] == [1, 1]


def _late_arithmetic(k) -> list[str]:
    """Tile arithmetic in registers with something other than register arithmetic between it and
    its first reader in the same block (a dot, load, copy or barrier it could have waited behind).
    Scalars (loop bounds derived from a mask) hold one register each and are left out."""
    from kgen.ir.core import blocks
    from kgen.ir.passes.sink import MOVABLE, _reads

    found = []
    for block in blocks(k.body):
        for i, op in enumerate(block.ops):
            if op.kind not in MOVABLE or any(r.place != "reg" for r in op.results) or all(not r.shape for r in op.results):
                continue
            mine = {r.id for r in op.results}
            for later in block.ops[i + 1:]:
                if _reads(later) & mine:
                    break
                if later.kind not in MOVABLE and later.kind != "dot_wait":  # a wait costs no registers
                    found.append(f"{op.kind} ({op.loc}) waits behind {later.kind}")
                    break
    return found


def test_register_arithmetic_is_computed_right_before_its_first_use(monkeypatch):
    """The backward's mask (built from row and column indices before the dot it masks, in the
    spec) is computed after that dot, so that its registers are free during the dot. (Without
    issue_dots_together, which moves dp^T's start above s^T on purpose: tests/ir/test_dot_issue.py.)"""
    import kgen.ir.pipeline as pipeline

    variant = {"dtype": "bf16", "head_dim": 128, "causal": True, "deterministic": False}
    tunables = {"BLOCK_M": 64, "BLOCK_N": 128, "WARPS": 8, "DSPLIT": 1}
    apart = CompileOptions(dots_together=False)
    assert _late_arithmetic(lower("specs/fa2_bwd.yaml", "dkdv", variant, tunables, "sm_90", apart)) == []
    monkeypatch.setattr(pipeline, "PASSES", [p for p in pipeline.PASSES if p[0] != "sink_to_first_use"])
    assert _late_arithmetic(lower("specs/fa2_bwd.yaml", "dkdv", variant, tunables, "sm_90", apart))


SSD_BWD = {"BLOCK_S": 64, "BLOCK_M": 64, "BLOCK_K": 64, "BLOCK_R": 16, "WARPS": 4, "WIDE_WARPS": 8, "STATE_WARPS": 4, "BLOCK_P": 64,
           "SHARE_PROGRAMS": 2048}


def _kernel_index(spec, name):
    return next(i for i, ks in enumerate(load_spec(ROOT / spec).spec.kernels) if ks.name == name)


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_small_loads_in_loops_are_issued_an_iteration_ahead(target):
    """chunk_scan (prefetch_loads: true) reads a cumsum row and a dt row per source block
    (index c * blocks + k): prefetch_loads loads them before the loop and, in the body, for the
    next block (predicated), carrying them around the loop. The 64x64 fp32 CB block (32 elements
    per thread over 4 warps, over the limit) is not; dc, which does not ask, is left alone."""
    from kgen.ir.passes.prefetch import MAX_TILE_REGS

    variant = {"dtype": "bf16", "chunk_size": 256, "headdim": 64, "dstate": 128, "packed": False, "dt_dtype": "bf16", "gated": False}
    tunables = {"BLOCK_S": 64, "BLOCK_M": 64, "BLOCK_K": 64, "WARPS": 4}
    k = lower("specs/ssd_fwd.yaml", _kernel_index("specs/ssd_fwd.yaml", "chunk_scan"), variant, tunables, target)
    loop = ops(k, "for")[0]
    pred = [op for op in loop.body.ops if op.kind == "load" and op.attrs.get("pred") and not _staged(k, op)]
    tensors = [op.attrs["tensor"] for op in pred]
    assert "dA_cumsum" in tensors and "dt_eff" in tensors and "CB" not in tensors
    assert all(op.result in loop.body.ops[-1].operands for op in pred)  # yielded to the next iteration
    before = [op.attrs["tensor"] for op in ops(k, "load")
              if op.attrs.get("pred") and not _staged(k, op) and op not in list(walk(loop.body))]
    assert sorted(before) == sorted(tensors)
    assert all(op.result.layout.nregs <= MAX_TILE_REGS for op in pred if not op.result.is_scalar)
    dc = lower("specs/ssd_bwd.yaml", _kernel_index("specs/ssd_bwd.yaml", "dc"), variant, SSD_BWD, target)
    assert not any(op.attrs.get("pred") and not _staged(dc, op) for op in ops(dc, "load"))


def _staged(k, load):
    """Whether a load feeds a stage_into: a staged load pipelined through registers on a target
    without cp.async (tests/ir/test_staged_loads.py), not a prefetched register load."""
    return any(op.kind == "stage_into" and op.operands[1] is load.result for op in walk(k.body))


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_a_prefetch_budget_moves_larger_tiles(target):
    """dx asks for `prefetch_loads: 32`: its loop's 32x64 fp32 CB block (16 elements per thread
    on sm_90's 4 warps, 8 on gfx942's 4 waves of 64), over true's limit on sm_90, is loaded an
    iteration ahead beside the cumsum row; the moved tiles stay within the budget."""
    from kgen.ir.passes.prefetch import MAX_TILE_REGS

    variant = {"dtype": "bf16", "chunk_size": 256, "headdim": 64, "dstate": 128, "packed": False, "dt_dtype": "bf16", "gated": False}
    k = lower("specs/ssd_bwd.yaml", _kernel_index("specs/ssd_bwd.yaml", "dx"), variant, {**SSD_BWD, "BLOCK_T": 32}, target)
    loop = ops(k, "for")[0]
    pred = [op for op in loop.body.ops if op.kind == "load" and op.attrs.get("pred")]
    # (gfx942, without asynchronous copies, loads dy's block into registers too, and moves it)
    assert {"CB", "dA_cumsum"} <= {op.attrs["tensor"] for op in pred}
    regs = [op.result.layout.nregs for op in pred]
    assert sum(regs) <= 32
    if target == "sm_90":
        assert max(regs) > MAX_TILE_REGS  # what `true` would have left in place


def test_a_load_of_a_tensor_the_kernel_writes_stays_in_place():
    """chunk_state stores the chunk states and loads the cumsum, dt, B and x in its loop: the
    loads it moves ahead are never of a tensor it writes."""
    variant = {"dtype": "bf16", "chunk_size": 128, "headdim": 64, "dstate": 64, "packed": False, "dt_dtype": "bf16", "gated": False}
    k = lower("specs/ssd_fwd.yaml", _kernel_index("specs/ssd_fwd.yaml", "chunk_state"), variant, SSD_BWD, "sm_90")
    written = {op.attrs["tensor"] for op in walk(k.body) if op.kind in ("store", "atomic_add")}
    moved = {op.attrs["tensor"] for op in ops(k, "load") if op.attrs.get("pred")}
    assert moved and not moved & written


@lru_cache(maxsize=None)
def _dkdv_128(options=NO_ROWS):
    """fa2_bwd's dkdv at head_dim 128 on sm_90 (as built: lse and delta loaded, the copies of
    their rows spill there)."""
    variant = {"dtype": "bf16", "head_dim": 128, "causal": False, "deterministic": False}
    return lower("specs/fa2_bwd.yaml", "dkdv", variant, {"BLOCK_M": 64, "BLOCK_N": 128, "WARPS": 8, "DSPLIT": 1}, "sm_90", options)


def _schedule(block) -> list[tuple[str, int | None]]:
    return [(op.kind, op.attrs.get("pending")) for op in block.ops if op.kind in ("dot", "dot_wait", "stage")]


def test_asynchronous_dots_are_waited_for_where_their_results_are_read():
    """dkdv at head_dim 128 on sm_90: s^T and dp^T issue back to back (dp^T's start, -delta, is
    written before s^T issues, passes/dot_issue.py); s^T is waited for with dp^T in flight, which
    runs while exp2 makes p^T and dv issues; dk and dq issue before anything waits again, and
    dq's wait completes dv and dk too. No op but its wait reads a deferred dot's result."""
    k = _dkdv_128()
    body = ops(k, "for")[-1].body
    assert _schedule(body) == [("dot", None), ("dot", None), ("dot_wait", 1), ("dot", None), ("dot_wait", 1),
                               ("dot", None), ("stage", None), ("dot", None),
                               ("dot_wait", 0), ("dot_wait", 0), ("dot_wait", 0)]
    for dot in (op for op in walk(k.body) if op.kind == "dot"):
        readers = [op for op in walk(k.body) if dot.result in op.operands]
        assert dot.attrs["deferred"] and [r.kind for r in readers] == ["dot_wait"]


def test_a_dot_whose_start_is_written_after_an_earlier_dot_issues_waits_for_it():
    """Without issue_dots_together, dp^T's start (-delta) is written after s^T issues: writing
    accumulator registers with a matrix instruction in flight makes ptxas wait (C7517), so s^T
    is waited for in full before dp^T."""
    body = ops(_dkdv_128(replace(NO_ROWS, dots_together=False)), "for")[-1].body
    assert _schedule(body)[:4] == [("dot", None), ("dot_wait", 0), ("dot", None), ("dot", None)]
    assert not any(op.attrs.get("early_start") for op in walk(body))


def test_a_dot_is_waited_for_before_its_shared_operand_is_overwritten():
    """Two slots of one buffer, this iteration's and the next one's, are different memory; the
    same slot, or a buffer without slots, is the memory a dot in flight may still read."""
    from kgen.ir.passes.overlap import _may_alias

    k = _dkdv_128()
    producer = {id(r): op for op in walk(k.body) for r in op.results}
    body = ops(k, "for")[-1].body
    slots = [op.result for op in body.ops if op.kind == "slot"]
    by_buffer: dict[int, list] = {}
    for s in slots:
        by_buffer.setdefault(id(producer[id(s)].operands[0]), []).append(s)
    pairs = [v for v in by_buffer.values() if len(v) == 2]
    assert len(pairs) == 2  # q and do: the slot read and the slot the next copy fills
    for cur, nxt in pairs:
        assert not _may_alias(cur, nxt, producer) and _may_alias(cur, cur, producer)
    assert not _may_alias(pairs[0][0], pairs[1][1], producer)  # different buffers
    stage = next(op.result for op in body.ops if op.kind == "stage")
    assert _may_alias(stage, stage, producer)


def test_synchronous_matrix_instructions_get_no_waits():
    """gfx942's MFMA (and sm_80's mma.sync) complete in order: no dot is deferred there."""
    variant = {"dtype": "bf16", "head_dim": 128, "causal": False, "deterministic": False}
    for target in ("gfx942", "sm_80"):
        k = lower("specs/fa2_bwd.yaml", "dkdv", variant, {"BLOCK_M": 64, "BLOCK_N": 32, "WARPS": 4, "DSPLIT": 1}, target)
        assert not ops(k, "dot_wait") and not any(op.attrs.get("deferred") for op in ops(k, "dot"))


def test_box_tiles_become_tensor_copies_with_a_barrier_per_slot():
    """sm_90's dkdv: k and v once, q and do pipelined in two slots; every tile spans head_dim,
    so every copy is a tensor copy. The barriers are numbered per slot, and after each inner
    loop a tma_reset makes the phases even for the next run (the next head of the group)."""
    k = lower("specs/fa2_bwd.yaml", "dkdv", {"dtype": "bf16", "head_dim": 128, "causal": False, "deterministic": False},
              {"BLOCK_M": 64, "BLOCK_N": 128, "WARPS": 8, "DSPLIT": 1}, "sm_90", NO_ROWS)
    copies = ops(k, "copy_async")
    assert {c.attrs["tensor"] for c in copies} == {"q", "k", "v", "do"} and all(c.attrs["tma"] for c in copies)
    allocs = [a for a in ops(k, "alloc_shared") if a.attrs.get("tma")]
    bars = sorted((a.attrs["bar"], a.attrs.get("slots", 1)) for a in allocs)
    assert bars == [(0, 1), (1, 1), (2, 2), (4, 2)] and k.tma_barriers == 6
    inner = [op for op in ops(k, "for") if any(o.kind == "wait_async" for o in op.body.ops)]
    resets = ops(k, "tma_reset")
    assert len(resets) == len(inner) == 1
    loop = inner[0]
    assert resets[0].operands[:3] == loop.operands[:3]  # the loop's start, stop and step
    waits = [w for w in loop.body.ops if w.kind == "wait_async"]
    assert len(waits) == 2 and all(w.attrs["tma"] and len(w.operands) == 2 for w in waits)
    # the same kernel without the copy engine: cp.async, no barriers
    hopper = load_target("sm_90")
    plain = compile_kernel(load_spec(ROOT / "specs/fa2_bwd.yaml"), "dkdv",
                           {"dtype": "bf16", "head_dim": 128, "causal": False, "deterministic": False},
                           {"BLOCK_M": 64, "BLOCK_N": 128, "WARPS": 8, "DSPLIT": 1}, hopper.model_copy(update={"async_copy": ("cp.async",)}),
                           options=NO_ROWS)
    assert ops(plain, "copy_async") and not any(c.attrs.get("tma") for c in ops(plain, "copy_async"))
    assert plain.tma_barriers == 0 and not ops(plain, "tma_reset")


def test_tiles_that_are_not_boxes_or_not_counted_keep_cp_async(tmp_path):
    """matmul's tiles cut the last dim in blocks (K is a size), so they are not boxes; and a
    tile whose index is carried around its loop is not pipelined, so its wait could not know
    the barrier's phase."""
    mm = lower("specs/matmul.yaml", 0, {"dtype": "bf16"}, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "WARPS": 8}, "sm_90")
    assert ops(mm, "copy_async") and not any(c.attrs.get("tma") for c in ops(mm, "copy_async"))
    text = (ROOT / "tests/codegen/specs/tensor_copies.yaml").read_text()
    carried = text.replace("          for j in range(cdiv(N, BLOCK_N)):\n              kt = load(k[g, block(j, BLOCK_N), :])\n",
                           "          jj = 0\n          for j in range(cdiv(N, BLOCK_N)):\n              kt = load(k[g, block(jj, BLOCK_N), :])\n              jj = jj + 1\n")
    assert carried != text
    (tmp_path / "carried.yaml").write_text(carried)
    k = compile_kernel(load_spec(tmp_path / "carried.yaml"), 0, {"dtype": "bf16", "d": 128},
                       {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4}, load_target("sm_90"))
    by_tensor = {c.attrs["tensor"]: bool(c.attrs.get("tma")) for c in ops(k, "copy_async")}
    assert by_tensor == {"q": True, "k": False}
    assert k.tma_barriers == 1 and not ops(k, "tma_reset")
