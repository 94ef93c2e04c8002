"""Give every register tile a layout, and insert `convert` where two uses disagree.

Anchors first: a dot's accumulator and result take the matrix instruction's C layout (from
the descriptor, via dot_tiling). Layouts then flow through elementwise ops, loop-carried
values, reductions (the slice of the operand), expands, broadcasts and transposes, in both
directions where that is unique. Tiles still without one get a blocked layout (16-byte vector
accesses along the contiguous last dim) in program order, each followed by the same flow, so
that e.g. a 1D tile loaded to be combined with a dot's rows is loaded straight into the row
slice of the C layout. Any constraint still broken after that is mended with a `convert`.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Block, Kernel, Op, Value, blocks, walk
from ...layout import Layout, blocked, blocked1d, expand, squeeze_broadcast, transpose
from .dot_tiling import acc_layout

ELEMENTWISE = ("unary", "binary", "where", "cast")
# ops whose result has the layout of their same-shaped operands (a scan runs along an axis in
# place; a gather reads one element per element of its index tiles)
SAME_LAYOUT = ELEMENTWISE + ("scan", "gather")


def assign_layouts(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    ops = list(walk(k.body))
    for op in ops:
        if op.kind == "dot":
            lay = acc_layout(target, op.attrs)
            for v in (op.operands[2], op.result):
                v.layout = v.layout or lay
    _flow(ops)
    # defaults in program order: 2D loads first (they fix how memory is read), then the rest
    rounds = (lambda op: op.kind == "load" and len(op.result.shape) == 2, lambda op: op.kind == "load", lambda op: True)
    for wanted in rounds:
        for op in ops:
            for v in op.results if wanted(op) else ():
                if v.layout is None and not v.is_scalar and v.place == "reg":
                    v.layout = default_layout(v, k.num_warps, target.wave_size)
                    _flow(ops)
    for block in blocks(k.body):
        _legalise(block, k.num_warps, target.wave_size)
    return k


def default_layout(v: Value, warps: int, wave: int) -> Layout:
    elem_bytes = 2 if v.dtype in ("bf16", "fp16") else 1 if v.dtype == "bool" else 4
    if len(v.shape) == 1:
        return blocked1d(v.shape[0], lanes=wave, warps=warps, vec=max(1, 16 // elem_bytes))
    return blocked(v.shape, vec=max(1, 16 // elem_bytes), lanes=wave, warps=warps)



def _set(v: Value, lay: Layout | None) -> bool:
    if lay is None or v.layout is not None or v.is_scalar or v.place != "reg" or lay.shape != v.shape:
        return False
    v.layout = lay
    return True


def _flow(ops: list[Op]) -> None:
    changed = True
    while changed:
        changed = False
        for op in ops:
            changed |= _flow_op(op)


def _flow_op(op: Op) -> bool:
    ch = False
    if op.kind in SAME_LAYOUT:
        group = [v for v in op.operands + op.results if v.shape == op.result.shape]
        known = next((v.layout for v in group if v.layout is not None), None)
        for v in group:
            ch |= _set(v, known)
    elif op.kind == "scatter":  # the index tiles in the value's layout: one element each
        group = [v for v in op.operands if v.shape == op.operands[0].shape]
        known = next((v.layout for v in group if v.layout is not None), None)
        for v in group:
            ch |= _set(v, known)
    elif op.kind == "for":
        inits, args, results = op.operands[3:], op.body.args[1:], op.results
        yields = op.body.ops[-1].operands
        for group in zip(inits, args, yields, results):
            known = next((v.layout for v in group if v.layout is not None), None)
            for v in group:
                ch |= _set(v, known)
    elif op.kind == "reduce":
        src = op.operands[0]
        if src.layout is not None:
            ch |= _set(op.result, src.layout.slice(op.attrs["axis"]))
    elif op.kind == "expand":
        src, res, axis = op.operands[0], op.result, op.attrs["axis"]
        if res.layout is not None:
            ch |= _set(src, res.layout.slice(axis))
        if src.layout is not None:
            ch |= _set(res, expand(src.layout, axis))
    elif op.kind == "broadcast":
        if op.result.layout is not None:
            ch |= _set(op.operands[0], squeeze_broadcast(op.result.layout, op.operands[0].shape))
    elif op.kind == "trans":
        src, res = op.operands[0], op.result
        if res.layout is not None:
            ch |= _set(src, transpose(res.layout))
        if src.layout is not None:
            ch |= _set(res, transpose(src.layout))
    return ch


def _required(op: Op) -> list[tuple[int, Layout]]:
    """(operand index, layout it must have) for every constraint of `op`."""
    out = []
    if op.kind in SAME_LAYOUT:
        out = [(i, op.result.layout) for i, v in enumerate(op.operands) if v.shape == op.result.shape]
    elif op.kind == "dot":
        out = [(2, op.result.layout)]
    elif op.kind == "scatter":
        out = [(i, op.operands[0].layout) for i, v in enumerate(op.operands) if i and v.shape == op.operands[0].shape]
    elif op.kind == "reduce":
        pass  # the result follows the operand, by construction
    elif op.kind == "expand":
        out = [(0, op.result.layout.slice(op.attrs["axis"]))]
    elif op.kind == "broadcast":
        out = [(0, squeeze_broadcast(op.result.layout, op.operands[0].shape))]
    elif op.kind == "trans":
        out = [(0, transpose(op.result.layout))]
    elif op.kind == "for":
        out = [(3 + i, r.layout) for i, r in enumerate(op.results)]
    elif op.kind == "yield":
        pass  # handled by the enclosing for, below
    return [(i, lay) for i, lay in out if not op.operands[i].is_scalar]


def _legalise(block: Block, warps: int, wave: int) -> None:
    new_ops: list[Op] = []
    for op in block.ops:
        if op.kind == "reduce" and op.result.layout != op.operands[0].layout.slice(op.attrs["axis"]) and not op.result.is_scalar:
            want = op.result.layout
            op.result.layout = op.operands[0].layout.slice(op.attrs["axis"])
            _rename_after(block, op, want, new_ops)
        for i, lay in _required(op):
            v = op.operands[i]
            if v.layout != lay:
                conv = Value(v.shape, v.dtype, layout=lay)
                new_ops.append(Op("convert", [v], [conv], {}, loc=op.loc))
                op.operands[i] = conv
        new_ops.append(op)
        if op.kind == "for":
            # a carried value is one set of registers: its block argument takes the result's
            # layout (flow can leave them apart when each was set from its own uses first, e.g.
            # a sum's slice inside the loop and a product with a load after it); the body, which
            # is legalised after this block, then converts from it where it needs another
            for arg, res in zip(op.body.args[1:], op.results):
                if not arg.is_scalar:
                    arg.layout = res.layout
            y = op.body.ops[-1]
            for i, (arg, yv) in enumerate(zip(op.body.args[1:], list(y.operands))):
                if yv.layout != arg.layout and not yv.is_scalar:
                    conv = Value(yv.shape, yv.dtype, layout=arg.layout)
                    op.body.ops.insert(len(op.body.ops) - 1, Op("convert", [yv], [conv], {}, loc=op.loc))
                    y.operands[i] = conv
    block.ops[:] = new_ops


def _rename_after(block: Block, op: Op, want: Layout, new_ops: list[Op]) -> None:
    """A reduce whose result was wanted in another layout: convert right after it."""
    old = op.result
    conv = Value(old.shape, old.dtype, layout=want)
    idx = block.ops.index(op)
    for later in block.ops[idx + 1:]:
        for sub in [later] + list(walk(later.body) if later.body else []):
            sub.operands = [conv if x is old else x for x in sub.operands]
    block.ops.insert(idx + 1, Op("convert", [old], [conv], {}, loc=op.loc))
