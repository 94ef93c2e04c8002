"""IR -> the context the templates render: one small dict per op, every expression computed here.

Templates (templates/common/ops.j2 and the per-backend kernel skeletons) only place these
strings; nothing in a template decides anything. Each op's block carries the spec location it
came from as a `// spec: file:line:col` comment.
"""
from __future__ import annotations

import math
from typing import Any

from ..hw.descriptor import Target
from ..ir.core import Kernel, Op, Value
from ..ir.layout import broadcast_reg_map
from ..ir.passes.dot_tiling import instr_of
from .coords import dup_masks, reg_coord, reg_map_expr, tensor_param, thread_coord, vector_width

CTYPE = {"bf16": "kg::bf16", "fp16": "kg::fp16", "fp32": "float", "int32": "int", "bool": "bool"}
ELEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "int32": 4, "bool": 1}
FLOAT = ("bf16", "fp16", "fp32")
BIN_C = {"add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}", "div": "{a} / {b}", "floordiv": "kg::floordiv({a}, {b})",
         "mod": "kg::mod({a}, {b})", "max": "kg::max_({a}, {b})", "min": "kg::min_({a}, {b})", "pow": "kg::pow_({a}, {b})",
         "lt": "{a} < {b}", "le": "{a} <= {b}", "gt": "{a} > {b}", "ge": "{a} >= {b}", "eq": "{a} == {b}", "ne": "{a} != {b}",
         "and": "{a} && {b}", "or": "{a} || {b}"}
UN_C = {"exp": "kg::exp_({a})", "exp2": "kg::exp2_({a})", "log": "kg::log_({a})", "log2": "kg::log2_({a})",
        "sqrt": "kg::sqrt_({a})", "rsqrt": "kg::rsqrt_({a})", "abs": "kg::abs_({a})", "not": "!{a}"}
REDUCE_C = {"sum": ("0.0f", "{a} + {b}"), "max": ("-kg::inf()", "kg::max_({a}, {b})"), "min": ("kg::inf()", "kg::min_({a}, {b})")}


def name(v: Value) -> str:
    return f"v{v.id}"


def elem(v: Value, idx: str = "e") -> str:
    return name(v) if v.is_scalar else f"{name(v)}[{idx}]"


def as_compute(v: Value, idx: str = "e") -> str:
    """The element read as the type arithmetic is done in (float for the float dtypes)."""
    return f"kg::f32({elem(v, idx)})" if v.dtype in ("bf16", "fp16") else elem(v, idx)


def literal(value: Any, dtype: str) -> str:
    if dtype == "bool":
        return "true" if value else "false"
    if dtype == "int32":
        return str(int(value))
    value = float(value)
    if math.isinf(value):
        text = "kg::inf()" if value > 0 else "-kg::inf()"
    elif math.isnan(value):
        text = "kg::nan()"
    else:
        text = repr(value) + "f"
    return text if dtype == "fp32" else f"kg::cvt<{CTYPE[dtype]}>({text})"


class Emitter:
    def __init__(self, k: Kernel, target: Target, tensor_dims: dict[str, list[str]]):
        self.k, self.target, self.dims = k, target, tensor_dims

    def ops(self, block) -> list[dict]:
        out = []
        for op in block.ops:
            ctx = getattr(self, "op_" + op.kind)(op)
            ctx.setdefault("macro", op.kind)
            ctx["loc"] = str(op.loc) if op.loc else ""
            out.append(ctx)
        return out

    def decl(self, v: Value) -> dict:
        return {"name": name(v), "ctype": CTYPE[v.dtype], "n": 0 if v.is_scalar else v.layout.nregs}

    # --- scalars and fills ---------------------------------------------------------------------
    def op_const(self, op):
        return {"macro": "scalar", "out": self.decl(op.result), "expr": literal(op.attrs["value"], op.result.dtype)}

    def op_size(self, op):
        return {"macro": "scalar", "out": self.decl(op.result), "expr": f"size_{op.attrs['name']}"}

    def op_scalar_arg(self, op):
        return {"macro": "scalar", "out": self.decl(op.result), "expr": f"scalar_{op.attrs['name']}"}

    def op_program_id(self, op):
        return {"macro": "scalar", "out": self.decl(op.result), "expr": f"kg::block_id_{'xyz'[op.attrs['axis']]}()"}

    def op_full(self, op):
        return {"macro": "elementwise", "out": self.decl(op.result), "expr": literal(op.attrs["value"], op.result.dtype)}

    def op_arange(self, op):
        lay = op.result.layout
        return {"macro": "elementwise", "out": self.decl(op.result), "expr": f"({thread_coord(lay, 0)}) + ({reg_coord(lay, 0)})"}

    # --- elementwise -----------------------------------------------------------------------------
    def _ew(self, op, expr: str):
        out = op.result
        if out.dtype in FLOAT and out.dtype != "fp32":
            expr = f"kg::cvt<{CTYPE[out.dtype]}>({expr})"
        return {"macro": "scalar" if out.is_scalar else "elementwise", "out": self.decl(out), "expr": expr}

    def op_binary(self, op):
        a, b = op.operands
        return self._ew(op, "(" + BIN_C[op.attrs["fn"]].format(a=as_compute(a), b=as_compute(b)) + ")")

    def op_unary(self, op):
        (a,) = op.operands
        if op.attrs["fn"] == "neg":
            return self._ew(op, f"(-{as_compute(a)})")
        return self._ew(op, UN_C[op.attrs["fn"]].format(a=as_compute(a)))

    def op_where(self, op):
        c, a, b = op.operands
        return self._ew(op, f"({elem(c)} ? {as_compute(a)} : {as_compute(b)})")

    def op_cast(self, op):
        (a,) = op.operands
        return {"macro": "scalar" if a.is_scalar else "elementwise", "out": self.decl(op.result),
                "expr": f"kg::cvt<{CTYPE[op.result.dtype]}>({as_compute(a)})"}

    def op_expand(self, op):
        return {"macro": "alias", "out": self.decl(op.result), "src": name(op.operands[0])}

    op_trans = op_expand

    def op_broadcast(self, op):
        src = op.operands[0]
        mapping = broadcast_reg_map(op.result.layout, src.shape)
        return {"macro": "elementwise", "out": self.decl(op.result), "expr": f"{name(src)}[{reg_map_expr(mapping)}]"}

    # --- reductions and layout changes ------------------------------------------------------------
    def op_reduce(self, op):
        src, out, axis = op.operands[0], op.result, op.attrs["axis"]
        plan = src.layout.reduce_plan(axis)
        init, combine = REDUCE_C[op.attrs["fn"]]
        ctx = {"out": self.decl(out), "acc": f"r{out.id}", "n_in": src.layout.nregs, "n_out": out.layout.nregs,
               "map": reg_map_expr(src.layout.slice_reg_map(axis)), "init": init,
               "combine": combine.format(a="{a}", b="{b}"), "src": name(src), "src_f32": as_compute(src),
               "masks": list(plan.lane_xor_masks), "cross_warp": plan.cross_warp, "out_is_float": out.dtype}
        if plan.cross_warp:
            warp_bits = src.layout.bits_along(axis)["warp"]
            others = [sum(1 << b for i, b in enumerate(warp_bits) if s >> i & 1) for s in range(1 << len(warp_bits))]
            ctx.update(offset=op.attrs["smem_offset"], nslice=_numel(out.shape), warp_xors=others,
                       slot=self._flat(out, "e"))
        return ctx

    def _flat(self, v: Value, idx: str) -> str:
        """Row-major element number of register `idx` of a register tile (for scratch buffers)."""
        lay, parts = v.layout, []
        stride = 1
        for d in reversed(range(len(v.shape))):
            parts.append(f"(({thread_coord(lay, d)}) + ({reg_coord(lay, d, idx)})) * {stride}")
            stride *= v.shape[d]
        return " + ".join(parts) if parts else "0"

    def op_convert(self, op):
        src, out = op.operands[0], op.result
        return {"out": self.decl(out), "src": name(src), "offset": op.attrs["smem_offset"], "ctype": CTYPE[out.dtype],
                "n_in": src.layout.nregs, "slot_in": self._flat(src, "e"), "slot_out": self._flat(out, "e")}

    def op_stage(self, op):
        src, role = op.operands[0], op.attrs["role"]
        lay = src.layout
        r, c = (f"({thread_coord(lay, d)}) + ({reg_coord(lay, d)})" for d in (0, 1))
        slot = f"({r}) * {op.attrs['ld']} + ({c})" if role == "a" else f"({c}) * {op.attrs['ld']} + ({r})"
        # K is the contiguous dim in shared memory (dim 1 of an A operand, dim 0 of a B operand):
        # registers that run along it are stored as one vector of up to 16 bytes (rows are
        # padded to 16 bytes, buffers 16-byte aligned, so such a vector never straddles)
        vec = vector_width(lay, 1 if role == "a" else 0, 16 // ELEM_BYTES[src.dtype])
        return {"out": {"name": name(op.result)}, "src": name(src), "n": lay.nregs, "offset": op.attrs["smem_offset"],
                "ctype": CTYPE[src.dtype], "slot": slot, "vec": vec,
                "sync_before": op.attrs.get("sync_before", True), "sync_after": op.attrs.get("sync_after", True)}

    def op_dot(self, op):
        a, b, acc = op.operands
        instr = instr_of(self.target, op.attrs["instr"])
        la, lb = instr.layout("a"), instr.layout("b")
        st_a, st_b = self._stage_of(a), self._stage_of(b)
        wn = op.attrs["warps_n"]
        rm, rn = op.attrs["reps_m"], op.attrs["reps_n"]
        pack_a = vector_width(la, 1, 8)
        pack_b = vector_width(lb, 0, 8)
        return {
            "out": self.decl(op.result), "acc": name(acc), "n_acc": acc.layout.nregs, "instr": instr.name,
            "ctype": CTYPE[a.dtype], "a": name(a), "b": name(b), "lda": st_a.attrs["ld"], "ldb": st_b.attrs["ld"],
            "ksteps": a.shape[1] // instr.k, "k": instr.k, "reps_m": rm, "reps_n": rn, "na": la.nregs, "nb": lb.nregs,
            "nc": instr.layout("c").nregs, "pack_a": pack_a, "pack_b": pack_b,
            "warp_row": f"(warp / {wn}) * {rm * instr.m}", "warp_col": f"(warp % {wn}) * {rn * instr.n}",
            "a_row": f"({thread_coord(la, 0)}) + ({reg_coord(la, 0, 'i')})", "a_col": f"({thread_coord(la, 1)}) + ({reg_coord(la, 1, 'i')})",
            "b_k": f"({thread_coord(lb, 0)}) + ({reg_coord(lb, 0, 'i')})", "b_col": f"({thread_coord(lb, 1)}) + ({reg_coord(lb, 1, 'i')})",
            "m": instr.m, "n": instr.n,
        }

    def _stage_of(self, v: Value) -> Op:
        from ..ir.core import walk

        return next(o for o in walk(self.k.body) if o.kind == "stage" and o.result is v)

    # --- memory ------------------------------------------------------------------------------------
    def _access(self, op, value_first: bool) -> dict:
        t = op.attrs["tensor"]
        dims = self.dims[t]
        tile = op.operands[0] if value_first else op.result
        lay = tile.layout
        base, tile_dims = [], []
        for d, entry in enumerate(op.attrs["index"]):
            stride = "1" if d == len(dims) - 1 else f"stride_{t}_{d}"
            if entry[0] == "at":
                base.append(f"(int64_t)({name(op.operands[entry[1]])}) * {stride}")
            else:
                start = f"{name(op.operands[entry[1]])} * {entry[2]}" if entry[0] == "block" else "0"
                tile_dims.append({"start": start, "stride": stride, "bound": dims[d], "last": d == len(dims) - 1})
        coords = []
        for i, td in enumerate(tile_dims):
            coords.append({**td, "thread": thread_coord(lay, i), "reg": reg_coord(lay, i)})
        elem_bytes = ELEM_BYTES[tile.dtype]
        vec = 1
        if coords and coords[-1]["last"]:
            vec = vector_width(lay, len(coords) - 1, max(1, 16 // elem_bytes))
        lane_dup, warp_dup = dup_masks(lay)
        align_checks = [f"stride_{t}_{d} % {vec} == 0" for d in range(len(dims) - 1)]
        return {"tensor": t, "ptr": tensor_param(t), "ctype": CTYPE[tile.dtype], "n": lay.nregs, "base": " + ".join(base) or "0",
                "dims": coords, "vec": vec, "lane_dup": lane_dup, "warp_dup": warp_dup,
                "aligned": " && ".join([f"kg::aligned(p_, {vec * elem_bytes})"] + align_checks) if vec > 1 else "false"}

    def op_load(self, op):
        ctx = self._access(op, False)
        ctx.update(out=self.decl(op.result), other=literal(op.attrs["other"], op.result.dtype))
        return ctx

    def op_store(self, op):
        ctx = self._access(op, True)
        ctx.update(src=name(op.operands[0]), atomic=False)
        return ctx

    def op_atomic_add(self, op):
        ctx = self._access(op, True)
        ctx.update(src=name(op.operands[0]), atomic=True, vec=1, macro="store")
        return ctx

    # --- control flow --------------------------------------------------------------------------------
    def op_for(self, op):
        iv = op.body.args[0]
        carried = [{"res": self.decl(r), "arg": name(a), "init": name(i), "scalar": r.is_scalar}
                   for r, a, i in zip(op.results, op.body.args[1:], op.operands[3:])]
        body = self.ops(op.body)
        body[-1]["targets"] = [c["res"]["name"] for c in carried]
        return {"macro": "for_loop", "iv": name(iv), "start": name(op.operands[0]), "stop": name(op.operands[1]), "step": name(op.operands[2]),
                "carried": carried, "body": body}

    def op_yield(self, op):
        return {"macro": "yield_values", "values": [{"src": name(v), "scalar": v.is_scalar, "n": 0 if v.is_scalar else v.layout.nregs,
                            "ctype": CTYPE[v.dtype], "i": i} for i, v in enumerate(op.operands)]}


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
