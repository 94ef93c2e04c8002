"""`x + dot(a, b)` becomes `dot(a, b, x)`: the matrix instruction accumulates into x.

Written the natural way, attention's `acc * alpha + dot(p, v)` and the backward's
`dk + dot(ds.T, q)` give the dot a fresh zero accumulator and add it afterwards, so a second
accumulator tile the size of the output lives in registers during the dot (64 more registers per
thread for attention's forward at head_dim 128). Accumulating in place is what the instruction
does anyway (D = A B + C). The sum is then formed in a different order, as in any blocked matmul.

Only accumulators of at most MAX_REGS registers per thread are folded. The dot then waits for
x (attention's rescale), where unfolded it could start at once and overlap the multiplies.
Measured on the H200 (FA2 forward, S = 4k, TFLOP/s unfolded -> folded): 32 registers (head_dim
64) 144 -> 190 non-causal and 128 -> 164 causal; 64 registers (head_dim 128) 188 -> 158 and
163 -> 132. The backward's dk and dv accumulators (32 registers) fold, which is what let its
64-key blocks fit without spilling.

That limit is for instructions one warp issues (mma.sync, MFMA). A warpgroup instruction
(wgmma) always accumulates in place: it runs asynchronously on its accumulator registers, and an
unfolded sum would keep a second accumulator of the output's size live.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import is_lone_zero, producers
from ..core import Block, Kernel, blocks, use_counts
from .dot_tiling import instr_of

MAX_REGS = 32


def accumulate_into_dots(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    uses = use_counts(k.body)
    for block in blocks(k.body):
        _fold(block, uses, target)
    return k


def _fold(block: Block, uses: dict[int, int], target: Target) -> None:
    defs = producers(block, deep=False)
    for add in [op for op in block.ops if op.kind == "binary" and op.attrs["fn"] == "add"]:
        for i in (0, 1):
            d, x = add.operands[i], add.operands[1 - i]
            dot = defs.get(id(d))
            if dot is None or dot.kind != "dot" or uses.get(id(d)) != 1 or x.shape != d.shape or x.dtype != "fp32":
                continue
            if d.layout is None or x.layout != d.layout:
                continue
            if d.layout.nregs > MAX_REGS and instr_of(target, dot.attrs["instr"]).warps == 1:
                continue
            zero = defs.get(id(dot.operands[2]))
            if not is_lone_zero(zero, dot.operands[2], uses):
                continue
            # the dot moves to the add's place (x may be computed between them) and takes its result
            block.ops.remove(zero)
            block.ops.remove(dot)
            dot.operands[2] = x
            dot.results = add.results
            block.ops[block.ops.index(add)] = dot
            break
