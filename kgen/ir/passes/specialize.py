"""Warp specialization: a producer warpgroup feeds the loops' tensor copies through rings.

After use_async_copies a pipelined loop of tensor copies (sm_90) has every computing thread
wait for each copy and then meet at a block barrier, because thread 0 refills the slot the
others have just read. With `warp_specialize` (CompileOptions) and a target that can move
registers between warpgroups (`register_reallocation`), each top-level loop whose copies are
all tensor copies into slotted buffers instead gets a producer, as FlashAttention-3 and
CUTLASS's warp-specialized kernels have one:

  producer [warps, regs, consumer_regs, blocks_per_sm]   a warpgroup after the num_warps
      for iv in the loop's range:                        computing warps; one thread runs it
          acquire(buf, n)          wait until the consumers gave back slot n % slots
          copy_async(slot(buf, n)) the copy iteration n reads (one thread, complete_tx)
  ...
  for iv ...:                      the consumers' loop, as before, but:
      wait_async [ring]            the slot's full barrier only, no block barrier
      ...                          the iteration's reads of the buffer (their dot_waits included)
      release(buf, n)              each warp's lane 0 arrives on the slot's empty barrier

A ring's buffer then lives for the whole kernel (the producer fills it ahead of the consumers),
so its memory is its own. It keeps the two slots use_async_copies gave it, or takes
`ring_slots` (CompileOptions) where shared memory allows. Iteration n uses slot n % slots for the (n // slots)-th time: the
consumers wait for parity (n // slots) & 1 of its full barrier, the producer for the phase
before that of its empty barrier, parity ((n // slots) & 1) ^ 1, which a fresh barrier reports
complete (PTX ISA, "mbarrier.try_wait": the phase preceding the current one), so the first
`slots` copies go at once. Each loop runs once (top level), so no phase is left to reset.

The index arithmetic of each copy and the loop's bounds are pure scalar functions of sizes,
scalars, the program's position and scalars read from tensors the kernel does not write (a
block list), so the producer recomputes them; a loop whose copies need anything else (a value
the kernel writes, a nested loop's value) keeps its copies.

Registers (PTX ISA, setmaxnreg): the producer warpgroup drops to the fewest the target allows
and the computing warpgroups take what that frees. The kernel is compiled for `blocks_per_sm`
blocks per multiprocessor (__launch_bounds__ with that minimum, without which ptxas ignores
setmaxnreg: its note C7508), which fixes the register count at entry; the consumers may rise to
what the block's share of the register file holds beside the producer's.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import buffer_bytes, producers, read_only, recomputable, views_of
from ..attrs import attr
from ..core import Block, Kernel, Op, Value, number_tma_barriers, walk

PRODUCER_WARPS = 4  # setmaxnreg acts on a whole warpgroup (4 warps)
# scalar ops the producer may recompute: no memory access, no effect but the result (and the
# scalar loads analysis.recomputable allows)
RECOMPUTABLE = ("const", "size", "scalar_arg", "program_id", "binary", "unary", "cast", "where", "cdiv")


def asks_producer(k: Kernel, target: Target, options: CompileOptions) -> bool:
    """Whether this pass will look for rings in `k` (the kernel, the options and the target allow
    a producer warpgroup)."""
    return bool(k.warp_specialize and options.warp_specialize and target.register_reallocation and "tma" in target.async_copy)


def specialize_warps(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    if not asks_producer(k, target, options):
        return k
    if not _fits(k, target):
        return k
    defs = producers(k.body, deep=False)
    program = Block()
    memo: dict[int, Value] = {}
    rings: list[Op] = []  # the allocs the producer fills
    for loop in [op for op in k.body.ops if op.kind == "for"]:
        plan = _ring_plan(loop, k.body)
        if plan is None:
            continue
        produced = _producer_loop(loop, plan, defs, memo, program, read_only(k))
        if produced is None:
            continue
        _consume(loop, plan, k)
        rings += [alloc for alloc, _, _ in plan]
    if not rings:
        return k
    for alloc in rings:  # the buffers exist before the producer starts filling them
        k.body.ops.remove(alloc)
    regs, consumer_regs, blocks = _registers(k, target)
    producer = Op("producer", [], [], {"warps": PRODUCER_WARPS, "regs": regs, "consumer_regs": consumer_regs,
                                       "blocks_per_sm": blocks}, body=program, loc=rings[0].loc)
    k.body.ops[0:0] = [*rings, producer]
    _deepen(k, rings, options.ring_slots, target, blocks)
    n = k.tma_barriers
    for alloc in rings:
        alloc.attrs["empty_bar"] = n
        n += attr(alloc, "slots")
    k.release_barriers = n - k.tma_barriers
    k.producer_warps = PRODUCER_WARPS
    k.notes["warp_specialized"] = (f"a producer warpgroup ({regs} registers) fills {len(rings)} rings; "
                                   f"{k.num_warps} warps compute ({consumer_regs} registers), {blocks} block(s) per SM")
    return k


def _deepen(k: Kernel, rings: list[Op], slots: int, target: Target, blocks: int) -> None:
    """Give each ring up to `slots` slots while every buffer still fits at once in the block's
    share of shared memory (`blocks` per multiprocessor, as _registers planned), then number the
    tensor copies' barriers again, one per slot (as use_async_copies did)."""
    budget = min(target.lds_bytes_per_block, target.lds_bytes_per_cu // blocks) - 1024
    deeper = False
    for alloc in rings:
        extra = alloc.attrs["slot_bytes"] * (slots - attr(alloc, "slots"))
        if extra <= 0 or buffer_bytes(k.body) + extra > budget:
            continue
        alloc.attrs.update(slots=slots, bytes=alloc.attrs["slot_bytes"] * slots)
        for op in walk(k.body):
            if op.kind == "slot" and op.operands[0] is alloc.result:
                op.attrs["slots"] = slots
        deeper = True
    if deeper:
        number_tma_barriers(k)


def _fits(k: Kernel, target: Target) -> bool:
    """Whether the block stays within the target's limits with a producer: its threads, and its
    buffers in shared memory if none shared memory with another (a ring lives for the whole
    kernel, so the planner may place fewer together than before)."""
    threads = (k.num_warps + PRODUCER_WARPS) * target.wave_size
    buffers = buffer_bytes(k.body)
    return threads <= target.max_threads_per_block and buffers + 1024 <= target.lds_bytes_per_block


def _ring_plan(loop: Op, top: Block) -> list[tuple[Op, Op, Op]] | None:
    """(alloc, the copy for the next iteration, the wait) per buffer of a loop whose every copy
    is a pipelined tensor copy into a slotted buffer allocated at the top level; None if the
    loop has any other copy."""
    body = loop.body
    slots = {id(op.result): op for op in body.ops if op.kind == "slot"}
    allocs = {id(op.result): op for op in top.ops if op.kind == "alloc_shared"}
    plan = []
    for op in walk(body):
        if op.kind != "copy_async":
            continue
        view = slots.get(id(op.operands[0]))
        if (not attr(op, "tma") or not attr(op, "pred") or op not in body.ops or view is None
                or id(view.operands[0]) not in allocs):
            return None
        alloc = allocs[id(view.operands[0])]
        waits = [w for w in body.ops if w.kind == "wait_async" and w.operands[0] is alloc.result and len(w.operands) == 2]
        if len(waits) != 1 or attr(alloc, "slots") < 2:
            return None
        plan.append((alloc, op, waits[0]))
    return plan or None


def _producer_loop(loop: Op, plan, defs: dict[int, Op], memo: dict[int, Value], program: Block,
                   reads: frozenset[str]) -> Op | None:
    """Append to `program` the producer's copy of `loop`: the same range, and per buffer the
    acquire and the copy for its own iteration. The consumers' copy is for the next iteration,
    its index computed from `nxt` = iv + step (passes/async_copy.py); here `nxt` is the
    producer's own induction variable. None (program unchanged) if some index is not
    recomputable."""
    outer: list[Op] = []
    before = _Recompute(defs, memo, outer, reads)
    bounds = [before.value(v) for v in loop.operands[:3]]
    if any(b is None for b in bounds):
        return None
    iv = Value((), "int32", name=loop.body.args[0].name)
    off, count = Value((), "int32"), Value((), "int32")
    ops = [Op("binary", [iv, bounds[0]], [off], {"fn": "sub"}, loc=loop.loc),
           Op("binary", [off, bounds[2]], [count], {"fn": "floordiv"}, loc=loop.loc)]
    inner_defs = producers(loop.body, deep=False)
    for alloc, copy, _ in plan:
        more = inner_defs.get(id(copy.operands[-1]))
        if more is None or more.kind != "binary" or more.attrs["fn"] != "lt":
            return None
        inside = _Recompute(inner_defs, {id(more.operands[0]): iv}, [], reads, before)  # nxt -> this iteration
        index = [inside.value(v) for v in copy.operands[1:-1]]
        if any(v is None for v in index):
            return None
        view = Value(alloc.result.shape, alloc.result.dtype, place="shared")
        ops += [Op("acquire", [alloc.result, count], [], {}, loc=copy.loc),
                Op("slot", [alloc.result, count], [view], {"slots": attr(alloc, "slots"), "slot_bytes": alloc.attrs["slot_bytes"]},
                   loc=copy.loc),
                *inside.ops,
                Op("copy_async", [view, *index], [], {**copy.attrs, "pred": False, "sync_before": False}, loc=copy.loc)]
    ops.append(Op("yield", [], [], {}))
    produced = Op("for", bounds, [], {}, body=Block([iv], ops), loc=loop.loc)
    program.ops += [*outer, produced]
    return produced


class _Recompute:
    """Values computed again for the producer from the ops `defs` gives (recomputable scalar
    ops only), each once (`done`: original id -> new value, seeded with substitutions), the new
    ops appended to `ops` in dependence order; a value `defs` does not know goes to `outer`."""

    def __init__(self, defs: dict[int, Op], done: dict[int, Value], ops: list[Op], reads: frozenset[str],
                 outer: "_Recompute | None" = None):
        self.defs, self.done, self.ops, self.reads, self.outer = defs, done, ops, reads, outer

    def value(self, v: Value) -> Value | None:
        if id(v) in self.done:
            return self.done[id(v)]
        op = self.defs.get(id(v))
        if op is None:
            return self.outer.value(v) if self.outer is not None else None
        if op.body is not None or any(r.shape != () for r in op.results):
            return None
        if op.kind not in RECOMPUTABLE and not recomputable(op, self.reads):
            return None
        operands = [self.value(o) for o in op.operands]
        if any(o is None for o in operands):
            return None
        out = Value((), v.dtype, name=v.name)
        self.ops.append(Op(op.kind, operands, [out], dict(op.attrs), loc=op.loc))
        self.done[id(v)] = out
        return out


def _consume(loop: Op, plan, k: Kernel) -> None:
    """The consumers' side of the rings: their copies (the first iteration's before the loop,
    the next one's in it) and the loop's phase reset go, each wait is for the slot's full barrier
    alone, and each buffer's slot is given back after the iteration's last read of it."""
    body = loop.body
    for _, copy, wait in plan:
        body.ops.remove(copy)
        wait.attrs["ring"] = True
        wait.attrs["barrier"] = False
    _drop_unread_slots(body)
    for alloc, _, wait in plan:
        views = views_of(body, alloc.result)
        last = max(i for i, op in enumerate(body.ops) if op is not wait and op.kind != "slot" and _reads(op, views))
        body.ops.insert(last + 1, Op("release", [alloc.result, wait.operands[1]], [], {}, loc=wait.loc))
    bufs = {id(alloc.result) for alloc, _, _ in plan}
    slots = {id(op.result): op.operands[0] for op in k.body.ops if op.kind == "slot"}
    kept = []
    for op in k.body.ops:
        if op.kind == "copy_async" and id(slots.get(id(op.operands[0]), op.operands[0])) in bufs:
            continue  # the first iteration's copy: the producer's now
        if op.kind == "tma_reset":
            op.operands = op.operands[:3] + [b for b in op.operands[3:] if id(b) not in bufs]
            if len(op.operands) == 3:
                continue
        kept.append(op)
    k.body.ops[:] = kept
    _drop_unread_slots(k.body)


def _reads(op: Op, views: list[Value]) -> bool:
    return any(v in o.operands for o in [op, *(walk(op.body) if op.body else ())] for v in views)


def _drop_unread_slots(block: Block) -> None:
    """Slot views nothing reads any more (those the removed copies wrote into)."""
    read = {id(v) for op in walk(block) for v in op.operands}
    for b in [block, *(op.body for op in walk(block) if op.body is not None)]:
        b.ops[:] = [op for op in b.ops if op.kind != "slot" or id(op.result) in read]


def _registers(k: Kernel, target: Target) -> tuple[int, int, int]:
    """(producer, consumer registers per thread, blocks per multiprocessor). One warpgroup of
    consumers gets a second block beside it where shared memory allows (as the unspecialized
    kernels, to overlap one block's waits with the other's work); two or more share the
    multiprocessor alone, as FlashAttention-3's 1 + 2 warpgroups; a spec's `occupancy` may ask
    for more. The block's registers at entry
    are its share of the register file (a multiple of the step, as __launch_bounds__ makes ptxas
    allocate); the producer takes the fewest the target allows, the consumers what is left, up
    to the most."""
    least, most, step = target.register_reallocation
    buffers = buffer_bytes(k.body)
    one_group = k.num_warps * target.wave_size <= PRODUCER_WARPS * target.wave_size
    blocks = 2 if one_group and 2 * (buffers + 1024) <= target.lds_bytes_per_cu else 1
    blocks = max(blocks, k.occupancy)  # the spec may ask for more programs a multiprocessor
    producer_threads = PRODUCER_WARPS * target.wave_size
    consumer_threads = k.num_warps * target.wave_size
    entry = target.regs_per_cu // (blocks * (producer_threads + consumer_threads)) // step * step
    entry = min(entry, target.max_regs_per_thread // step * step)
    consumer = (entry * (producer_threads + consumer_threads) - least * producer_threads) // consumer_threads
    return least, min(consumer // step * step, most, target.max_regs_per_thread // step * step), blocks
