"""Loop-invariant staging: move a dot operand's copy to shared memory out of the loops that do
not change it.

A dot inside a loop whose operand is defined outside the loop (the query tile of attention's
forward, the key and value tiles of its backward) would otherwise copy the same registers to
shared memory, with two barriers, on every iteration, and keep the register copy alive across
the loop. Hoisted, the copy happens once and the staged buffer stays live for the whole loop
(plan_shared_memory extends a buffer used inside a loop that does not define it to the loop's
end). Layout-only ops (trans, expand, broadcast) whose operands are invariant move too, so
that `dot(q, k.T)` written inside the loop still finds `k.T` invariant.

Two loops that read the same invariant operand (the attention forward's unmasked and masked
key loops both read q) would each bring their own copy out; an op that repeats one already
hoisted into the same block (same kind, operands, attributes and result type) is dropped and
its readers read the first. Otherwise q was staged twice, and since its load then had two
readers it was no longer copied asynchronously (passes/async_copy.py converts single-use loads).
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Block, Kernel, Op, Value, rename_operands, walk

# ops that only relabel which lane holds what: free to compute anywhere, no memory access; and
# `convert`, which moves an invariant tile to another layout through shared memory with two
# barriers: done once before the loop instead of every iteration (the chunked scan's cumsum
# column, converted for its (rows x sources) weights, was converted again for each source block)
MOVABLE = ("trans", "expand", "broadcast", "stage", "view_shared", "convert")


def hoist_invariant_stages(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    _hoist_block(k.body)
    return k


def _hoist_block(block: Block) -> None:
    new_ops: list[Op] = []
    hoisted: dict[tuple, Value] = {}  # signature of a hoisted op -> its result
    renamed: dict[int, Value] = {}
    for op in block.ops:
        if op.kind == "for" and op.body is not None:
            _hoist_block(op.body)  # innermost first, so a stage can climb several loops
            for moved in _take_invariant(op.body):
                rename_operands(moved, renamed)
                key = _signature(moved)
                if key in hoisted:
                    renamed[id(moved.result)] = hoisted[key]
                    continue
                hoisted[key] = moved.result
                new_ops.append(moved)
            if renamed:
                rename_operands(op, renamed)
        new_ops.append(op)
    block.ops[:] = new_ops


def _signature(op: Op) -> tuple:
    r = op.result
    return (op.kind, tuple(id(v) for v in op.operands), repr(sorted(op.attrs.items())),
            r.shape, r.dtype, r.place, r.layout)


def _take_invariant(body: Block) -> list[Op]:
    """Remove and return the movable ops of `body` (top level) whose operands are all defined
    outside the loop, in their original order."""
    defined: set[int] = {id(v) for v in body.args}
    for op in walk(body):
        defined.update(id(v) for v in op.results)
    moved, kept = [], []
    for op in body.ops:
        if op.kind in MOVABLE and op.body is None and not any(id(v) in defined for v in op.operands):
            moved.append(op)
            defined.difference_update(id(v) for v in op.results)  # now defined outside
        else:
            kept.append(op)
    body.ops[:] = kept
    return moved
