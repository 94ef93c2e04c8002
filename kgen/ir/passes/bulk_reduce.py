"""Tile atomic adds as bulk reductions from shared memory, where the target has them.

In a kernel whose spec asks for it (`bulk_reductions`: it measured faster in some kernels and
slower in others) and on a target with `shared_bulk_fp32_add` (sm_90: cp.reduce.async.bulk
.add.f32), an fp32 atomic_add of a 2-D tile that spans its tensor's last dim whole, in a layout
where every warp holds whole runs of columns of its rows (the lane and register bits are the low
bits of both dims, the warp bits above them: a wgmma accumulator's warp holds 16 rows x 64
columns), is done per warp: the warp writes its part into its own slice of a shared buffer,
fences it for the async proxy, and its lanes issue one bulk reduction per row. A thread then
issues its share of one instruction per row instead of a red.global per two elements (16 per
thread and query block in the attention backward's dkdv), and the copy engine, not the thread's
registers, holds the values in flight. What it measured: specs/fa2_bwd.yaml, docs/PERFORMANCE.md.

No block barrier is needed: each warp's slice is its own. Before rewriting its slice, a warp
waits until its previous reductions have read it (emitted with the op), and the kernel waits
for every reduction before it ends; the buffer is live from the op to the kernel's end
(plan_shared_memory), so no other buffer is placed over it. Rows are padded to a stride of 8
banks modulo 32, so that the fragment's 2-element stores fill all banks in two wavefronts.

Rows are 16-byte aligned without a test: a kernel adds only into outputs and scratch (it may not
write its op's inputs), which the op allocates contiguous, and the last dim is taken whole.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Kernel, Op, walk

BULK_ALIGN = 16  # bytes: the bulk copy's address and size granule (PTX ISA, cp.reduce.async.bulk)


def plan_bulk_reductions(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    if not (k.bulk_reductions and target.shared_bulk_fp32_add and options.bulk_reductions):
        return k
    for op in walk(k.body):
        if op.kind == "atomic_add" and not op.operands[0].is_scalar:
            geometry = bulk_geometry(op)
            if geometry is not None:
                op.attrs["bulk"] = geometry
                k.notes.setdefault("bulk_reductions", []).append(
                    f"{op.attrs['tensor']}: {geometry['rows']} rows x {geometry['cols']} fp32 per warp")
    return k


def bulk_geometry(op: Op) -> dict | None:
    """Rows and columns of one warp's part, the padded row stride (`ld`, elements) and the
    buffer's bytes; None where the op does not qualify."""
    value = op.operands[0]
    lay = value.layout
    index = op.attrs["index"]
    if value.dtype != "fp32" or lay is None or len(value.shape) != 2 or index[-1][0] != "all":
        return None
    if any(not any(b) for b in lay.lane + lay.warp):  # a lane or warp that only holds copies
        return None
    if any(sum(1 for x in b if x) != 1 for b in lay.reg + lay.lane):  # a basis along both dims
        return None
    extent = []
    for dim in (0, 1):
        bits = sorted(b[dim] for b in lay.reg + lay.lane if b[dim])
        if bits != [1 << i for i in range(len(bits))]:  # not the low bits: rows or columns not contiguous
            return None
        extent.append(1 << len(bits))
    rows, cols = extent
    if cols * 4 % BULK_ALIGN:
        return None
    ld = cols + (8 - cols) % 32  # rows 8 banks apart
    return {"rows": rows, "cols": cols, "ld": ld, "bytes": lay.nwarps * rows * ld * 4}
