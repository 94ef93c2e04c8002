"""Sums across warps side by side share one barrier.

A reduction whose axis has warp bits (codegen/reductions.py) adds in-thread and across lanes,
writes its partial to a scratch slice, waits at a barrier and reads the other warps' slices.
Two such sums in a row wait at two barriers, and the second's partials cannot start to travel
before the first's are read. layernorm's backward takes two row sums of every row (of g and of
g * xhat), independent of each other: grouped, both partials are written, one barrier is
passed, both are read (a Triton user writes the same as one `tl.reduce` over a tuple).

`group_warp_sums` moves a cross-warp `reduce` down its block to just before the next one when
nothing in between reads its result and everything in between is register work, a global load
or store, or a sum within warps (nothing that touches shared memory or waits), and marks it
`joins_next`: the group is emitted as one statement (templates/common/ops.j2 `reduce`), its
scratch slices placed side by side (kgen.ir.placement keeps each member's scratch live to the
group's last member). The second sum must not read the first: that one waits for its barrier.

A group's slices add up where one sum's scratch served each before; a member joins only while
the kernel's planned shared memory grows by at most GROUP_GROWTH_BYTES and stays within the
block's limit and the programs a multiprocessor the kernel asks for (its `occupancy`).
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import scratch_bytes
from ..attrs import attr
from ..core import Block, Kernel, Op
from ..placement import planned_bytes, shared_budget
from .sink import MOVABLE

# what a group may add to the kernel's shared memory: a row sum's slices (a float per warp along
# the row and row of the tile) take 64 bytes at 16 warps, a column sum of a 4096-wide tile 16 KB
GROUP_GROWTH_BYTES = 1024
# ops a grouped sum may move past: register work, global loads and stores (no shared memory, no
# barrier); a sum within warps is register work too
CROSSABLE = MOVABLE + ("load", "store", "gather", "size", "scalar_arg", "program_id", "cdiv")


def group_warp_sums(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    budget = shared_budget(k, target)
    base = planned_bytes(k)
    limit = min(budget, base + GROUP_GROWTH_BYTES)
    _group_block(k, k.body, limit)
    return k


def is_warp_sum(op: Op) -> bool:
    return op.kind == "reduce" and scratch_bytes(op) > 0


def _crossable(op: Op) -> bool:
    return op.body is None and (op.kind in CROSSABLE or (op.kind == "reduce" and not is_warp_sum(op)))


def _reads(op: Op) -> set[int]:
    return {v.id for v in op.operands}


def _group_block(k: Kernel, block: Block, limit: int) -> None:
    for op in block.ops:
        if op.body is not None:
            _group_block(k, op.body, limit)
    ops = block.ops
    i = 0
    while i < len(ops):
        if not is_warp_sum(ops[i]) or attr(ops[i], "joins_next"):
            i += 1
            continue
        group = [ops[i]]  # the members so far, adjacent in ops from index i
        results = {ops[i].result.id}
        j = i + 1
        while j < len(ops):
            op = ops[j]
            if is_warp_sum(op) and not (_reads(op) & results):
                # move the group down to just before op, then try op as its next member
                start = ops.index(group[0])
                del ops[start:start + len(group)]
                at = ops.index(op)
                ops[at:at] = group
                group[-1].attrs["joins_next"] = True
                if planned_bytes(k) > limit:  # undo: op does not join, the group stays where it was
                    group[-1].attrs.pop("joins_next")
                    del ops[at:at + len(group)]
                    ops[start:start] = group
                    break
                group.append(op)
                results.add(op.result.id)
                j = ops.index(op) + 1
                continue
            if not _crossable(op) or _reads(op) & results:
                break
            j += 1
        i = ops.index(group[-1]) + 1
