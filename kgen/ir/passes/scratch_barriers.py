"""Drop the first barrier of a cross-warp reduction or a layout conversion where no warp can
still be reading the shared memory it is about to write.

Such an op writes every warp's part to its scratch, waits at a barrier, and reads the others'.
The barrier before the write guards the scratch against reads still in flight in slower warps:
of a buffer the planner put at the same offset (plan_shared_memory reuses dead buffers), or of
the same scratch in the previous iteration of a loop. With offsets planned, that is known: a
walk in program order keeps the byte ranges read since the last barrier every warp passed, and
an op whose scratch overlaps none of them needs no barrier before its write. In the chunked
scan's dx, each 32-position step sums a (rows x positions) tile over the rows across the 4
warps; the step's only earlier shared reads are its products' operands, at other offsets, and
the barrier that ends the step's copy wait clears the previous step's reads: one barrier of
three per step goes.

Conservative where it does not know: a loop body starts with everything possibly read (its
previous iteration), and after a loop everything is again. Asynchronous reads (a wgmma still
reading its operands after a barrier) need no tracking here: a buffer is live until its dot's
wait, so the planner never places a scratch over it.

A group of sums that share a barrier (passes/sum_groups.py) writes every member's slices, then
waits once: each member is checked against the reads pending before the group, the group
waits first if any member must, and after it the reads pending are its members' slices.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Block, Kernel, walk
from ..analysis import scratch_bytes, views_of
from ..attrs import attr

Ranges = list[tuple[int, int]] | None  # byte ranges read since the last barrier; None: anything


def drop_scratch_barriers(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    buffers = {}
    for op in walk(k.body):
        if op.kind in ("stage", "alloc_shared"):
            span = (op.attrs["smem_offset"], op.attrs["smem_offset"] + op.attrs["bytes"])
            for v in views_of(k.body, op.result):
                buffers[id(v)] = span
    _walk(k.body, [], buffers)
    return k


def _walk(block: Block, read: Ranges, buffers: dict) -> Ranges:
    group: list = []  # the sums of a group seen so far (passes/sum_groups.py), with their scratch
    for op in block.ops:
        if op.body is not None:
            _walk(op.body, None, buffers)
            read = None
        elif op.kind == "wait_async":
            read = [] if attr(op, "barrier") else read
        elif op.kind in ("stage", "stage_into", "copy_async"):
            if attr(op, "sync_before"):
                read = []
            if op.kind != "copy_async" and attr(op, "sync_after"):
                read = []
        elif op.kind in ("dot", "dot_wait"):
            spans = [buffers[id(v)] for v in op.operands if id(v) in buffers]
            read = None if read is None else read + spans
        elif op.kind in ("reduce", "convert", "scan") and scratch_bytes(op):
            mine = (op.attrs["smem_offset"], op.attrs["smem_offset"] + scratch_bytes(op))
            if op.kind != "scan":  # a scan's levels keep their barriers
                op.attrs["sync_before"] = read is None or any(lo < mine[1] and mine[0] < hi for lo, hi in read)
            group.append((op, mine))
            if op.kind == "reduce" and attr(op, "joins_next"):  # the group writes its slices, then waits once
                continue
            if len(group) > 1:
                before = any(m.attrs["sync_before"] for m, _ in group)
                for m, _ in group:
                    m.attrs["sync_before"] = before
            read = [span for _, span in group]
            group = []
    return read
