"""Tile atomic adds as bulk reductions from shared memory, where the target has them.

On a target with `shared_bulk_fp32_add` (sm_90: cp.reduce.async.bulk .add.f32), an fp32
atomic_add of a 2-D tile that spans its tensor's last dim whole, in a layout where every warp holds whole runs of columns of its rows (the lane and register bits are the low
bits of both dims, the warp bits above them: a wgmma accumulator's warp holds 16 rows x 64
columns), is done per warp: the warp writes its part into its own slice of a shared buffer,
fences it for the async proxy, and its lanes issue one bulk reduction per row. A thread then
issues its share of one instruction per row instead of a red.global per two elements (16 per
thread and query block in the attention backward's dkdv), and the copy engine, not the thread's
registers, holds the values in flight.

Which path an add takes (`reduction_path`): the spec's `bulk_reductions` where it gives one (true,
false or an expression of the variant), else a byte model from the descriptor. Both paths move
the same bytes into L2; `fp32_reduce_tbps` says how fast each does it on the target (measured
under the contention of the attention backward's dq, kgen/bench/reductions.py), so an add goes
through shared memory where that path is the faster one and its staging buffer costs no block
per multiprocessor: with the buffer (shared memory as the later passes plan it, on a copy of the
kernel) shared memory must hold as many blocks as without it, or as the register file holds when
every thread takes the most registers, whichever is fewer. A kernel that then spills is retried
with per-element atomics first (kgen/build.py `spill_retry_options`).

No block barrier is needed: each warp's slice is its own. Before rewriting its slice, a warp
waits until its previous reductions have read it (emitted with the op), and the kernel waits
for every reduction before it ends; the buffer is live from the op to the kernel's end
(plan_shared_memory), so no other buffer is placed over it. Rows are padded to a stride of 8
banks modulo 32, so that the fragment's 2-element stores fill all banks in two wavefronts.

Rows are 16-byte aligned without a test: a kernel adds only into outputs and scratch (it may not
write its op's inputs), which the op allocates contiguous, and the last dim is taken whole.
"""
from __future__ import annotations

import copy

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Kernel, Op, walk

BULK_ALIGN = 16  # bytes: the bulk copy's address and size granule (PTX ISA, cp.reduce.async.bulk)
RESERVED_SHARED = 1024  # bytes the runtime keeps per block (CUDA programming guide, CC 9.0)


def plan_bulk_reductions(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    if not (target.shared_bulk_fp32_add and options.bulk_reductions) or k.bulk_reductions is False:
        return k
    adds = [(op, g) for op in walk(k.body) if op.kind == "atomic_add" and not op.operands[0].is_scalar
            for g in [bulk_geometry(op)] if g is not None]
    if not adds:
        return k
    bulk, why = reduction_path(k, target, options, adds)
    for op, geometry in adds:
        k.notes.setdefault("reductions", []).append(f"{op.attrs['tensor']} ({geometry['rows']} rows x "
                                                    f"{geometry['cols']} fp32 per warp): {why}")
        if bulk:
            op.attrs["bulk"] = geometry
    return k


def reduction_path(k: Kernel, target: Target, options: CompileOptions, adds: list[tuple[Op, dict]]) -> tuple[bool, str]:
    """(bulk?, why) for the tile adds `adds` of kernel `k` (one staging buffer serves them all):
    the spec's choice if it made one, else the byte model (module docstring)."""
    if k.bulk_reductions:
        return True, "bulk, as the spec asks"
    atomic, bulk = target.fp32_reduce_tbps.get("atomic"), target.fp32_reduce_tbps.get("bulk")
    if atomic is None or bulk is None:
        return False, "atomics: the descriptor has no measured rate for both paths"
    if bulk <= atomic:
        return False, f"atomics, {atomic} TB/s against bulk {bulk} TB/s"
    # the staging buffer may not cost a block per multiprocessor: the kernel's shared memory
    # without and with it, as the later passes plan it
    from ..pipeline import planned_shared_bytes  # the pass list imports this pass

    trial = copy.deepcopy(k)
    at = {i for i, op in enumerate(walk(k.body)) if any(op is a for a, _ in adds)}
    for i, op in enumerate(walk(trial.body)):
        if i in at:
            op.attrs["bulk"] = bulk_geometry(op)
    without = planned_shared_bytes(k, target, options, "merge_stage_barriers")
    with_ = planned_shared_bytes(trial, target, options, "merge_stage_barriers")
    threads = k.num_warps * target.wave_size
    granted = max(1, target.regs_per_cu // (threads * _register_ceiling(target)))
    blocks = [target.lds_bytes_per_cu // (b + RESERVED_SHARED) for b in (without, with_)]
    if with_ > target.lds_bytes_per_block or blocks[1] < min(blocks[0], granted):
        return False, (f"atomics: the {with_ - without}-byte staging buffer leaves shared memory for "
                       f"{blocks[1]} block(s) per multiprocessor, {min(blocks[0], granted)} without it")
    return True, f"bulk, {bulk} TB/s against atomics {atomic} TB/s"


def _register_ceiling(target: Target) -> int:
    """Registers per thread as allocated when a thread takes the most: the count rounded up to
    the allocation step (8 on sm_90, the setmaxnreg step), else to a power of two."""
    step = target.register_reallocation[2] if target.register_reallocation else 1
    most = -(-target.max_regs_per_thread // step) * step
    return most if step > 1 else 1 << (most - 1).bit_length()


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
