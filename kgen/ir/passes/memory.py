"""Shared memory: stage dot operands, then plan every buffer's offset.

`stage_dot_operands` copies each dot operand from registers into shared memory, stored with
the reduction dim K contiguous ([M][K] for A, [N][K] for B) so that each lane's fragment is a
vector read (a pair of 16-bit values for mma.sync, four for MFMA: the descriptor's layouts
put consecutive registers along K). Rows are padded by 16 bytes so that the rows read by
consecutive lanes fall in different banks.

`plan_shared_memory` gives every buffer (staged operands, scratch for cross-warp reductions
and layout conversions) an offset. Buffers whose live ranges overlap interfere; networkx
holds that graph and buffers are placed greedily, largest first, below their neighbours'.
The total must fit the descriptor's per-block limit.
"""
from __future__ import annotations

import networkx as nx

from ...errors import SpecError
from ...hw.descriptor import Target
from ..core import Block, Kernel, Op, Value, walk

PAD_BYTES = 16
ELEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "int32": 4, "bool": 1}


def stage_dot_operands(k: Kernel, target: Target) -> Kernel:
    for block in _blocks(k.body):
        new_ops = []
        for op in block.ops:
            if op.kind == "dot":
                for i, role in ((0, "a"), (1, "b")):
                    v = op.operands[i]
                    rows, cols = (v.shape if role == "a" else v.shape[::-1])
                    pad = PAD_BYTES // ELEM_BYTES[v.dtype]
                    staged = Value(v.shape, v.dtype, place="shared")
                    new_ops.append(Op("stage", [v], [staged], {"role": role, "rows": rows, "ld": cols + pad,
                                                               "bytes": rows * (cols + pad) * ELEM_BYTES[v.dtype]}, loc=op.loc))
                    op.operands[i] = staged
            new_ops.append(op)
        block.ops[:] = new_ops
    return k


def scratch_bytes(op: Op) -> int:
    """Shared memory an op needs while it runs (besides staged operands)."""
    if op.kind == "reduce":
        src = op.operands[0]
        if src.layout is not None and src.layout.reduce_plan(op.attrs["axis"]).cross_warp:
            n = 1
            for s in op.result.shape or (1,):
                n *= s
            return 4 * n * src.layout.nwarps
    if op.kind == "convert":
        n = 1
        for s in op.result.shape:
            n *= s
        return 4 * n
    return 0


def plan_shared_memory(k: Kernel, target: Target) -> Kernel:
    order = {id(op): i for i, op in enumerate(walk(k.body))}
    spans = _loop_spans(k.body, order)
    buffers: dict[int, tuple[Op, int, int, int]] = {}  # id -> (op, bytes, start, end)
    for op in walk(k.body):
        if op.kind == "stage":
            last = _last_use(k.body, op.result, order, spans)
            buffers[id(op)] = (op, op.attrs["bytes"], order[id(op)], last)
        elif scratch_bytes(op):
            buffers[id(op)] = (op, scratch_bytes(op), order[id(op)], order[id(op)])
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
        taken = sorted(placed[n] for n in g.neighbors(node) if n in placed)
        offset = 0
        for lo, hi in taken:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed[node] = (offset, offset + size)
        buffers[node][0].attrs["smem_offset"] = offset
    k.shared_bytes = max((hi for _, hi in placed.values()), default=0)
    k.notes["shared_bytes"] = k.shared_bytes
    if k.shared_bytes > target.lds_bytes_per_block:
        raise SpecError(f"kernel {k.name} needs {k.shared_bytes} bytes of shared memory, more than {target.name}'s "
                        f"{target.lds_bytes_per_block} per block; use smaller tiles")
    return k


def _align(n: int) -> int:
    return (n + 15) // 16 * 16


def _blocks(block: Block):
    yield block
    for op in block.ops:
        if op.body is not None:
            yield from _blocks(op.body)


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
