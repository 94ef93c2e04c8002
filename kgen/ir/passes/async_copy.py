"""Global tiles copied straight into shared memory, and prefetched one loop iteration ahead.

A dot operand loaded from global memory only to be staged (`stage(load(...))`) goes through
registers twice and exposes the load's latency. On a target whose descriptor lists `cp.async`
(sm_80, sm_90) it becomes three ops on one buffer:

  alloc_shared          the buffer (what the stage produced; the dot reads it)
  copy_async            every thread copies 16-byte chunks global -> shared and commits one
                        group (PTX cp.async.cg with a source size: rows and columns past the
                        tensor's end read as zeros, as the load's `other` did)
  wait_async [pending]  wait until at most `pending` later groups are in flight, then a barrier

Inside a loop, when the copy's index operands are the induction variable, values defined
outside the loop, or scalars the loop body computes from those with pure arithmetic (the chunked
scan's `c * blocks_per_chunk + k`, a head `g * heads + j`), the copy is software-pipelined as
FlashAttention-2 does with K and V (that arithmetic is recomputed for the iteration copied): the
buffer is allocated before the loop, the first iteration's copy is issued before it, and each
iteration issues the next iteration's copy right after its last read of the buffer (predicated
on there being a next iteration, the group committed either way so that counts stay static).
The wait at the original place then only waits for that buffer: `pending` counts the groups
committed after it in the loop's cyclic order.

Where shared memory allows, the buffer gets two slots instead (`slot` views: iteration n reads
slot n % 2). The next iteration's copy then goes into the other slot right after this
iteration's wait, a whole iteration ahead of its use, and needs no barrier of its own: the slot
it overwrites was last read in the previous iteration, before the barrier that ends this
iteration's wait. With one slot the copy must wait for the last read, behind a barrier, and has
half an iteration to land.
A loop whose copies ask for S > 2 slots (`slots_asked`, passes/row_loads.py) and are all
cp.async copies gets S where they fit: iteration n copies for iteration n + S - 1 into slot
(n - 1) % S, read last in iteration n - 1 as with two, and the prologue copies iterations 0 to
S - 2, so that S - 1 iterations' copies are in flight while one computes (the bytes in flight a
multiprocessor needs to reach its share of the bandwidth grow with it, Little's law).

Whether the slots fit is asked of the planner's live ranges (kgen/ir/placement.py): loops one
after another (the phases of a masked key loop: masked, whole, masked) reuse the same bytes, so
each may take two slots where the sum of every buffer in the kernel would allow only the first
to. That estimate runs before the later passes add their scratch, so where it grants more slots
than the sum would, the whole kernel is planned after the pass (`planned_shared_bytes`) and
must fit the block's limit and the programs a multiprocessor the kernel asks for (its
`occupancy`); otherwise the pass runs again with the sum, which is an upper bound. A kernel that
asks for a producer warpgroup (passes/specialize.py) keeps the sum: its rings live for the whole
kernel, so its loops' buffers do not reuse each other's bytes.

On a target whose descriptor lists `tma` (sm_90), a copy into the 128-byte swizzle whose tile is
a box of its tensor (scalar indices, one block or whole dim of rows, the whole static last dim,
or its padded tile)
becomes a tensor-memory-access copy (`tma`): one thread issues a cp.async.bulk.tensor per
128-byte column panel, the copy engine writes the swizzle and fills rows past the tensor's end
with zeros, and completion is counted on an mbarrier (one per slot, `bar` on the alloc) instead of
a commit group. No thread computes an address; the copies of q and do in attention's backward
took 32 shared-memory wavefronts per cp.async where 4 are ideal, and their address registers
made the D=128 dkdv spill in the swizzled layout (docs/PERFORMANCE.md). Its wait is the barrier's
phase, then the same block barrier as a cp.async wait (a slot's next copy relies on it).
"""
from __future__ import annotations

import copy as copying

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import buffer_bytes, index_chain, read_only, recompute_chain, views_of
from ..core import ELEM_BYTES, Block, Kernel, Op, Value, blocks, number_tma_barriers, slot_view, use_counts, walk
from ..attrs import attr
from ..placement import planned_bytes, shared_budget
from .specialize import asks_producer

CHUNK_BYTES = 16  # cp.async.cg moves 16 bytes per instruction (PTX ISA, "cp.async")
# a tensor copy's box: at most 256 elements along each dim, at most 5 dims (CUDA driver API,
# cuTensorMapEncodeTiled); with the 128-byte swizzle its inner dim spans at most 128 bytes
TMA_BOX_MAX, TMA_RANK_MAX = 256, 5
SLOTS = 2
# scalar ops without memory access or side effects: safe to recompute for another iteration


def use_async_copies(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    if "cp.async" not in target.async_copy:
        return k
    if asks_producer(k, target, options):
        _copy_and_pipeline(k, target, None)
        return k
    budget = shared_budget(k, target)
    trial = copying.deepcopy(k)
    if not _copy_and_pipeline(trial, target, budget):
        return trial  # no loop took more slots than the sum of its buffers allows
    from ..pipeline import planned_shared_bytes  # the pass list imports this pass
    if planned_shared_bytes(trial, target, options, "pipeline_staged_loads") <= budget:
        return trial
    _copy_and_pipeline(k, target, None)
    return k


def _copy_and_pipeline(k: Kernel, target: Target, budget: int | None) -> bool:
    """The pass on `k` in place; slots by live ranges within `budget`, or (None) by the sum of
    every buffer within the block's limit. Whether any loop took more slots than the sum allows."""
    defs = {id(r): (op, block) for block in blocks(k.body) for op in block.ops for r in op.results}
    uses = use_counts(k.body)
    for block in list(blocks(k.body)):
        for st in [op for op in block.ops if op.kind == "stage"]:
            _convert(st, block, defs, uses, "tma" in target.async_copy, k)
    beyond = False
    for loop, parent in [(op, b) for b in list(blocks(k.body)) for op in b.ops if op.kind == "for"]:
        beyond |= _pipeline(loop, parent, k, target, budget)
    _untensor_uncounted(k)
    count_pending(k.body)
    number_tma_barriers(k)
    return beyond


def _convert(st: Op, block: Block, defs, uses, tma: bool, k: Kernel) -> None:
    """stage(load) -> alloc_shared, copy_async, wait_async. (place_dot_operands stages the tile a
    transpose reads, never the transpose, so a staged load is its own operand.)"""
    src = st.operands[0]
    d = defs.get(id(src))
    if not d or d[0].kind != "load" or uses.get(id(src)) != 1:
        return
    load, load_block = d
    index = load.attrs["index"]
    tile = [e for e in index if e[0] != "at"]
    elem = ELEM_BYTES[load.result.dtype]
    # a row (passes/row_loads.py) is copied as a tile of one row
    shape = (1, *load.result.shape) if len(tile) == 1 else load.result.shape
    if (len(tile) not in (1, 2) or index[-1][0] == "at" or st.attrs["inner"] != 1 or attr(load, "other") != 0
            or (shape[1] * elem) % CHUNK_BYTES or (st.attrs["ld"] * elem) % CHUNK_BYTES):
        return
    buf = st.result
    alloc = Op("alloc_shared", [], [buf], {a: v for a, v in st.attrs.items() if a != "private"}, loc=st.loc)
    copy = Op("copy_async", [buf] + list(load.operands), [],
              {"tensor": load.attrs["tensor"], "index": _shift(index, 1), "shape": shape,
               "ld": st.attrs["ld"], "rows": attr(st, "rows"), "smem_layout": attr(st, "smem_layout"),
               "pred": False, "private": attr(st, "private")}, loc=load.loc)
    wait = Op("wait_async", [buf], [], {"pending": 0, "private": attr(st, "private")}, loc=st.loc)
    if tma and _is_box(index, shape, st.attrs) and _spans_last_dim(load, defs, k):
        copy.attrs["tma"] = alloc.attrs["tma"] = wait.attrs["tma"] = True
    i = block.ops.index(st)
    block.ops[i:i + 1] = [alloc, copy, wait]
    load_block.ops.remove(load)


def _is_box(index, shape: tuple[int, ...], attrs: dict) -> bool:
    """Whether a copy can be one tensor copy per column panel: into the 128-byte swizzle (whole
    8-row atoms), rows along a block or a whole dim of at most 256, every other dim a scalar
    index but the last, which the tile spans (_spans_last_dim)."""
    rows = [e for e in index[:-1] if e[0] != "at"]
    return (attrs.get("smem_layout") == "sw128" and attrs["rows"] % 8 == 0 and len(index) <= TMA_RANK_MAX
            and index[-1][0] != "at" and len(rows) == 1 and shape[0] <= TMA_BOX_MAX)


def _spans_last_dim(load: Op, defs, k: Kernel) -> bool:
    """Whether the load's tile spans its tensor's static last dim: `:` of it, or the padded `:`
    of a dim narrower than the tile (the block at 0, kgen.lang.calls), whose columns past the
    dim the copy engine fills with zeros as the load's bound test did (CUDA driver API,
    cuTensorMapEncodeTiled: out-of-bound elements are zero-filled). Static, with rows a multiple
    of 16 bytes, so that a contiguous copy of the tensor always meets the copy engine's 16-byte
    stride rule."""
    last = load.attrs["index"][-1]
    if last[0] == "all":
        return True
    extent = k.tensors[load.attrs["tensor"]].shape[-1]
    extent = k.constants.get(extent, extent) if isinstance(extent, str) else extent
    start = defs.get(id(load.operands[last[1]]))
    return (isinstance(extent, int) and (extent * ELEM_BYTES[load.result.dtype]) % CHUNK_BYTES == 0
            and last[2] == 1 << (extent - 1).bit_length() and start is not None and start[0].kind == "const"
            and start[0].attrs.get("value") == 0)


def _untensor_uncounted(k: Kernel) -> None:
    """Tensor copies stay only where each wait knows its barrier's phase: outside loops (one
    use), or pipelined (phase from the iteration count, made even after the loop by
    tma_reset). A copy waited for in a loop that was not pipelined goes back to cp.async."""
    back = set()
    for loop in walk(k.body):
        if loop.kind == "for":
            back |= {id(w.operands[0]) for w in loop.body.ops if w.kind == "wait_async" and attr(w, "tma") and len(w.operands) == 1}
    for op in walk(k.body):
        if op.kind in ("alloc_shared", "copy_async", "wait_async") and id(op.result if op.kind == "alloc_shared" else op.operands[0]) in back:
            op.attrs.pop("tma", None)


def _shift(index, by: int):
    return tuple((e[0], e[1] + by) + tuple(e[2:]) if e[0] in ("at", "block") else e for e in index)


def _slots_fit(k: Kernel, allocs: list[Op], n: int, target: Target, budget: int | None) -> bool:
    """Whether `allocs` in n slots fit: the block's limit against every buffer as if all were
    live at once (budget None), or `budget` against the planner's placement of live ranges."""
    if budget is None:
        return buffer_bytes(k.body) + sum(a.attrs["bytes"] * (n - 1) for a in allocs) <= target.lds_bytes_per_block
    one = [a.attrs["bytes"] for a in allocs]
    for a in allocs:
        a.attrs["bytes"] *= n
    try:
        return planned_bytes(k) <= budget
    finally:
        for a, b in zip(allocs, one):
            a.attrs["bytes"] = b


def _pipeline(loop: Op, parent: Block, k: Kernel, target: Target, budget: int | None) -> bool:
    """Pipeline one loop's copies; whether it took more slots than the sum of buffers allows."""
    body = loop.body
    iv = body.args[0]
    start, stop, step = loop.operands[:3]
    inside = {id(v) for v in body.args} | {id(r) for op in walk(body) for r in op.results}
    plans = []
    chains: dict[int, list[Op]] = {}
    for copy in [op for op in body.ops if op.kind == "copy_async"]:
        buf = copy.operands[0]
        chain = index_chain(copy.operands[1:], body, iv, inside, read_only(k))
        if chain is None:
            continue
        chains[id(copy)] = chain
        bufs = views_of(body, buf)
        last = max(i for i, op in enumerate(body.ops) if op is not copy and _reads(op, bufs))
        wait = next(i for i, op in enumerate(body.ops) if op.kind == "wait_async" and op.operands[0] is buf)
        plans.append((copy, last, wait))
    if not plans:
        return False
    allocs = {id(copy): next(op for op in body.ops if op.kind == "alloc_shared" and op.result is copy.operands[0])
              for copy, _, _ in plans}
    asked = max((attr(a, "slots_asked") or SLOTS for a in allocs.values()), default=SLOTS)
    if any(attr(copy, "tma") for copy, _, _ in plans):
        asked = SLOTS  # a tensor copy's barrier phases count uses of two slots (kgen/codegen/tma.py)
    # the most slots that fit, of those asked, then two, then one
    summed = next((n for n in dict.fromkeys((asked, SLOTS)) if _slots_fit(k, list(allocs.values()), n, target, None)), 1)
    slots = summed if budget is None else max(summed, next(
        (n for n in dict.fromkeys((asked, SLOTS)) if _slots_fit(k, list(allocs.values()), n, target, budget)), 1))
    slotted = slots > 1
    # the copy follows its wait (two slots) or the last read of its buffer (one)
    anchors = {id(copy): body.ops[wait if slotted else last] for copy, last, wait in plans}
    copies = sorted((copy for copy, _, _ in plans), key=lambda c: body.ops.index(anchors[id(c)]))
    at = parent.ops.index(loop)
    prologue: list[Op] = []
    go = Value((), "bool")
    prologue.append(Op("binary", [start, stop], [go], {"fn": "lt"}, loc=loop.loc))
    count = nxt_count = None
    tma = [copy for copy in copies if attr(copy, "tma")]
    ahead: list[tuple[Value, Value, Value]] = []  # (slot index, iteration's start, whether it runs) of the prologue's copies
    if slotted or tma:  # iteration number (iv - start) / step, and the one slots - 1 later
        off, count, nxt_count, ahead_by = Value((), "int32"), Value((), "int32"), Value((), "int32"), Value((), "int32")
        counters = [Op("binary", [iv, start], [off], {"fn": "sub"}, loc=loop.loc),
                    Op("binary", [off, step], [count], {"fn": "floordiv"}, loc=loop.loc),
                    Op("const", [], [ahead_by], {"value": max(slots - 1, 1)}, loc=loop.loc),
                    Op("binary", [count, ahead_by], [nxt_count], {"fn": "add"}, loc=loop.loc)]
        body.ops[0:0] = counters
    if slotted:
        for i in range(slots - 1):
            first = Value((), "int32")
            prologue.append(Op("const", [], [first], {"value": i}, loc=loop.loc))
            if i == 0:
                ahead.append((first, start, go))
                continue
            at_i, by, runs = Value((), "int32"), Value((), "int32"), Value((), "bool")
            prologue += [Op("binary", [step, first], [by], {"fn": "mul"}, loc=loop.loc),
                         Op("binary", [start, by], [at_i], {"fn": "add"}, loc=loop.loc),
                         Op("binary", [at_i, stop], [runs], {"fn": "lt"}, loc=loop.loc)]
            ahead.append((first, at_i, runs))
    for copy in copies:
        buf = copy.operands[0]
        alloc = allocs[id(copy)]
        body.ops.remove(alloc)
        prologue.insert(0, alloc)
        if copy in tma:  # iteration n waits for its slot's barrier, in phase n // slots
            for op in body.ops:
                if op.kind == "wait_async" and op.operands[0] is buf:
                    op.operands.append(count)
        if slotted:
            slot_bytes = alloc.attrs["bytes"]
            alloc.attrs.update(bytes=slot_bytes * slots, slots=slots, slot_bytes=slot_bytes)
            cur = slot_view(buf, count, alloc, loop)
            for op in walk(body):  # every read of this iteration reads the current slot
                if op.kind not in ("copy_async", "wait_async"):
                    op.operands = [cur.result if v is buf else v for v in op.operands]
            body.ops.insert(len(counters), cur)
        else:
            prologue += _copy_at(copy, chains[id(copy)], iv, start, go)
    for slot, at_i, runs in ahead:  # iteration by iteration, each in the order the loop issues them
        for copy in copies:
            dst = slot_view(copy.operands[0], slot, allocs[id(copy)], loop)
            prologue += [dst, *_copy_at(copy, chains[id(copy)], iv, at_i, runs, dst.result)]
    if tma:
        # the phases the loop's copies completed made even again, so that the next run of the
        # loop (an outer loop's next iteration) starts each barrier at phase 0 of its count
        parent.ops.insert(at + 1, Op("tma_reset", [start, stop, step] + [c.operands[0] for c in tma], [], {}, loc=loop.loc))
    parent.ops[at:at] = prologue
    # each iteration's copy for the next one goes right after its anchor (its wait, or its last
    # read of the buffer), in the prologue's order (copies after one anchor keep their order),
    # so that group counts agree between the first iteration and the others
    after: dict[int, list[Op]] = {}
    for copy in copies:
        body.ops.remove(copy)
        nxt, more = Value((), "int32"), Value((), "bool")
        ops = [Op("binary", [nxt, stop], [more], {"fn": "lt"}, loc=copy.loc)]
        if slots > 2:  # iv + (slots - 1) * step
            by = Value((), "int32")
            ops[0:0] = [Op("binary", [step, ahead_by], [by], {"fn": "mul"}, loc=copy.loc),
                        Op("binary", [iv, by], [nxt], {"fn": "add"}, loc=copy.loc)]
        else:
            ops.insert(0, Op("binary", [iv, step], [nxt], {"fn": "add"}, loc=copy.loc))
        if slotted:
            dst = slot_view(copy.operands[0], nxt_count, allocs[id(copy)], loop)
            ops += [dst, *_copy_at(copy, chains[id(copy)], iv, nxt, more, dst.result)]
        else:
            ops += _copy_at(copy, chains[id(copy)], iv, nxt, more)
        after.setdefault(id(anchors[id(copy)]), []).extend(ops)
    new_ops: list[Op] = []
    for op in body.ops:
        new_ops.append(op)
        new_ops.extend(after.get(id(op), []))
    body.ops[:] = new_ops
    return slots > summed


def _copy_at(copy: Op, chain: list[Op], iv: Value, at: Value, pred: Value, dst: Value | None = None) -> list[Op]:
    """The copy for the iteration whose induction variable is `at`, predicated on `pred`."""
    ops, operands = recompute_chain(chain, iv, at, copy.operands)
    operands.append(pred)
    if dst is not None:
        operands[0] = dst
    return ops + [Op("copy_async", operands, [], {**copy.attrs, "pred": True}, loc=copy.loc)]


def _reads(op: Op, bufs: list[Value]) -> bool:
    return any(b in o.operands for o in [op] + (list(walk(op.body)) if op.body else []) for b in bufs)


def count_pending(block: Block) -> None:
    """For each wait in a loop body, the groups committed after its buffer's copy: copies later
    in the body (previous iteration) plus copies before the wait (this iteration). A wait
    outside loops, or in a body whose nested loops also copy, waits for everything (0)."""
    for op in block.ops:
        if op.body is not None:
            count_pending(op.body)
            _count_loop(op.body)


def _count_loop(body: Block) -> None:
    if any(o.kind == "copy_async" for op in body.ops if op.body for o in walk(op.body)):
        return
    # tensor copies commit no group: only cp.async copies count
    copies = [i for i, op in enumerate(body.ops) if op.kind == "copy_async" and not attr(op, "tma")]
    slot_op = {id(op.result): op for op in body.ops if op.kind == "slot"}
    root = {id(op.result): op.operands[0] for op in slot_op.values()}
    for w, op in enumerate(body.ops):
        if op.kind != "wait_async" or attr(op, "tma"):
            continue
        mine = [i for i in copies if root.get(id(body.ops[i].operands[0]), body.ops[i].operands[0]) is op.operands[0]]
        if len(mine) != 1 or mine[0] < w:  # copied in this iteration before the wait: not pipelined
            continue
        after_mine = sum(1 for i in copies if i > mine[0])
        before_wait = sum(1 for i in copies if i < w)
        # with S slots the copy came S - 1 iterations early: the S - 2 iterations between issued theirs
        view = slot_op.get(id(body.ops[mine[0]].operands[0]))
        between = (view.attrs["slots"] - 2) * len(copies) if view is not None and view.attrs["slots"] > 2 else 0
        op.attrs["pending"] = after_mine + between + before_wait
