"""Sink register arithmetic to its first use: each elementwise or layout-only op moves down its
block to just before the first op that reads its result.

A spec is written in the order a person reads it: attention's backward builds its mask from row
and column indices before the dot whose scores it masks. Emitted in that order, the mask's 32
booleans per thread are live across the dot's issue and wait, next to the accumulators; at
128-key blocks that is what tips the dkdv kernel over 255 registers into spills. nvcc does not
move arithmetic across the dots' inline-asm statements (they are volatile), so the order the
IR gives is the order that runs. Sunk, a value is computed right before it is consumed and its
registers are free during the dots and copies in between.

Only ops with no memory effect and no barrier move (MOVABLE); loads stay where they are, so
their latency still hides behind the work that follows. An op never moves into a loop body:
a value first used inside a loop is placed just before that loop.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Block, Kernel, Op, walk

MOVABLE = ("const", "unary", "binary", "where", "cast", "expand", "broadcast", "full", "arange", "trans")


def sink_to_first_use(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    _sink_block(k.body)
    return k


def _reads(op: Op) -> set[int]:
    """Ids of the values `op` reads, its loop body's reads included."""
    ids = {v.id for v in op.operands}
    if op.body is not None:
        for inner in walk(op.body):
            ids.update(v.id for v in inner.operands)
    return ids


def _sink_block(block: Block) -> None:
    for op in block.ops:
        if op.body is not None:
            _sink_block(op.body)
    ops = block.ops
    reads = [_reads(op) for op in ops]
    # last to first, so that a chain of ops follows its last link down
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        if op.kind not in MOVABLE or op.body is not None or any(r.place != "reg" for r in op.results):
            continue
        mine = {r.id for r in op.results}
        first = next((j for j in range(i + 1, len(ops)) if reads[j] & mine), None)
        if first is None or first == i + 1:
            continue
        ops.insert(first - 1, ops.pop(i))
        reads.insert(first - 1, reads.pop(i))
