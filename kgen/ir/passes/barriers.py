"""Barriers around shared memory: only where a write could overtake a read, or a read a write.

Writes into shared buffers are `stage` and `stage_into` (registers -> shared) and `copy_async`
(global -> shared, asynchronously); reads are dots and the ops with scratch (cross-warp reductions, converts),
which place their own barriers; a nested loop counts as both. Walking a block in order:

  - a write needs a barrier before it only if some warp may still be reading since the last
    barrier (the buffer may be the one just read: plan_shared_memory reuses dead buffers);
  - a run of stages needs one barrier after its last write, before the first read;
  - `wait_async` ends in a barrier (the copies of every thread become visible), which also
    clears the reads before it; a wait right before another wait leaves it to that one
    (`barrier`: two copies issued together, passes/early_copies.py, are waited for with one);
  - a ring's wait (passes/specialize.py) is its slot's mbarrier alone: no barrier, nothing cleared;
  - a `stage_into ... ahead` (passes/staged_loads.py) writes the slot of the next iteration,
    which none of this iteration's reads touch: no barrier before it, one after.

In a loop body the previous iteration's reads are in flight at the top, so the first write
there has its barrier. Attention's forward thus has four barriers per key block: after each
wait, and before each prefetch that overwrites a buffer the iteration has just read.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Block, Kernel, Op
from ..analysis import scratch_bytes
from ..attrs import attr


def merge_stage_barriers(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    _place(k.body, reads_since_sync=False)  # nothing has read shared memory when a kernel starts
    return k


def _reads_shared(op: Op) -> bool:
    # an asynchronous dot reads its shared operands until its wait (passes/overlap.py)
    # a bulk atomic_add's buffer is its own to the kernel's end, each warp's slice ordered by the
    # warp itself (passes/bulk_reduce.py): no other write needs a barrier against it
    return op.kind in ("dot", "dot_wait", "for") or (scratch_bytes(op) > 0 and op.kind != "atomic_add")


def _place(block: Block, reads_since_sync: bool = True) -> None:
    """reads_since_sync: whether some warp may still be reading shared memory when the block
    starts; a loop body conservatively assumes so (its previous iteration's reads)."""
    unsynced_stage: Op | None = None  # the last stage whose writes no barrier has published yet
    for i, op in enumerate(block.ops):
        if op.kind == "producer":  # its copies wait for their ring slots, not for block barriers
            continue
        if op.body is not None:
            _place(op.body)
        if op.kind == "stage_into" and attr(op, "ahead"):
            # into the slot the next iteration reads: its last reads were the previous
            # iteration's, before the barrier after that iteration's last write
            op.attrs["sync_before"], op.attrs["sync_after"] = False, False
            unsynced_stage = op
        elif op.kind in ("stage", "stage_into", "copy_async"):
            op.attrs["sync_before"] = reads_since_sync
            if reads_since_sync:
                reads_since_sync, unsynced_stage = False, None
            if op.kind != "copy_async":
                op.attrs["sync_after"] = False
                unsynced_stage = op
        elif op.kind == "wait_async" and attr(op, "ring"):
            continue  # a ring slot's full barrier alone (passes/specialize.py): no block barrier
        elif op.kind == "wait_async":
            following = block.ops[i + 1] if i + 1 < len(block.ops) else None
            op.attrs["barrier"] = following is None or following.kind != "wait_async"
            reads_since_sync, unsynced_stage = False, None
        elif _reads_shared(op):
            if unsynced_stage is not None:
                unsynced_stage.attrs["sync_after"] = True
                unsynced_stage = None
            reads_since_sync = True
    if unsynced_stage is not None:
        unsynced_stage.attrs["sync_after"] = True
