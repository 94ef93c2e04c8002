"""Barriers around shared memory: only where a write could overtake a read, or a read a write.

Writes into shared buffers are `stage` and `stage_into` (registers -> shared) and `copy_async`
(global -> shared, asynchronously); reads are dots, `read_shared` and the ops with scratch (cross-warp reductions, converts),
which place their own barriers; a nested loop counts as both. Walking a block in order:

  - a write needs a barrier before it only if some warp may still be reading since the last
    barrier (the buffer may be the one just read: plan_shared_memory reuses dead buffers);
  - a run of stages needs one barrier after its last write, before the first read;
  - `wait_async` ends in a barrier (the copies of every thread become visible), which also
    clears the reads before it; a wait right before another wait leaves it to that one
    (`barrier`: two copies issued together, passes/early_copies.py, are waited for with one);
  - a ring's wait (passes/specialize.py) is its slot's mbarrier alone: no barrier, nothing cleared;
  - a `private` stage_into or read_shared (passes/shared_sums.py) touches only the thread's own
    elements of a buffer no other op uses meanwhile: no barrier, nothing to order;
  - a `stage_into ... ahead` (passes/staged_loads.py) writes the slot of the next iteration,
    which none of this iteration's reads touch: no barrier before it, one after;
  - so does a `copy_async` into the next iteration's slot of a two-slot buffer, once a barrier
    in this iteration has ended the previous iteration's reads of it (reads since then, of
    other buffers and of this iteration's slot, do not matter);
  - a tensor copy's wait in a loop, after such a barrier, needs none of its own: each thread
    waits on the copy's mbarrier itself, and the barrier's other job, ending the previous
    iteration's reads of the slot the next copy fills, is done (one barrier after the body's
    last such wait stays, so that no thread still waits when a barrier is re-armed).

In a loop body the previous iteration's reads are in flight at the top, so the first write
there has its barrier. Attention's forward thus has four barriers per key block: after each
wait, and before each prefetch that overwrites a buffer the iteration has just read.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Block, Kernel, Op
from ..analysis import producers, scratch_bytes
from ..attrs import attr


def merge_stage_barriers(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    _place(k.body, producers(k.body), reads_since_sync=False, in_loop=False)  # nothing has read shared memory when a kernel starts
    return k


def _into_next_slot(op: Op, producer: dict) -> bool:
    """A copy into the slot an iteration slots - 1 ahead reads, of a buffer of two or more slots
    (passes/async_copy.py: its count is this iteration's plus slots - 1): the slot the previous
    iteration read, not one this iteration reads."""
    view = producer.get(id(op.operands[0]))
    if view is None or view.kind != "slot" or view.attrs["slots"] < 2:
        return False
    count = producer.get(id(view.operands[1]))
    if count is None or count.kind != "binary" or count.attrs["fn"] != "add":
        return False
    ones = [producer.get(id(v)) for v in count.operands]
    return any(o is not None and o.kind == "const" and o.attrs["value"] == view.attrs["slots"] - 1 for o in ones)


def _reads_shared(op: Op) -> bool:
    # an asynchronous dot reads its shared operands until its wait (passes/overlap.py)
    # a bulk atomic_add's buffer is its own to the kernel's end, each warp's slice ordered by the
    # warp itself (passes/bulk_reduce.py): no other write needs a barrier against it
    return op.kind in ("dot", "dot_wait", "for", "read_shared") or (scratch_bytes(op) > 0 and op.kind != "atomic_add")


def _place(block: Block, producer: dict, reads_since_sync: bool = True, in_loop: bool = True) -> None:
    """reads_since_sync: whether some warp may still be reading shared memory when the block
    starts; a loop body conservatively assumes so (its previous iteration's reads)."""
    unsynced_stage: Op | None = None  # the last stage whose writes no barrier has published yet
    synced = not reads_since_sync  # a barrier since the block's start: the previous iteration's reads are over
    unfenced: list[Op] = []  # tensor-copy waits left without a block barrier
    for i, op in enumerate(block.ops):
        if op.kind == "producer":  # its copies wait for their ring slots, not for block barriers
            continue
        if op.body is not None:
            _place(op.body, producer)
        if op.kind in ("stage_into", "read_shared", "copy_async", "wait_async") and attr(op, "private"):
            # a thread's own elements of a buffer (passes/shared_sums.py), or a row each thread
            # copies and alone reads back (passes/row_loads.py): no other thread reads or writes them
            if op.kind == "stage_into":
                op.attrs["sync_before"], op.attrs["sync_after"] = False, False
            elif op.kind == "copy_async":
                op.attrs["sync_before"] = False
            elif op.kind == "wait_async":
                op.attrs["barrier"] = False
        elif op.kind == "stage_into" and attr(op, "ahead"):
            # into the slot the next iteration reads: its last reads were the previous
            # iteration's, before the barrier after that iteration's last write
            op.attrs["sync_before"], op.attrs["sync_after"] = False, False
            unsynced_stage = op
        elif op.kind == "copy_async" and synced and _into_next_slot(op, producer):
            # its slot was last read in the previous iteration, before this one's first barrier;
            # the reads since then are of other buffers and slots
            op.attrs["sync_before"] = False
        elif op.kind in ("stage", "stage_into", "copy_async"):
            op.attrs["sync_before"] = reads_since_sync
            if reads_since_sync:
                reads_since_sync, unsynced_stage, synced = False, None, True
            if op.kind != "copy_async":
                op.attrs["sync_after"] = False
                unsynced_stage = op
        elif op.kind == "wait_async" and attr(op, "ring"):
            continue  # a ring slot's full barrier alone (passes/specialize.py): no block barrier
        elif op.kind == "wait_async" and attr(op, "tma") and in_loop and synced and unsynced_stage is None \
                and not _leans_on(block.ops[i - 1] if i else None):
            # each thread waits on the copy's mbarrier itself, which makes the data visible to
            # it; the block barrier after such a wait only ends the previous iteration's reads
            # of the slot the next copy overwrites, and one in this iteration already did
            op.attrs["barrier"] = False
            unfenced.append(op)
        elif op.kind == "wait_async":
            following = block.ops[i + 1] if i + 1 < len(block.ops) else None
            op.attrs["barrier"] = following is None or following.kind != "wait_async"
            reads_since_sync, unsynced_stage, synced = False, None, True
        elif _reads_shared(op):
            if unsynced_stage is not None:
                unsynced_stage.attrs["sync_after"] = True
                unsynced_stage, synced = None, True
            reads_since_sync = True
    if unsynced_stage is not None:
        unsynced_stage.attrs["sync_after"] = True
    if unfenced and not _barrier_after(block, unfenced[-1]):
        # every thread must be past its last wait of an iteration before the next iteration's
        # copy re-arms that barrier, and before tma_reset flips phases after the loop
        unfenced[-1].attrs["barrier"] = True


def _leans_on(prev: Op | None) -> bool:
    """A wait that left its barrier to the wait after it."""
    return prev is not None and prev.kind == "wait_async" and not prev.attrs.get("barrier", True)


def _barrier_after(block: Block, op: Op) -> bool:
    """Whether a block barrier follows `op` in its block."""
    for later in block.ops[block.ops.index(op) + 1:]:
        if later.attrs.get("sync_before") or later.attrs.get("sync_after") or \
                (later.kind == "wait_async" and later.attrs.get("barrier") and not attr(later, "ring")):
            return True
    return False
