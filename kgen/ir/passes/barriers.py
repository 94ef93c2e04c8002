"""Barriers around staged operands: one pair per run of stages instead of one pair per stage.

A stage writes a buffer that other warps read (in a dot), so it needs a barrier before it (no
warp may still be reading the buffer's previous contents) and one after (every write visible
before the first read). When several stages follow each other with nothing in between that
touches shared memory, the first one's barrier already orders every earlier read before all of
their writes, and the last one's barrier orders all of their writes before any later read: the
barriers in between are redundant. Dropping them matters in loops, where attention's backward
stages four operands per iteration.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ..core import Block, Kernel, Op
from .memory import scratch_bytes


def merge_stage_barriers(k: Kernel, target: Target) -> Kernel:
    _merge(k.body)
    return k


def _touches_shared(op: Op) -> bool:
    return op.kind in ("stage", "dot", "for") or scratch_bytes(op) > 0


def _merge(block: Block) -> None:
    run: list[Op] = []
    for op in block.ops + [None]:
        if op is not None and op.kind == "stage":
            run.append(op)
            continue
        if op is not None and op.body is not None:
            _merge(op.body)
        if op is None or _touches_shared(op):
            for i, s in enumerate(run):
                s.attrs["sync_before"] = i == 0
                s.attrs["sync_after"] = i == len(run) - 1
            run = []
