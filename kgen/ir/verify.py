"""The IR verifier, run after every pass: every operand is defined before use, in scope; loops
carry as many values as they yield; every op's attributes are those its kind declares, of their
types (kgen/ir/attrs.py); layouts, once assigned, cover their tiles; buffers, once placed, have
their offsets; a sum that joins the next one's barrier is followed by one it can join."""
from __future__ import annotations

from ..errors import KgenError
from .analysis import scratch_bytes
from .attrs import problems
from .core import Block, Kernel, Op, Value
from .passes.layouts import SAME_LAYOUT


class VerifyError(KgenError):
    """A pass produced malformed IR: a bug in kgen, not in the spec."""


def verify(k: Kernel, after: str, done: frozenset[str] = frozenset()) -> None:
    """`done`: the passes run so far (`after` among them). From assign_layouts on every register
    tile has a layout; an attribute a pass decides is required once it ran (kgen/ir/attrs.py)."""
    _block(k.body, set(), after, "assign_layouts" in done, k.num_warps, frozenset(done))


def _fail(after: str, op: Op, msg: str) -> VerifyError:
    return VerifyError(f"IR verification failed after pass '{after}' at {op.kind} ({op.loc}): {msg}")


def _block(block: Block, defined: set[int], after: str, layouts: bool, warps: int, done: frozenset[str]) -> None:
    scope = set(defined) | {v.id for v in block.args}
    for i, op in enumerate(block.ops):
        if op.kind == "reduce" and op.attrs.get("joins_next"):
            nxt = block.ops[i + 1] if i + 1 < len(block.ops) else None
            if nxt is None or nxt.kind != "reduce" or op.result.id in {v.id for v in nxt.operands} or not scratch_bytes(op) or not scratch_bytes(nxt):
                raise _fail(after, op, "a sum that joins the next one's barrier must be a sum across warps followed "
                                       "by one that does not read it")
        for v in op.operands:
            if v.id not in scope:
                raise _fail(after, op, f"operand {v!r} is used before it is defined")
        wrong = problems(op, done)
        if wrong:
            raise _fail(after, op, "; ".join(wrong))
        if op.kind == "for":
            inits, args, results = op.operands[3:], op.body.args[1:], op.results
            if not (len(inits) == len(args) == len(results) == len(op.body.ops[-1].operands)):
                raise _fail(after, op, "loop-carried values, block arguments and results differ in number")
            if not op.body.ops or op.body.ops[-1].kind != "yield":
                raise _fail(after, op, "a loop body must end in yield")
            if layouts:
                yields = op.body.ops[-1].operands
                for group in zip(inits, args, yields, results):
                    if not group[0].is_scalar and len({v.layout for v in group}) > 1:
                        raise _fail(after, op, f"the loop-carried {group[3]!r} has other layouts as its initial value, "
                                               "block argument, yielded value and result: one set of registers needs one")
            _block(op.body, scope, after, layouts, warps, done)
        elif op.body is not None:  # a producer's program (passes/specialize.py) sees what came before it
            _block(op.body, scope, after, layouts, warps, done)
        if layouts and op.kind in SAME_LAYOUT:
            for v in op.operands:
                if v.shape == op.result.shape and not v.is_scalar and v.layout != op.result.layout:
                    raise _fail(after, op, f"operand {v!r} is not in its result's layout: an elementwise op reads "
                                           "its operands' registers as its own")
        for r in op.results:
            if layouts and r.place == "reg" and not r.is_scalar:
                _check_layout(after, op, r, warps)
            scope.add(r.id)


def _check_layout(after: str, op: Op, v: Value, warps: int) -> None:
    lay = v.layout
    if lay is None:
        raise _fail(after, op, f"{v!r} has no layout")
    if lay.shape != v.shape:
        raise _fail(after, op, f"{v!r} has shape {v.shape} but its layout is for {lay.shape}")
    if lay.nwarps != warps:
        raise _fail(after, op, f"{v!r}'s layout spans {lay.nwarps} warps, the kernel has {warps}")
    if not lay.covers_tile():
        raise _fail(after, op, f"{v!r}'s layout leaves elements of its tile unowned")
