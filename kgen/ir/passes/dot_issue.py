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
from ..core import Block, Kernel, Op, blocks, use_counts, walk
from .sink import MOVABLE


def issue_dots_together(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    if not options.dots_together:
        return k
    written = {op.attrs["tensor"] for op in walk(k.body) if op.kind in ("store", "atomic_add")}
    uses = use_counts(k.body)
    for block in list(blocks(k.body)):
        _pair_up(block, target, written, uses)
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
    them may not move, one reads the dot at i, or nothing between them makes the start."""
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
    return [block.ops[n] for n in sorted(need)] or None


def _movable(op: Op, written: set[str]) -> bool:
    if op.kind == "load":
        return op.attrs["tensor"] not in written
    return op.kind in MOVABLE and all(r.place == "reg" for r in op.results)


def _move_above(block: Block, i: int, chain: list[Op]) -> None:
    dot = block.ops[i]
    for op in chain:
        block.ops.remove(op)
    at = block.ops.index(dot)
    block.ops[at:at] = [op for op in chain if op.kind != "load"]
    for load in [op for op in chain if op.kind == "load"]:
        ids = {id(v) for v in load.operands}
        last = max((n for n, op in enumerate(block.ops) if any(id(r) in ids for r in op.results)), default=-1)
        block.ops.insert(last + 1, load)
