"""Shared memory: plan every buffer's offset.

`plan_shared_memory` gives every buffer (staged operands, scratch for cross-warp reductions
and layout conversions) an offset. Buffers whose live ranges overlap interfere; networkx
holds that graph and buffers are placed greedily, largest first, below their neighbours'.
The total must fit the descriptor's per-block limit.
"""
from __future__ import annotations

import networkx as nx

from ...errors import DoesNotFit
from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import scratch_bytes, views_of
from ..core import Block, Kernel, Op, Value, walk
from .operands import SWIZZLE_ATOM_BYTES


def plan_shared_memory(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    order = {id(op): i for i, op in enumerate(walk(k.body))}
    spans = _loop_spans(k.body, order)
    buffers: dict[int, tuple[Op, int, int, int]] = {}  # id -> (op, bytes, start, end)
    bulk: list[Op] = []
    for op in walk(k.body):
        if op.kind in ("stage", "alloc_shared"):
            last = max(_last_use(k.body, v, order, spans) for v in views_of(k.body, op.result))
            buffers[id(op)] = (op, op.attrs["bytes"], order[id(op)], last)
        elif op.kind == "atomic_add" and scratch_bytes(op):
            # bulk reductions read their buffer after the op (in a loop, while the next iteration
            # runs), until the kernel's final wait: one buffer, live for the whole kernel, serves
            # every bulk atomic_add (each warp waits for its own reads before rewriting its slice)
            bulk.append(op)
        elif scratch_bytes(op):
            buffers[id(op)] = (op, scratch_bytes(op), order[id(op)], order[id(op)])
    if bulk:
        buffers[id(bulk[0])] = (bulk[0], max(scratch_bytes(op) for op in bulk), 0, len(order))
    g = nx.Graph()
    g.add_nodes_from(buffers)
    items = list(buffers.items())
    for i, (a, (_, _, s1, e1)) in enumerate(items):
        for b, (_, _, s2, e2) in items[i + 1:]:
            if s1 <= e2 and s2 <= e1:
                g.add_edge(a, b)
    placed: dict[int, tuple[int, int]] = {}
    for node in sorted(buffers, key=lambda n: -buffers[n][1]):
        size = _align(buffers[node][1])
        # a swizzled buffer starts on a 1024-byte atom: the hardware swizzles address bits
        align = SWIZZLE_ATOM_BYTES if buffers[node][0].attrs.get("smem_layout") == "sw128" else 16  # scratch has none
        taken = sorted(placed[n] for n in g.neighbors(node) if n in placed)
        offset = 0
        for lo, hi in taken:
            if _align(offset, align) + size <= lo:
                break
            offset = max(offset, hi)
        offset = _align(offset, align)
        placed[node] = (offset, offset + size)
        buffers[node][0].attrs["smem_offset"] = offset
    for op in bulk[1:]:
        op.attrs["smem_offset"] = bulk[0].attrs["smem_offset"]
    k.shared_bytes = max((hi for _, hi in placed.values()), default=0)
    if k.tma_barriers:  # the tensor copies' mbarriers and the rings' release ones, 8 bytes each, after the buffers
        k.tma_barrier_offset = k.shared_bytes = _align(k.shared_bytes, 8)
        k.shared_bytes += 8 * (k.tma_barriers + k.release_barriers)
    k.notes["shared_bytes"] = k.shared_bytes
    if k.shared_bytes > target.lds_bytes_per_block:
        raise DoesNotFit(f"kernel {k.name} needs {k.shared_bytes} bytes of shared memory, more than {target.name}'s "
                         f"{target.lds_bytes_per_block} per block; use smaller tiles", resource="shared_memory",
                         needed=k.shared_bytes, available=target.lds_bytes_per_block)
    return k


def _align(n: int, to: int = 16) -> int:
    return (n + to - 1) // to * to



def _loop_spans(block: Block, order: dict[int, int]) -> list[tuple[int, int, set[int]]]:
    """(first, last) op number of each loop, and the ids of the ops directly or deeply inside."""
    out = []
    for op in walk(block):
        if op.kind == "for":
            inner = {id(o) for o in walk(op.body)}
            out.append((order[id(op)], max(order[i] for i in inner) if inner else order[id(op)], inner))
    return out


def _last_use(block: Block, v: Value, order: dict[int, int], spans) -> int:
    last = 0
    for op in walk(block):
        if v in op.operands:
            end = order[id(op)]
            # used inside a loop that does not define it: live for the whole loop
            for start, stop, inner in spans:
                if id(op) in inner and not any(v in o.results for o in walk_ids(block, inner)):
                    end = max(end, stop)
            last = max(last, end)
    return last


def walk_ids(block: Block, ids: set[int]):
    return (op for op in walk(block) if id(op) in ids)
