"""Where each shared buffer goes: live ranges, their interference graph, offsets.

Buffers (staged operands, allocated buffers with their slots, scratch for cross-warp reductions
and layout conversions, the bulk reductions' one buffer) whose live ranges overlap interfere;
networkx holds that graph and buffers are placed greedily, largest first, below their
neighbours'. plan_shared_memory records the placement and checks it against the descriptor;
passes that must know whether a change still fits (passes/staged_loads.py) ask it first.
"""
from __future__ import annotations

import networkx as nx

from ..hw.descriptor import Target
from .analysis import scratch_bytes, views_of
from .core import Block, Kernel, Op, Value, walk
from .passes.operands import SWIZZLE_ATOM_BYTES


def place_shared(k: Kernel) -> tuple[dict[int, tuple[Op, int]], list[Op], int]:
    """id of each buffer's op -> (op, offset); the bulk atomic_adds that share the first one's
    buffer; the bytes the buffers span (without the mbarriers plan_shared_memory adds)."""
    ops = list(walk(k.body))
    order = {id(op): i for i, op in enumerate(ops)}
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
            # a sum that joins the next (passes/sum_groups.py) reads its slices after the group's
            # last member writes its own: live until then
            buffers[id(op)] = (op, scratch_bytes(op), order[id(op)], order[id(op)] + _joined(order[id(op)], ops))
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
        size = align(buffers[node][1])
        # a swizzled buffer starts on a 1024-byte atom: the hardware swizzles address bits
        to = SWIZZLE_ATOM_BYTES if buffers[node][0].attrs.get("smem_layout") == "sw128" else 16  # scratch has none
        taken = sorted(placed[n] for n in g.neighbors(node) if n in placed)
        offset = 0
        for lo, hi in taken:
            if align(offset, to) + size <= lo:
                break
            offset = max(offset, hi)
        offset = align(offset, to)
        placed[node] = (offset, offset + size)
    total = max((hi for _, hi in placed.values()), default=0)
    return {n: (buffers[n][0], lo) for n, (lo, _) in placed.items()}, bulk, total


def with_barriers(k: Kernel, end: int) -> tuple[int | None, int]:
    """Where the tensor copies' and the rings' mbarriers (8 bytes each) go after buffers that end
    at `end` (None: the kernel has none), and the block's shared bytes with them."""
    if not k.tma_barriers:
        return None, end
    at = align(end, 8)
    return at, at + 8 * (k.tma_barriers + k.release_barriers)


def planned_bytes(k: Kernel) -> int:
    """The block's shared bytes as the planner would place the kernel now, mbarriers included (a
    pass that weighs adding shared memory asks this of a trial)."""
    return with_barriers(k, place_shared(k)[2])[1]


def shared_budget(k: Kernel, target: Target) -> int:
    """The most shared bytes a pass may plan for: the block's limit, and the share of a
    multiprocessor that still holds the programs the kernel asks for (its `occupancy`)."""
    return min(target.lds_bytes_per_block, target.lds_bytes_per_cu // max(1, k.occupancy))


def _joined(i: int, ops: list[Op]) -> int:
    """How many ops after the i-th (in walk order) the group of sums it joins reaches: its
    members are side by side in one block."""
    n = 0
    while ops[i + n].attrs.get("joins_next"):
        n += 1
    return n


def align(n: int, to: int = 16) -> int:
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
