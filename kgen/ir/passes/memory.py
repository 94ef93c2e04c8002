"""Shared memory: plan every buffer's offset.

`plan_shared_memory` gives every buffer (staged operands, allocated buffers, scratch for
cross-warp reductions and layout conversions) the offset kgen.ir.placement chooses from their
live ranges, and the mbarriers of tensor copies and rings their place after the buffers. The
total must fit the descriptor's per-block limit.
"""
from __future__ import annotations

from ...errors import DoesNotFit
from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Kernel
from ..placement import place_shared, with_barriers


def plan_shared_memory(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    placed, bulk, end = place_shared(k)
    for op, offset in placed.values():
        op.attrs["smem_offset"] = offset
    for op in bulk[1:]:
        op.attrs["smem_offset"] = bulk[0].attrs["smem_offset"]
    barriers, k.shared_bytes = with_barriers(k, end)
    if barriers is not None:
        k.tma_barrier_offset = barriers
    k.notes["shared_bytes"] = k.shared_bytes
    if k.shared_bytes > target.lds_bytes_per_block:
        raise DoesNotFit(f"kernel {k.name} needs {k.shared_bytes} bytes of shared memory, more than {target.name}'s "
                         f"{target.lds_bytes_per_block} per block; use smaller tiles", resource="shared_memory",
                         needed=k.shared_bytes, available=target.lds_bytes_per_block)
    return k
