"""Choose how the threads of a cp.async copy address their 16-byte chunks (recorded for codegen).

Thread t copies chunks t, t + threads, ... of the tile (templates/common/ops.j2 copy_async).
Two forms are cheaper than computing every chunk's row, column and slot from its index:
- `stepped`: when every iteration of the copy loop moves all threads the same whole number of
  rows down (columns unchanged), a thread's chunks are its first chunk plus i whole steps, so the
  loop adds one stride instead of dividing (about 12 integer instructions per 16-byte chunk in
  the attention backward's D=128 copies, measured on the H200). `CompileOptions.stepped_copies`
  turns it off: it keeps the first chunk's coordinates live across the loop, and a kernel that
  spills with it is retried without (kgen.build.spill_retry_options).
- `slot_steps`: into a 128-byte-swizzled buffer, when each iteration moves all threads a whole
  number of 8-row swizzle atoms down, the slot of the thread's first chunk plus i atoms' worth,
  so that nvcc computes the XOR once (from the chunk's row it could not tell that rows 8 apart
  share it, and the D=128 dkdv spilled).
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..attrs import attr
from ..core import ELEM_BYTES, Kernel, walk
from .operands import CORE_ROWS

CHUNK_BYTES = 16  # one cp.async of 16 bytes per thread and chunk


def choose_copy_addressing(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    threads = k.num_warps * target.wave_size
    for op in walk(k.body):
        if op.kind != "copy_async" or attr(op, "tma"):
            continue
        rows, cols = op.attrs["shape"]
        per_row = cols // (CHUNK_BYTES // ELEM_BYTES[op.operands[0].dtype])
        layout = attr(op, "smem_layout")
        # core-matrix buffers take chunks down the 8 rows of a core first (codegen's _chunk_coords)
        rows_apart = 8 * per_row if layout == "cores" else per_row
        op.attrs["stepped"] = options.stepped_copies and threads % rows_apart == 0 and (rows * per_row) % threads == 0
        op.attrs["slot_steps"] = layout == "sw128" and threads % per_row == 0 and (threads // per_row) % CORE_ROWS == 0
    return k
