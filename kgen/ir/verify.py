"""The IR verifier, run after every pass: every operand is defined before use, in scope; types
agree where an op says they must; layouts, once assigned, cover their tiles."""
from __future__ import annotations

from ..errors import KgenError
from .core import Block, Kernel, Op, Value


class VerifyError(KgenError):
    """A pass produced malformed IR: a bug in kgen, not in the spec."""


def verify(k: Kernel, after: str, layouts: bool = False) -> None:
    _block(k.body, set(), after, layouts, k.num_warps)


def _fail(after: str, op: Op, msg: str) -> VerifyError:
    return VerifyError(f"IR verification failed after pass '{after}' at {op.kind} ({op.loc}): {msg}")


def _block(block: Block, defined: set[int], after: str, layouts: bool, warps: int) -> None:
    scope = set(defined) | {v.id for v in block.args}
    for op in block.ops:
        for v in op.operands:
            if v.id not in scope:
                raise _fail(after, op, f"operand {v!r} is used before it is defined")
        if op.kind == "for":
            inits, args, results = op.operands[3:], op.body.args[1:], op.results
            if not (len(inits) == len(args) == len(results) == len(op.body.ops[-1].operands)):
                raise _fail(after, op, "loop-carried values, block arguments and results differ in number")
            if not op.body.ops or op.body.ops[-1].kind != "yield":
                raise _fail(after, op, "a loop body must end in yield")
            _block(op.body, scope, after, layouts, warps)
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
