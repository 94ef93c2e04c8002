"""Mark the warpgroup dots that start from zero: their accumulator tile is never written.

A zero tile read only as the accumulator of one warpgroup dot (wgmma) need not be filled: the
dot's first k-step runs with scale-d = 0 (D = A B) instead. Zeroing the registers would put
ordinary writes to accumulators between the wgmma instructions of a dot with repeats (nvcc
orders them so), and ptxas then serialises the instructions (its C7517/C7519 notes). Recorded
as `zero_start` on the dot and `unwritten` on the tile's `full`, which codegen follows.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import is_lone_zero, producers
from ..core import Kernel, use_counts, walk
from .dot_tiling import instr_of


def mark_zero_starts(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    uses, made_by = use_counts(k.body), producers(k.body)
    for op in walk(k.body):
        if op.kind != "dot" or len(op.operands) < 3 or instr_of(target, op.attrs["instr"]).scope != "warpgroup":
            continue
        acc = op.operands[2]
        fill = made_by.get(id(acc))
        if is_lone_zero(fill, acc, uses):
            op.attrs["zero_start"] = True
            fill.attrs["unwritten"] = True
    return k
