"""Independent asynchronous dots issued back to back: the start of a later dot computed before
the earlier one is issued.

A warpgroup dot that starts from a tile ordinary instructions wrote (attention's dp^T = v do^T
starts from -delta, so that no delta tile is live beside the accumulators) cannot be issued
while another matrix instruction is in flight: ptxas waits for the earlier one before the
register writes (its note C7517), and overlap_async_dots writes that wait where it happens. So
s^T and dp^T ran one after the other, with the exponentials of s^T waiting behind the writes of
dp^T's start. Computed before s^T is issued, dp^T's start is in its registers when dp^T issues
right behind s^T, and the tensor cores take both while the exponentials run (as FlashAttention-3
issues S and dP together).

For each asynchronous dot with such a start, whose nearest earlier asynchronous dot in the same
block does not feed it: the ops between the two that its start needs move above the earlier
dot, in their order; loads among them go to the block's top (after what their operands need),
so that their latency overlaps whatever comes before. Only ops without side effects move
(sink_to_first_use's MOVABLE) and loads of tensors the kernel does not write; a chain with
anything else, or one that reads the earlier dot, stays where it is. It runs after
sink_to_first_use, which would move the start back down, and before overlap_async_dots, which
then needs no wait between the two dots (their starts are written before either issues).

The dot is marked `early_start`: codegen pins its start's registers where they are computed, so
that nvcc does not write them (copies of a broadcast's repeated elements) between the two issues.
The start's registers are live one dot longer; a kernel that spills with this is retried
without it (CompileOptions.dots_together, kgen/build.py).
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import is_lone_zero
from ..attrs import attr
from ..core import WRITES, Block, Kernel, Op, blocks, use_counts, walk
from .async_copy import count_pending
from .sink import MOVABLE


def issue_dots_together(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    if not options.dots_together:
        return k
    written = {op.attrs["tensor"] for op in walk(k.body) if op.kind in WRITES}
    uses = use_counts(k.body)
    for block in list(blocks(k.body)):
        _pair_up(block, target, written, uses)
    count_pending(k.body)  # a moved wait counts the copies committed before it anew
    return k


def is_async_dot(op: Op, target: Target) -> bool:
    return op.kind == "dot" and "instr" in op.attrs and target.matrix_instr(op.attrs["instr"]).asynchronous


def _pair_up(block: Block, target: Target, written: set[str], uses: dict[int, int]) -> None:
    j = 0
    while j < len(block.ops):
        dot = block.ops[j]
        earlier = [i for i in range(j) if is_async_dot(block.ops[i], target)]
        if is_async_dot(dot, target) and len(dot.operands) >= 3 and earlier:
            i = earlier[-1]
            chain = _start_chain(block, i, j, dot.operands[2], written, uses)
            if chain:
                _move_above(block, i, chain)
                dot.attrs["early_start"] = True
        j += 1


def _start_chain(block: Block, i: int, j: int, start, written: set[str], uses: dict[int, int]) -> list[Op] | None:
    """The ops between positions i and j that `start` needs, in block order; None where one of
    them may not move, one reads the dot at i, or nothing between them makes the start. A read
    of a copied row (passes/row_loads.py) brings its copy's wait along when that lies between."""
    at = {id(r): n for n, op in enumerate(block.ops) for r in op.results}
    need, todo = set(), [start]
    while todo:
        v = todo.pop()
        n = at.get(id(v))
        if n is None or n < i or n in need:
            continue
        if n == i:
            return None  # the start reads the earlier dot's result
        op = block.ops[n]
        if op.body is not None or not _movable(op, written):
            return None
        if op.kind == "full" and is_lone_zero(op, start, uses):
            return None  # a zero start is never written (mark_zero_starts): nothing to move
        need.add(n)
        todo.extend(op.operands)
        if op.kind == "read_shared":
            wait = _wait_of(block, op, n)
            if wait is None:
                return None
            if wait > i:  # the wait moves, and with it the next iteration's copy issued after it
                need.update(range(wait, _copy_after(block, wait) + 1))
    return [block.ops[n] for n in sorted(need)] or None


def _copy_after(block: Block, wait: int) -> int:
    """Position of the copy that use_async_copies issues right after a wait (the next
    iteration's, into the other slot), the end of the run of index arithmetic and slot views
    before it; the wait's own position where no such copy follows."""
    for n in range(wait + 1, len(block.ops)):
        op = block.ops[n]
        if op.kind == "copy_async":
            return n
        if op.kind not in COPY_PREP:
            break
    return wait


def _wait_of(block: Block, read: Op, n: int) -> int | None:
    """Position of the cp.async wait before `read` that completes the copy into its buffer
    (read through a slot view); None if it is not a plain wait of this block."""
    producer = {id(r): op for op in block.ops for r in op.results}
    buf = read.operands[0]
    view = producer.get(id(buf))
    root = view.operands[0] if view is not None and view.kind == "slot" else buf
    waits = [m for m in range(n) if block.ops[m].kind == "wait_async" and block.ops[m].operands[0] is root]
    if not waits or attr(block.ops[waits[-1]], "tma") or attr(block.ops[waits[-1]], "ring"):
        return None
    return waits[-1]


def _movable(op: Op, written: set[str]) -> bool:
    if op.kind == "load":
        return op.attrs["tensor"] not in written
    if op.kind in ("read_shared", "slot"):  # a copied row's read (its wait and next copy come along, above)
        return True
    return op.kind in MOVABLE and all(r.place == "reg" for r in op.results)


def _move_above(block: Block, i: int, chain: list[Op]) -> None:
    """Arithmetic right above the dot at i; loads as early as their operands allow; a copy's
    wait right before the block's first wait (consecutive waits share one barrier) and the next
    copy that followed it after that wait's own next copies, its read after it."""
    dot = block.ops[i]
    for op in chain:
        block.ops.remove(op)
    units, rest, n = [], [], 0
    while n < len(chain):
        if chain[n].kind == "wait_async":
            end = next((m for m in range(n + 1, len(chain)) if chain[m].kind == "copy_async"), n)
            units.append((chain[n], chain[n + 1:end + 1]))
            n = end + 1
        else:
            rest.append(chain[n])
            n += 1
    at = block.ops.index(dot)
    block.ops[at:at] = [op for op in rest if op.kind not in EARLY]
    for wait, copy in units:
        first = next((m for m in range(block.ops.index(dot)) if block.ops[m].kind == "wait_async"), None)
        if first is None:
            block.ops[block.ops.index(dot):block.ops.index(dot)] = [wait, *copy]
            continue
        block.ops.insert(first, wait)
        after = first + 2
        while after < len(block.ops) and block.ops[after].kind in COPY_PREP + ("copy_async",):
            after += 1
        block.ops[after:after] = copy
    for op in [op for op in rest if op.kind in EARLY]:
        ids = {id(v) for v in op.operands}
        first = max((m for m, o in enumerate(block.ops) if any(id(r) in ids for r in o.results)), default=-1) + 1
        waits = [m for m, o in enumerate(block.ops) if o.kind == "wait_async" and m < block.ops.index(dot)]
        if op.kind == "read_shared" and waits:
            first = max(first, waits[-1] + 1)
        block.ops.insert(first, op)


EARLY = ("load", "read_shared")  # placed by their operands, not by the dot
COPY_PREP = ("binary", "const", "slot")  # what use_async_copies puts between a wait and its next copy
