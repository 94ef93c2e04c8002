"""Analyses that several passes (and the code generator) read: who produces a value, what a
buffer is seen through, how much scratch an op needs, which scalar ops compute a loop's index.

They compute facts about the IR and change nothing; a pass that needs one imports it from here,
never from another pass.
"""
from __future__ import annotations

from .core import ELEM_BYTES, WRITES, Block, Kernel, Op, Value, walk

# scalar ops a copy's index may be recomputed through: pure functions of their operands, the
# program's position, sizes and scalar arguments
PURE_SCALAR = ("const", "binary", "unary", "cast", "where", "program_id", "size", "scalar_arg", "cdiv")


def producers(block: Block, deep: bool = True) -> dict[int, Op]:
    """id of each value -> the op that makes it, in `block` and (deep) every block inside it."""
    return {id(r): op for op in (walk(block) if deep else block.ops) for r in op.results}


def scratch_bytes(op: Op) -> int:
    """Shared memory an op needs while it runs (besides staged operands). Its slots hold the
    accumulator type (float or int for anything narrower, long long for int64: _slot_bytes)."""
    if op.kind == "reduce":
        src = op.operands[0]
        if src.layout is not None and src.layout.reduce_plan(op.attrs["axis"]).cross_warp:
            # a slice of the result per position of a warp along the axis: the warps that differ
            # in other bits hold other elements of the result (or copies of the same partial)
            n = 1
            for s in op.result.shape or (1,):
                n *= s
            return _slot_bytes(src) * n * (1 << len(src.layout.bits_along(op.attrs["axis"])["warp"]))
    if op.kind == "scan":
        src = op.operands[0]
        if src.layout is not None and src.layout.reduce_plan(op.attrs["axis"]).cross_warp:
            return _slot_bytes(src) * src.layout.nregs * src.layout.nlanes * src.layout.nwarps  # a slot per thread and register
    if op.kind == "atomic_add" and "bulk" in op.attrs:  # a slice per warp (passes/bulk_reduce.py)
        return op.attrs["bulk"]["bytes"]
    if op.kind == "convert":
        n = 1
        for s in op.result.shape:
            n *= s
        return _slot_bytes(op.result) * n
    return 0


def _slot_bytes(v: Value) -> int:
    """Bytes of one scratch slot for v's elements: 4 (narrower types are given 4 as well), 8 for int64."""
    return max(4, ELEM_BYTES[v.dtype])


def buffer_bytes(block: Block) -> int:
    """Shared memory of every staged operand and allocated buffer in `block`, as if all were
    live at once (an upper bound on what the planner places)."""
    return sum(op.attrs["bytes"] for op in walk(block) if op.kind in ("stage", "alloc_shared"))


def views_of(block: Block, buf: Value) -> list[Value]:
    """The buffer and every view_shared or slot of it (reads through a view keep the buffer
    alive)."""
    out = [buf]
    for op in walk(block):
        if op.kind in ("view_shared", "slot") and op.operands[0] in out:
            out.append(op.result)
    return out


def read_only(k: Kernel) -> frozenset[str]:
    """The tensors no op of the kernel writes: a scalar read of one gives the same value wherever
    and however often it is made (a block list another kernel wrote, cu_seqlens)."""
    return frozenset(k.tensors) - {op.attrs["tensor"] for op in walk(k.body) if op.kind in WRITES}


def recomputable(op: Op, reads: frozenset[str]) -> bool:
    """Whether a scalar op may be made again elsewhere with the same result: pure arithmetic, or a
    scalar load, unpredicated, of a tensor in `reads` (read_only)."""
    if op.body is not None or any(r.shape != () for r in op.results):
        return False
    return op.kind in PURE_SCALAR or (op.kind == "load" and op.attrs["tensor"] in reads and not op.attrs.get("pred"))


def index_chain(operands: list[Value], body: Block, iv: Value, inside: set[int],
                reads: frozenset[str] = frozenset()) -> list[Op] | None:
    """The ops of `body` (top level, in body order) that compute `operands` from the induction
    variable and values defined before the loop, all pure scalar arithmetic or scalar loads of
    `reads` (recomputable); None if an operand depends on anything else (another load, a value
    carried around the loop, a nested loop's result), since that cannot be recomputed for
    another iteration."""
    producer = producers(body, deep=False)
    chain: set[int] = set()
    todo = [v for v in operands if id(v) in inside and v is not iv]
    while todo:
        op = producer.get(id(todo.pop()))
        if op is None or not recomputable(op, reads):
            return None
        if id(op) not in chain:
            chain.add(id(op))
            todo += [v for v in op.operands if id(v) in inside and v is not iv]
    return [op for op in body.ops if id(op) in chain]


def recompute_chain(chain: list[Op], iv: Value, at: Value, operands: list[Value]) -> tuple[list[Op], list[Value]]:
    """`chain` recomputed for the iteration whose induction variable is `at`: the new ops, and
    `operands` with every value of the chain (and the induction variable) replaced."""
    new = {id(iv): at}
    ops = []
    for op in chain:
        results = [Value(r.shape, r.dtype, place=r.place, layout=r.layout) for r in op.results]
        ops.append(Op(op.kind, [new.get(id(v), v) for v in op.operands], results, dict(op.attrs), loc=op.loc))
        new.update((id(r), n) for r, n in zip(op.results, results))
    return ops, [new.get(id(v), v) for v in operands]


def is_lone_zero(producer: Op | None, v: Value, uses: dict[int, int]) -> bool:
    """`v` is a zero tile (made by `producer`) that one operand reads: a dot's accumulator that can
    be replaced (here) or never written (a warpgroup dot's first k-step ignores it)."""
    return producer is not None and producer.kind == "full" and producer.attrs["value"] == 0 and uses.get(id(v)) == 1
