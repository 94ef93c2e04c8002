"""Compute each scalar value once and drop the pure ops nothing reads.

A spec may compute the same scalar on several lines (`pid1` read twice in the SSD backward's dx
kernel, `c * chunk_size` in each load's index); a pure scalar op that repeats an earlier one of
its scope or an enclosing scope (same kind, attributes and operands) is renamed to that one.
Specialisation and the passes leave ops whose results nobody reads (a row index only a dropped
mask used); any op without effects whose results have no reader is removed, until none is left
(scalar loads and gathers included: reading has no effect).
The compiler does both too: this is how the source reads, not what runs.

Integer arithmetic on constants (`floordiv(j - 0, 1)`) is left to nvcc: folded here, the D=128
attention backward's dkdv went from 255 registers to spilling at ptxas's defaults (the build then
takes the descriptor's frugal flags, 1% slower on the H200).
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Block, Kernel, Value, use_counts

# ops with no effect but their results: removable when nothing reads them
PURE = ("const", "size", "scalar_arg", "program_id", "unary", "binary", "where", "cast", "expand", "broadcast",
        "full", "arange", "trans")


# scalar ops whose result depends only on their kind, attributes and operands
SHAREABLE = ("const", "size", "scalar_arg", "program_id", "unary", "binary", "where", "cast")


def drop_dead_code(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    written = {t.alias for t in k.tensors.values() if t.alias is not None}  # inputs an output is written over
    inputs = frozenset(n for n, t in k.tensors.items() if t.role == "input" and n not in written)
    _share_repeats(k.body, {}, {}, inputs)
    _drop_unread(k.body)
    return k


def _share_repeats(block: Block, seen: dict[tuple, Value], renamed: dict[int, Value], inputs: frozenset[str]) -> None:
    """Rename each repeat of a shareable scalar op to its first computation in this block or an
    enclosing one (`seen`: what those computed before this block); a loop body sees what came
    before the loop, never what an inner block computed. A scalar load from an input (which no
    kernel of the op writes) is shareable too: the bounds block_phases derives from a mask that
    loads (a document's start) read the same entries several times."""
    seen = dict(seen)
    for op in block.ops:
        op.operands = [renamed.get(id(v), v) for v in op.operands]
        if op.body is not None:
            _share_repeats(op.body, seen, renamed, inputs)
        elif ((op.kind in SHAREABLE or (op.kind == "load" and op.attrs.get("tensor") in inputs))
              and len(op.results) == 1 and op.result.is_scalar):
            key = (op.kind, op.result.dtype, repr(sorted(op.attrs.items())), tuple(id(v) for v in op.operands))
            if key in seen:
                renamed[id(op.result)] = seen[key]
            else:
                seen[key] = op.result


def _drop_unread(block: Block) -> None:
    """Remove pure ops whose results nothing reads, until none is left (a removal can leave its
    operands' producers unread)."""
    while _drop_in(block, use_counts(block)):
        pass


def _drop_in(block: Block, uses: dict[int, int]) -> bool:
    kept, removed = [], False
    for op in block.ops:
        if op.body is not None:
            removed |= _drop_in(op.body, uses)
        # reads have no effect either: a gather, a scalar load (the bounds that block_table's
        # analysis computes for a table it then finds needless leave their loads unread)
        removable = op.kind in PURE or op.kind == "gather" or (op.kind == "load" and all(r.is_scalar for r in op.results))
        if removable and op.body is None and not any(uses.get(id(r), 0) for r in op.results):
            removed = True
            continue
        kept.append(op)
    block.ops[:] = kept
    return removed
