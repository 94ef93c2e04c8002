"""Issue each one-shot global -> shared copy as early as its operands allow.

use_async_copies leaves a copy outside loops where its load was: right before its wait. A
product of two copied tiles (the chunked scan's C_t . H_c, dx's B_s . G^T) then waits for the
first copy before the second is even issued, two memory round trips in a row where one would
do; register loads written before the product (x rows, cumsum values) are likewise not
overlapped with the copies. Moved up, with the buffer it fills, past the ops that neither
define its operands nor touch shared memory, every copy of a group is in flight at once and
each wait stays where it was.

A copy moves past: register arithmetic, register loads, waits for other copies, and stores to
other tensors (a store to the tensor it reads, or an atomic add, stops it: the copy must see
that write). It stops at the op defining one of its operands, at another copy (copies keep
their order), at a loop, and at any op that reads or writes shared memory (a dot, a staged
tile, a cross-warp reduction): crossing those would keep its buffer live beside theirs and
could cost occupancy. Only copies of the kernel's top level move (a loop's copies are
pipelined by use_async_copies). A cp.async wait the moved copies now precede keeps waiting
only for its own group: `pending` counts the groups committed after its copy.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Kernel, Op
from ..analysis import scratch_bytes
from ..attrs import attr

# register-only ops (no memory, no barrier), loads, and other copies' waits
CROSSABLE = ("const", "size", "scalar_arg", "program_id", "arange", "full", "unary", "binary", "where",
             "cast", "expand", "broadcast", "trans", "cdiv", "reduce", "scan", "load", "wait_async")


def issue_copies_early(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    ops = k.body.ops
    for copy in [op for op in ops if op.kind == "copy_async" and not attr(op, "pred")]:
        alloc = next((op for op in ops if op.kind == "alloc_shared" and op.result is copy.operands[0]), None)
        if alloc is None:
            continue
        needs = {id(v) for v in copy.operands[1:]}
        ops.remove(alloc)
        at = ops.index(copy)
        while at > 0 and _crossable(ops[at - 1], copy, needs):
            at -= 1
        ops.remove(copy)
        ops[at:at] = [alloc, copy]
    _count_top_level_pending(k)
    return k


def _crossable(op: Op, copy: Op, needs: set[int]) -> bool:
    if any(id(r) in needs for r in op.results) or op.body is not None:
        return False
    if op.kind == "store":
        return op.attrs["tensor"] != copy.attrs["tensor"]
    return op.kind in CROSSABLE and scratch_bytes(op) == 0


def _count_top_level_pending(k: Kernel) -> None:
    """A top-level cp.async wait waits for all but the groups committed after its own copy."""
    ops = k.body.ops
    committed: list[Op] = []  # top-level cp.async copies so far, in order
    for op in ops:
        if op.body is not None:
            committed.clear()  # a loop's groups: wait for everything, as before
        elif op.kind == "copy_async" and not attr(op, "tma"):
            committed.append(op)
        elif op.kind == "wait_async" and not attr(op, "tma"):
            mine = [i for i, c in enumerate(committed) if c.operands[0] is op.operands[0]]
            op.attrs["pending"] = len(committed) - 1 - mine[-1] if mine else 0
