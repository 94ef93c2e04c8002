"""Read each launch value once and drop the pure ops nothing reads.

A spec may read a size, a scalar argument or a program id on several lines (`pid1` twice in the
SSD backward's dx kernel); later reads are renamed to the first, in the kernel's outer block.
Specialisation and the passes leave ops whose results nobody reads (a row index only a dropped
mask used); any op without effects whose results have no reader is removed, until none is left.
The compiler drops them too: this is how the source reads, not what runs.

Integer arithmetic on constants (`floordiv(j - 0, 1)`) is left to nvcc: folded here, the D=128
attention backward's dkdv went from 255 registers to spilling at ptxas's defaults (the build then
takes the descriptor's frugal flags, 1% slower on the H200).
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Block, Kernel, Value, rename_operands, use_counts

# ops with no effect but their results: removable when nothing reads them
PURE = ("const", "size", "scalar_arg", "program_id", "unary", "binary", "where", "cast", "expand", "broadcast",
        "full", "arange", "trans")


def drop_dead_code(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    renamed = _repeated_reads(k.body)
    for op in k.body.ops:
        rename_operands(op, renamed)
    _drop_unread(k.body)
    return k


def _repeated_reads(block: Block) -> dict[int, Value]:
    """A size, scalar argument or program id read again in the kernel's outer block: the later
    reads renamed to the first (they read the same launch-wide value)."""
    first: dict[tuple, Value] = {}
    renamed: dict[int, Value] = {}
    for op in block.ops:
        if op.kind in ("size", "scalar_arg", "program_id"):
            key = (op.kind, tuple(sorted(op.attrs.items())))
            if key in first:
                renamed[id(op.result)] = first[key]
            else:
                first[key] = op.result
    return renamed


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
        if op.kind in PURE and op.body is None and not any(uses.get(id(r), 0) for r in op.results):
            removed = True
            continue
        kept.append(op)
    block.ops[:] = kept
    return removed
