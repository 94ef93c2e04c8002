"""The contexts of the ops that combine elements across registers, lanes and warps: `reduce`
(sum, max, min along an axis) and `scan` (inclusive prefix sum), for templates/common/ops.j2.
Each reads its operand's linear layout (kgen.layout) for which registers, lanes and warps lie
along the axis; the warps go through the scratch that kgen.ir.analysis.scratch_bytes sizes and
the placement pass puts at `smem_offset`."""
from __future__ import annotations

import math

from ..ir.attrs import attr
from .cnames import as_compute, elem, name
from .coords import reg_map_expr
from .dtypes import CTYPE, INTEGER, REDUCE_INIT_INT

REDUCE_C = {"sum": ("0.0f", "{a} + {b}"), "max": ("-kg::inf()", "kg::max_({a}, {b})"), "min": ("kg::inf()", "kg::min_({a}, {b})")}


def reduce_group_context(parts: list[dict]) -> dict:
    """The one statement of sums that share a barrier (kgen/ir/passes/sum_groups.py), or of one
    sum: every part adds in-thread and across lanes, the parts across warps write their slices,
    the block waits once (before, too, where any part's scratch may still be read), then each
    reads. A group's scratch pointers are named apart."""
    cross = [p for p in parts if p["cross_warp"]]
    for i, p in enumerate(cross):
        p["scratch"] = "scratch_" if len(cross) == 1 else f"scratch{i}_"
    return {"macro": "reduce", "parts": parts, "cross": cross, "sync_before": any(p["sync_before"] for p in cross)}


def reduce_context(em, op) -> dict:
    """One part of a `reduce` statement (reduce_group_context): a reduction along an axis,
    in-thread over the registers along it, an xor-butterfly over its lane bits, then across
    the warps along it through shared memory."""
    src, out, axis = op.operands[0], op.result, op.attrs["axis"]
    plan = src.layout.reduce_plan(axis)
    init, combine = REDUCE_C[op.attrs["fn"]]
    integer = src.dtype in INTEGER
    if integer:
        init = REDUCE_INIT_INT[src.dtype][op.attrs["fn"]]
    ctx = {"out": em.decl(out), "acc": f"r{out.id}", "n_in": src.layout.nregs, "n_out": 1 if out.is_scalar else out.layout.nregs,
           "acc_ctype": CTYPE[src.dtype] if integer else "float", "scalar_out": out.is_scalar,
           "finish": "" if integer else f"kg::cvt<{em.ctype(out.dtype)}>",
           "map": str(reg_map_expr(src.layout.slice_reg_map(axis))), "init": init,
           "combine": combine.format(a="{a}", b="{b}"), "src": name(src), "src_f32": elem(src) if integer else as_compute(src),
           "masks": list(plan.lane_xor_masks), "cross_warp": plan.cross_warp, "lane_reads": [], "sync_before": False}
    if plan.cross_warp:
        # each warp writes its partial into the slice of its position along the axis (the
        # warp's bits that move along it); every warp adds the slices in the same order, so
        # the copies of a result the warps hold are equal to the bit. A result of one element
        # is added by the lanes instead: lane l reads slice l mod slices, an xor-butterfly over
        # the slices' lane bits adds them (one shared read and log2(slices) shuffles a thread
        # where the loop read every slice; the same tree in every warp, so again equal)
        warp_bits = src.layout.bits_along(axis)["warp"]
        nslices = 1 << len(warp_bits)
        if numel(out.shape) == 1 and nslices <= em.target.wave_size:
            ctx["lane_reads"] = [1 << b for b in range(len(warp_bits))]
        ctx.update(offset=op.attrs["smem_offset"], nslice=numel(out.shape), warp_along=_bits_of("warp", warp_bits),
                   nslices=nslices,
                   sync_before=attr(op, "sync_before"),
                   slot="0" if out.is_scalar else em.flat_index(out, "e", operand_of="+"))
    return ctx


def scan_context(em, op) -> dict:
    """Inclusive prefix sum along an axis, over the axis's layout bits from the lightest
    (kgen.layout: each bit moves a distinct power of two along the axis): every element
    keeps its prefix and its block's total; at each bit it adds the partner block's total
    (the register, lane or warp with that bit flipped) to both totals, and to its prefix when
    its bit is set. Registers pair in-thread, lanes by xor-shuffle, warps through shared
    memory (a slot per thread and register)."""
    src, out, axis = op.operands[0], op.result, op.attrs["axis"]
    lay = src.layout
    levels = []
    for kind, bases in (("reg", lay.reg), ("lane", lay.lane), ("warp", lay.warp)):
        for b, v in enumerate(bases):
            if v[axis]:
                if any(x for d, x in enumerate(v) if d != axis):
                    raise NotImplementedError(f"cumsum along axis {axis} of a layout whose bits move along two axes ({lay})")
                levels.append((v[axis], kind, 1 << b))
    integer = src.dtype in INTEGER
    return {"out": em.decl(out), "n": lay.nregs, "acc_ctype": CTYPE[src.dtype] if integer else "float",
            "src_val": elem(src) if integer else as_compute(src), "finish": "" if integer else f"kg::cvt<{em.ctype(out.dtype)}>",
            "levels": [{"kind": kind, "mask": m} for _, kind, m in sorted(levels)],
            "offset": (attr(op, "smem_offset") or 0)}


def _bits_of(var: str, bits: list[int]) -> str:
    """C expression of the number made of `var`'s bits `bits` (bit i of it from bits[i])."""
    if bits == list(range(bits[0], bits[0] + len(bits))):
        shifted = var if bits[0] == 0 else f"({var} >> {bits[0]})"
        return f"({shifted} & {(1 << len(bits)) - 1})"
    return "(" + " + ".join(f"(({var} >> {b}) & 1) * {1 << i}" for i, b in enumerate(bits)) + ")"


def numel(shape) -> int:
    """Elements of a tile of `shape`."""
    return math.prod(shape)
