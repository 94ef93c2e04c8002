"""IR -> the context the templates render: one small dict per op, every expression computed here.

Templates (templates/common/ops.j2 and the per-backend kernel skeletons) only place these
strings; nothing in a template decides anything. The first line of each op's text ends with the
spec location it came from, `// spec: line:col` (`file:line:col` when the op comes from another
file than the kernel's spec).
"""
from __future__ import annotations

from pathlib import Path

from ..hw.descriptor import Target
from ..ir.core import ELEM_BYTES, Kernel, Op, Value, use_counts, walk
from ..layout import broadcast_reg_map, vector_width
from ..paths import display_path
from ..ir.analysis import producers
from ..ir.attrs import attr
from ..ir.passes.dot_tiling import instr_of
from ..ir.passes.operands import fragment_view
from . import indexed, tma, wgmma
from .int_forms import RegisterForms
from .rand_draw import rand_context
from .cnames import as_compute, elem, name  # noqa: F401 (re-exported)
from .reductions import reduce_context, reduce_group_context, scan_context
from .cexpr import PREC, add, cat, div, lit, mod, mul, sym, total, wide
from .dtypes import FLOAT, HALF_TYPE, ctype, integer_cast, literal  # noqa: F401 (re-exported)
from .coords import CoordMacros, dup_masks, reg_map_expr, register_operand_ptr, rep_index, rep_loops, shared_slot, tensor_param

MAX_STRIDES_MACRO = 7  # KG_STRIDES<n> and KG_STRIDES_MULTIPLE<n>, n = 1..7, in templates/common/kgen_tile.h
# ops whose result is its operand's registers seen with another shape or axis order: no code,
# the result is read by the operand's name (render.name_values)
VIEWS = ("expand", "trans")
BIN_C = {"add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}", "div": "{a} / {b}", "floordiv": "kg::floordiv({a}, {b})",
         "mod": "kg::mod({a}, {b})", "max": "kg::max_({a}, {b})", "min": "kg::min_({a}, {b})", "pow": "kg::pow_({a}, {b})",
         "lt": "{a} < {b}", "le": "{a} <= {b}", "gt": "{a} > {b}", "ge": "{a} >= {b}", "eq": "{a} == {b}", "ne": "{a} != {b}",
         "and": "{a} && {b}", "or": "{a} || {b}", "rand": "kg::rand_({a}, {b})",
         "rand8": "kg::rand8_({a}, {b})"}
UN_C = {"exp": "kg::exp_({a})", "exp2": "kg::exp2_({a})", "log": "kg::log_({a})", "log2": "kg::log2_({a})",
        "sqrt": "kg::sqrt_({a})", "rsqrt": "kg::rsqrt_({a})", "abs": "kg::abs_({a})", "not": "!{a}",
        **{fn: f"kg::{fn}_({{a}})" for fn in ("sigmoid", "tanh", "erf", "sin", "cos", "floor", "ceil")}}


class Emitter:
    def __init__(self, k: Kernel, target: Target, tensor_dims: dict[str, list[str]], spec_file: str = "",
                 half: str | None = None):
        self.k, self.target, self.dims = k, target, tensor_dims
        self.half = half  # the 16-bit float type spelled HALF_TYPE, in a source shared across types
        self.spec_file = Path(spec_file).resolve() if spec_file else None  # named in the kernel's first line
        self.helpers: dict[str, str] = {}  # C++ functions the kernel needs (wgmma wrappers), by name
        self.use_counts = use_counts(k.body)
        self.coords = CoordMacros()  # layout coordinates, spelled by macros the kernel defines
        self.producer = producers(k.body)
        self.forms = RegisterForms(self.producer)  # integer tiles register by register (int_forms.py)
        self.in_producer = False  # rendering a producer warpgroup's program (tma.producer_ctx)
        # starts of dots computed before an earlier dot's issue (passes/dot_issue.py): pinned where
        # they are made, or nvcc materializes them (copies of repeated elements) at the dot
        self.pinned = {id(op.operands[2]) for op in walk(k.body) if op.kind == "dot" and attr(op, "early_start")}

    def ops(self, block) -> list[dict]:
        """The contexts of a block's ops. A constant has none: its uses spell its literal
        (render.name_values). An op from the same spec line as the op before it shares that op's
        `// spec:` comment."""
        out, last_line, joined = [], None, []
        for op in block.ops:
            if op.kind == "const" or op.kind in VIEWS:
                continue
            if op.kind == "reduce":  # sums that share a barrier are one statement (passes/sum_groups.py)
                part = reduce_context(self, op)
                part["loc"] = self.where(op.loc) if op.loc else ""
                joined.append((op, part))
                if attr(op, "joins_next"):
                    continue
                op = joined[0][0]
                ctx = reduce_group_context([p for _, p in joined])
                joined = []
            else:
                ctx = getattr(self, "op_" + op.kind)(op)
            ctx.setdefault("macro", op.kind)
            line = (op.loc.file, op.loc.line) if op.loc else None
            ctx["loc"] = self.where(op.loc) if op.loc and line != last_line else ""
            last_line = line
            out.append(ctx)
            out += [{"macro": "pin", "out": self.decl(r), "loc": ""} for r in op.results if id(r) in self.pinned]
        return out

    def macros(self) -> list[dict]:
        """The kernel's coordinate macros (coords.CoordMacros), in the order it first uses them."""
        return self.coords.definitions()

    def where(self, loc) -> str:
        """An op's spec position as its comment gives it: `line:col` in the spec the kernel's
        first line names, `file:line:col` in any other (kgen.toolchain.resources reads both)."""
        if self.spec_file is not None and Path(loc.file).resolve() == self.spec_file:
            return f"{loc.line}:{loc.col}"
        return f"{display_path(Path(loc.file))}:{loc.line}:{loc.col}"

    def ctype(self, dtype: str) -> str:
        return ctype(dtype, self.half)

    def decl(self, v: Value) -> dict:
        return {"name": name(v), "ctype": self.ctype(v.dtype), "n": 0 if v.is_scalar else v.layout.nregs}

    # --- scalars and fills ---------------------------------------------------------------------
    def op_size(self, op):
        return {"macro": "scalar", "out": self.decl(op.result), "expr": f"size_{op.attrs['name']}"}

    def op_scalar_arg(self, op):
        return {"macro": "scalar", "out": self.decl(op.result), "expr": f"scalar_{op.attrs['name']}"}

    def op_program_id(self, op):
        return {"macro": "scalar", "out": self.decl(op.result), "expr": f"kg::block_id_{'xyz'[op.attrs['axis']]}()"}

    def op_full(self, op):
        if attr(op, "unwritten"):  # a warpgroup dot starts from zero instead (passes/zero_starts.py)
            return {"macro": "declare", "out": self.decl(op.result)}
        return {"macro": "elementwise", "out": self.decl(op.result), "expr": literal(op.attrs["value"], op.result.dtype, self.half)}

    def op_arange(self, op):
        lay = op.result.layout
        return {"macro": "elementwise", "out": self.decl(op.result), "expr": str(add(self.coords.thread(lay, 0), self.coords.reg(lay, 0)))}

    # --- elementwise -----------------------------------------------------------------------------
    def _ew(self, op, expr: str):
        """An elementwise op: `expr` is the whole right-hand side of its statement (its operands
        are names and elements), or the argument of the conversion to a narrow float."""
        out = op.result
        if out.dtype in FLOAT and out.dtype != "fp32":
            expr = f"kg::cvt<{self.ctype(out.dtype)}>({expr})"
        return {"macro": "scalar" if out.is_scalar else "elementwise", "out": self.decl(out), "expr": expr}

    def op_binary(self, op):
        a, b = op.operands
        if op.attrs["fn"] in ("rand", "rand8") and not op.result.is_scalar:
            # one Philox call per counter the tile's registers share (rand_draw.py)
            return rand_context(op, self.forms, lambda e: as_compute(a, str(e)), lambda e: as_compute(b, str(e)), self.decl(op.result))
        return self._ew(op, BIN_C[op.attrs["fn"]].format(a=as_compute(a), b=as_compute(b)))

    def op_unary(self, op):
        (a,) = op.operands
        if op.attrs["fn"] == "neg":
            return self._ew(op, f"-{as_compute(a)}")
        return self._ew(op, UN_C[op.attrs["fn"]].format(a=as_compute(a)))

    def op_where(self, op):
        c, a, b = op.operands
        return self._ew(op, f"{elem(c)} ? {as_compute(a)} : {as_compute(b)}")

    def op_cast(self, op):
        (a,) = op.operands
        to = self.ctype(op.result.dtype)
        expr = f"({to})({elem(a)})" if integer_cast(a.dtype, op.result.dtype) else f"kg::cvt<{to}>({as_compute(a)})"
        return {"macro": "scalar" if a.is_scalar else "elementwise", "out": self.decl(op.result), "expr": expr}

    def op_broadcast(self, op):
        src = op.operands[0]
        mapping = broadcast_reg_map(op.result.layout, src.shape)
        return {"macro": "elementwise", "out": self.decl(op.result), "expr": f"{name(src)}[{reg_map_expr(mapping)}]"}

    # --- reductions and layout changes ------------------------------------------------------------
    def op_scan(self, op):
        return scan_context(self, op)

    def flat_index(self, v: Value, idx: str, operand_of: str | None = None) -> str:
        """Row-major element number of register `idx` of a register tile (for scratch buffers);
        `operand_of`: the operator the template writes it after, which it must bind tighter than
        (a row taken from the warp's bits, `warp & 1`, after `warp * 2 +`)."""
        lay, parts = v.layout, []
        stride = 1
        for d in reversed(range(len(v.shape))):
            parts.append(mul(add(self.coords.thread(lay, d), self.coords.reg(lay, d, idx)), stride))
            stride *= v.shape[d]
        e = total(parts)
        return f"({e})" if operand_of is not None and e.prec < PREC[operand_of] else str(e)

    def op_convert(self, op):
        src, out = op.operands[0], op.result
        return {"out": self.decl(out), "src": name(src), "offset": op.attrs["smem_offset"], "ctype": self.ctype(out.dtype),
                "sync_before": attr(op, "sync_before"), "n_in": src.layout.nregs, "slot_in": self.flat_index(src, "e"), "slot_out": self.flat_index(out, "e")}

    def op_stage(self, op):
        return {**self._stage_write(op, op.operands[0]), "out": {"name": name(op.result)}, "dst": name(op.result),
                "offset": op.attrs["smem_offset"]}

    def op_read_shared(self, op):
        """Each thread reads its registers' elements of the staged tile where the buffer's
        layout put them (a row: at its column)."""
        buf, out = op.operands[0], op.result
        lay = out.layout
        st = self.stage_of(buf)
        if attr(st, "smem_layout") == "threads":
            vec = self._thread_vector(out)
            return {"out": self.decl(out), "src": name(buf), "slot": self._thread_slot(vec), "vec": vec}
        coord = [add(self.coords.thread(lay, d), self.coords.reg(lay, d)) for d in range(len(out.shape))]
        row, col = (lit(0), coord[0]) if len(coord) == 1 else coord
        return {"out": self.decl(out), "src": name(buf),
                "slot": str(shared_slot(st.attrs, row, col, ELEM_BYTES[out.dtype])), "vec": self._row_vector(out, st)}

    def _row_vector(self, v: Value, st: Op) -> int:
        """Registers read as one vector of up to 16 bytes from a `rows` buffer: consecutive
        registers along the row (layout.vector_width) whose first column, and every other
        register's, lane's and warp's, is a multiple of the vector, in rows a whole number of
        16-byte chunks apart (the row loads' buffers: passes/row_loads.py). Element by element,
        the compiler keeps each 16-bit element in a register of its own."""
        if attr(st, "smem_layout") not in (None, "rows"):
            return 1
        lay, last = v.layout, len(v.shape) - 1
        vec = vector_width(lay, last, 16 // ELEM_BYTES[v.dtype])
        others = lay.reg[vec.bit_length() - 1:] + lay.lane + lay.warp
        if vec == 1 or any(b[last] % vec for b in others) or (st.attrs["ld"] * ELEM_BYTES[v.dtype]) % 16:
            return 1
        return vec

    def _thread_vector(self, v: Value) -> int:
        """Registers of one 16-byte vector in a buffer laid out by thread (passes/shared_sums.py)."""
        return min(v.layout.nregs, 16 // ELEM_BYTES[v.dtype])

    def _thread_slot(self, vec: int) -> str:
        """Where register e of this thread sits in a buffer laid out by thread: vectors of `vec`
        registers, a vector of every thread in turn (consecutive 16 bytes a lane)."""
        threads = self.k.num_warps * self.target.wave_size
        tid = add(sym("lane"), mul(sym("warp"), self.target.wave_size))
        e = sym("e")
        return str(total([mul(div(e, vec), threads * vec), mul(tid, vec), mod(e, vec)]))

    def op_stage_into(self, op):
        return {**self._stage_write(op, op.operands[1]), "dst": name(op.operands[0])}

    def _stage_write(self, op, src: Value) -> dict:
        """How each thread writes its registers of `src` where the buffer's layout puts them."""
        inner = op.attrs["inner"]
        lay = src.layout
        if attr(op, "smem_layout") == "threads":
            vec = self._thread_vector(src)
            return {"src": name(src), "n": lay.nregs, "ctype": self.ctype(src.dtype), "slot": self._thread_slot(vec),
                    "vec": vec, "proxy_fence": False, "sync_before": attr(op, "sync_before"),
                    "sync_after": attr(op, "sync_after")}
        coord = [add(self.coords.thread(lay, d), self.coords.reg(lay, d)) for d in (0, 1)]
        slot = str(shared_slot(op.attrs, coord[1 - inner], coord[inner], ELEM_BYTES[src.dtype]))
        # registers that run along the contiguous dim are stored as one vector of up to 16 bytes
        # (rows are padded to 16 bytes, or are 16-byte rows of core matrices; buffers are
        # 16-byte aligned, so such a vector never straddles)
        vec = vector_width(lay, inner, 16 // ELEM_BYTES[src.dtype])
        return {"src": name(src), "n": lay.nregs, "ctype": self.ctype(src.dtype), "slot": slot, "vec": vec,
                "proxy_fence": self._async_read(op),
                "sync_before": attr(op, "sync_before"), "sync_after": attr(op, "sync_after")}

    def op_dot(self, op):
        a, b, acc = op.operands
        instr = instr_of(self.target, op.attrs["instr"])
        ksteps = a.shape[1] // instr.k
        ctx = {
            "out": self.decl(op.result), "acc": name(acc), "n_acc": acc.layout.nregs, "instr": instr.name, "call": instr.call,
            # the instruction accumulates in place: into acc's registers when nothing else reads
            # acc, else into a copy
            "copy_acc": self._uses(acc) > 1,
            "ctype": self.ctype(a.dtype), "ksteps": ksteps, "reps_m": op.attrs["reps_m"], "reps_n": op.attrs["reps_n"],
            "nc": instr.layout("c").nregs, **rep_loops(op.attrs["reps_m"], op.attrs["reps_n"]),
        }
        ctx["acc_at"] = str(mul(ctx["acc_at"], ctx["nc"]))
        if instr.scope == "warpgroup":
            ctx["deferred"] = bool(attr(op, "deferred"))
            ctx["zero_start"] = attr(op, "zero_start")
            ctx["scale_d"] = "(ks > 0)" if ctx["zero_start"] else "1"
            return {**ctx, **wgmma.dot_ctx(self, op, instr, name)}
        return {**ctx, "a": self._operand(op, "a", instr, ksteps), "b": self._operand(op, "b", instr, ksteps)}

    def op_dot_wait(self, op):
        """Complete an asynchronous dot: wait_group, then pin its accumulator (and its register
        A operand, which the instruction read until now) so that nvcc orders nothing that
        touches them before the wait."""
        res, a = op.operands[0], op.operands[1] if len(op.operands) > 1 and op.operands[1].place == "reg" else None
        return {"pending": op.attrs["pending"], "src": name(res), "out": self.decl(op.result),
                "a": None if a is None else {"name": name(a), "words": a.layout.nregs * ELEM_BYTES[a.dtype] // 4}}

    def _operand(self, op, role: str, instr, ksteps: int) -> dict:
        """How the dot gets operand `role`'s fragments for k-step `ks` and repeat `rep`
        (rm or rn): `ptr`, the fragment the instruction reads, and what fills it."""
        v = op.operands[0 if role == "a" else 1]
        reps = op.attrs["reps_m" if role == "a" else "reps_n"]
        rep, n = (rep_index("rm", reps), instr.layout("a").nregs) if role == "a" else (rep_index("rn", reps), instr.layout("b").nregs)
        kind = op.attrs[f"{role}_load"]
        if kind == "reg":
            return {"kind": kind, "ptr": register_operand_ptr(name(v), rep, ksteps, n), "n": n, "reps": reps}
        st = self.stage_of(v)
        view = fragment_view(self.target, op.attrs, role)
        wn = op.attrs["warps_n"]
        base = mul(div(sym("warp"), wn) if role == "a" else mod(sym("warp"), wn), view.shape[0])
        frag = f"f{role}_"
        ctx = {"kind": kind, "src": name(v), "frag": frag, "n": n, "reps": reps, "total": n * reps,
               "ptr": f"&{frag}[{mul(rep, n)}]"}
        if kind == "vec":  # element i of the fragment: (row, k) from the view's lane and register bits
            pack = vector_width(view, 1, 8)
            row = add(add(base, self.coords.thread(view, 0)), self.coords.reg(view, 0, "i"))
            col = add(add(mul(sym("ks"), instr.k), self.coords.thread(view, 1)), self.coords.reg(view, 1, "i"))
            ctx.update(pack=pack, addr=str(cat(mul(row, st.attrs["ld"]), col)))
            return ctx
        # matrix loads: lane l gives the address of row l % rows of matrix l / rows of group g;
        # matrix j of group g holds the view's elements from 2 * (count * g + j) on
        ml = self.target.shared_matrix_load
        per_reg = 4 // ml.elem_bytes
        count = min(ml.max_matrices, n * reps // per_reg)
        first = str(add(mul(per_reg * count, sym("g")), mul(per_reg, mod(div(sym("lane"), ml.rows), count))))
        row = add(base, self.coords.reg(view, 0, f"({first})"))
        col = add(mul(sym("ks"), instr.k), self.coords.reg(view, 1, f"({first})"))
        lane_row = mod(sym("lane"), ml.rows)
        if kind == "matrix":  # rows of the view are rows in memory
            addr = cat(mul(add(row, lane_row), st.attrs["ld"]), col)
        else:  # transposed: K runs down the rows in memory
            addr = cat(mul(add(col, lane_row), st.attrs["ld"]), row)
        addr = str(addr)
        ctx.update(count=count, groups=n * reps // (per_reg * count), per_group=per_reg * count, addr=addr,
                   fn=f"ldmatrix_x{count}" + ("_trans" if kind == "matrix_trans" else ""))
        return ctx

    def op_view_shared(self, op):
        return {"out": {"name": name(op.result)}, "ctype": self.ctype(op.result.dtype), "src": name(op.operands[0])}

    def op_slot(self, op):
        buf, count = op.operands
        elems = op.attrs["slot_bytes"] // ELEM_BYTES[buf.dtype]
        offset = mul(mod(sym(name(count)), op.attrs["slots"]), elems)
        return {"out": {"name": name(op.result)}, "ctype": self.ctype(buf.dtype), "src": name(buf), "offset": str(offset),
                "ptr": str(add(sym(name(buf)), offset))}

    def op_alloc_shared(self, op):
        return {"out": {"name": name(op.result)}, "ctype": self.ctype(op.result.dtype), "offset": op.attrs["smem_offset"]}

    def op_copy_async(self, op):
        """Thread t copies 16-byte chunks t, t + threads, ...; chunk c covers the row and columns
        `_chunk_coords` says, stored where the buffer's layout puts them (shared_slot). A tensor
        copy: one thread, one box per column panel (kgen.codegen.tma)."""
        if attr(op, "tma"):
            return tma.copy_ctx(self, op, name)
        t = op.attrs["tensor"]
        dims, (rows, cols) = self.dims[t], op.attrs["shape"]
        buf = op.operands[0]
        elem = ELEM_BYTES[buf.dtype]
        vec = 16 // elem
        per_row, threads = cols // vec, self.k.num_warps * self.target.wave_size
        chunks = rows * per_row
        base, starts, strides, bounds = [], [], [], []
        for d, entry in enumerate(op.attrs["index"]):
            stride = "1" if d == len(dims) - 1 else f"stride_{t}_{d}"
            if entry[0] == "at":
                base.append(mul(wide(name(op.operands[entry[1]])), sym(stride)))
            else:
                starts.append(mul(sym(name(op.operands[entry[1]])), entry[2]) if entry[0] == "block" else lit(0))
                strides.append(stride)
                bounds.append(dims[d])
        if len(starts) == 1:  # a row (passes/row_loads.py): one row of a one-row tile
            starts, strides, bounds = [lit(0), *starts], ["0", *strides], ["1", *bounds]
        align = " && ".join([f"kg::aligned(p_, {vec * elem})", *strides_multiple_of(t, len(dims) - 1, vec)])
        return {"tensor": t, "src": name(buf), "ctype": self.ctype(buf.dtype), "ptr": tensor_param(t), "base": str(total(base)),
                "aligned": align, "pred": name(op.operands[-1]) if op.attrs["pred"] else "true",
                "iters": -(-chunks // threads), "guard": chunks % threads != 0, "chunks": chunks, "threads": threads,
                "chunk": f"lane + warp * {self.target.wave_size} + i * {threads}", **self._chunk_coords(op.attrs, per_row, vec), "vec": vec, "bytes": vec * elem,
                # the tile's corner once per copy; per chunk only its row and column within the tile
                "corner": str(add(mul(sym(f"(int64_t)({starts[0]})") if starts[0].value is None else starts[0], strides[0]), starts[1])),
                "i0": str(add(starts[0], sym("r_"))), "i1": str(add(starts[1], sym("k_"))), "off": f"q_ + ((int64_t)r_ * {strides[0]} + k_)",
                # columns never run past the tensor when the tile starts at column 0 and spans it
                "count": f"(i0_ < {bounds[0]}) * {vec}" if starts[1].value == 0 and bounds[1] == f"({cols})"
                else f"(i0_ < {bounds[0]}) * kg::min_(kg::max_({bounds[1]} - i1_, 0), {vec})",
                "slot": self._copy_slot(op, per_row, vec, threads, elem), "bound0": bounds[0], "bound1": bounds[1],
                "zero": literal(0.0, buf.dtype, self.half), "sync_before": attr(op, "sync_before"),
                "stepped": self._copy_steps(op, per_row, vec, threads, strides[0])}

    def _copy_steps(self, op, per_row: int, vec: int, threads: int, row_stride: str) -> dict | None:
        """The stepped form's first chunk and step (passes/copy_addressing.py chose it)."""
        if not attr(op, "stepped"):
            return None
        first = self._chunk_coords(op.attrs, per_row, vec, self._first_chunk())
        return {"row0": first["row"], "col0": first["col"], "rows": threads // per_row, "stride": row_stride}

    def _first_chunk(self) -> str:
        """The chunk a thread copies first (the copy loop's i = 0)."""
        return f"(lane + warp * {self.target.wave_size})"

    def _copy_slot(self, op, per_row: int, vec: int, threads: int, elem: int) -> str:
        """Where chunk c_ lands: from its row and column, or (`slot_steps`, passes/copy_addressing.py)
        the slot of the thread's first chunk plus i swizzle atoms' worth."""
        if not attr(op, "slot_steps"):
            return str(shared_slot(op.attrs, "r_", "k_", elem))
        c0 = sym(self._first_chunk())
        first = shared_slot(op.attrs, div(c0, per_row), mul(mod(c0, per_row), vec), elem)
        return str(add(first, mul(sym("i"), threads // per_row * (128 // elem))))

    @staticmethod
    def _chunk_coords(attrs: dict, per_row: int, vec: int, c: str = "c_") -> dict:
        """Row and column of chunk `c` (the copy loop's c_ by default). Row-major buffers: along the row, so that a warp reads
        whole rows. Core-matrix buffers: down the 8 rows of a core first, so that consecutive
        threads write consecutive 16-byte slots (no bank conflicts), a warp reading 8 rows x
        4 chunks of global memory (whole 32-byte sectors). Swizzled buffers: along the row, each
        8 lanes writing one 128-byte row of the swizzle, all banks once."""
        c = sym(c)
        if attrs.get("smem_layout", "rows") in ("rows", "sw128"):  # sw128: 8 lanes fill one swizzled 128-byte row
            return {"row": str(div(c, per_row)), "col": str(mul(mod(c, per_row), vec))}
        return {"row": str(add(mul(div(c, 8 * per_row), 8), mod(c, 8))), "col": str(mul(mod(div(c, 8), per_row), vec))}

    def op_tma_reset(self, op):
        return tma.reset_ctx(self, op, name)

    def op_producer(self, op):
        return tma.producer_ctx(self, op)

    def op_turn(self, op):
        """A named barrier per computing warpgroup (2 and 3; 0 is the block's, 1 the computing
        warps'), counting both warpgroups' threads: its owner syncs, the other arrives."""
        return {"macro": "turn", "step": op.attrs["step"], "threads": self.k.num_warps * self.target.wave_size,
                "warpgroup": "(warp >> 2)"}

    def op_acquire(self, op):
        return tma.ring_ctx(self, op, name)

    def op_release(self, op):
        return tma.ring_ctx(self, op, name)

    def op_wait_async(self, op):
        barrier = attr(op, "barrier")
        if attr(op, "tma"):
            return {**tma.wait_ctx(self, op, name), "barrier": barrier}
        return {"pending": op.attrs["pending"], "proxy_fence": self._async_read(self.stage_of(op.operands[0])),
                "barrier": barrier}

    def _async_read(self, buf_op) -> bool:
        """Whether a matrix instruction reads this buffer through a descriptor (async proxy)."""
        return attr(buf_op, "smem_layout") in ("cores", "sw128")

    def _uses(self, v: Value) -> int:
        return self.use_counts.get(id(v), 0)

    def stage_of(self, v: Value) -> Op:
        for o in walk(self.k.body):
            if o.kind in ("view_shared", "slot") and o.result is v:
                return self.stage_of(o.operands[0])
            if o.kind in ("stage", "alloc_shared") and o.result is v:
                return o
        raise KeyError(v)

    # --- memory ------------------------------------------------------------------------------------
    def _access(self, op, value_first: bool, widest: int | None = None) -> dict:
        """What the load/store macros need: the tile's base pointer, per tile dim its start and
        thread/register coordinates, the vector width (at most `widest` elements, 16 bytes by
        default) and the bounds tests of one vector (`in_vec`) and of its element v (`in_elem`,
        the per-element path when the vector is not whole or not aligned). A dim the
        tile spans whole (index `:` of a static dim) needs no test."""
        t = op.attrs["tensor"]
        dims = self.dims[t]
        tile = op.operands[0] if value_first else op.result
        lay = tile.layout
        base, tile_dims = [], []
        for d, entry in enumerate(op.attrs["index"]):
            stride = "1" if d == len(dims) - 1 else f"stride_{t}_{d}"
            if entry[0] == "at":
                base.append(mul(wide(name(op.operands[entry[1]])), sym(stride)))
            else:
                start = mul(sym(name(op.operands[entry[1]])), entry[2]) if entry[0] == "block" else lit(0)
                tile_dims.append({"start": start, "stride": stride, "bound": dims[d], "last": d == len(dims) - 1,
                                  "whole": entry[0] == "all"})
        coords = []
        for i, td in enumerate(tile_dims):
            # t<i>_: the thread's first coordinate (start + thread part); i<i>_: register e's
            coords.append({**td, "first": str(cat(td["start"], self.coords.thread(lay, i))),
                           "at": str(cat(sym(f"t{i}_"), self.coords.reg(lay, i)))})
        elem_bytes = ELEM_BYTES[tile.dtype]
        vec = 1
        if coords and coords[-1]["last"]:
            vec = vector_width(lay, len(coords) - 1, widest or max(1, 16 // elem_bytes))
        lane_dup, warp_dup = dup_masks(lay)
        # a store's writers: one thread of each group holding the same elements (none repeat: all)
        tests = [f"(lane & {lane_dup}) == 0"] * bool(lane_dup) + [f"(warp & {warp_dup}) == 0"] * bool(warp_dup)
        align_checks = strides_multiple_of(t, len(dims) - 1, vec)
        in_vec, in_elem = [], []
        for i, c in enumerate(coords):
            if c["whole"]:
                continue
            last = c["last"]
            in_vec.append(f"i{i}_ + {vec} <= {c['bound']}" if last else f"i{i}_ < {c['bound']}")
            in_elem.append(f"i{i}_ + v < {c['bound']}" if last else f"i{i}_ < {c['bound']}")
        off = total(mul(sym(f"(int64_t)i{i}_"), c["stride"]) for i, c in enumerate(coords))
        return {"tensor": t, "ptr": tensor_param(t), "ctype": self.ctype(tile.dtype), "n": lay.nregs, "base": str(total(base)),
                "dims": coords, "off": str(off), "vec": vec, "lane_dup": lane_dup, "warp_dup": warp_dup,
                "writer": f"if ({' && '.join(tests)}) " if tests else "",
                "in_vec": " && ".join(in_vec) or "true", "in_elem": " && ".join(in_elem) or "true",
                "aligned": " && ".join([f"kg::aligned(p_, {vec * elem_bytes})"] + align_checks) if vec > 1 else "false"}

    def _element(self, op) -> str:
        """The address of the one element an access indexed only by scalars touches (every index
        is in range, as the interpreter checks; scalars are the same in every thread)."""
        t = op.attrs["tensor"]
        dims = self.dims[t]
        terms = [mul(wide(name(op.operands[e[1]])), 1 if d == len(dims) - 1 else sym(f"stride_{t}_{d}"))
                 for d, e in enumerate(op.attrs["index"])]
        return f"{tensor_param(t)} + {total(terms)}"

    def op_load(self, op):
        other = literal(op.attrs["other"], op.result.dtype, self.half)
        pred = name(op.operands[-1]) if attr(op, "pred") else None  # prefetch_loads: off -> `other`
        if op.result.is_scalar:  # every thread reads the element
            expr = f"kg::load_if({pred}, {self._element(op)}, {other})" if pred else f"*({self._element(op)})"
            return {"macro": "scalar", "out": self.decl(op.result), "expr": expr}
        ctx = self._access(op, False)
        if pred:
            for test in ("in_vec", "in_elem"):
                ctx[test] = pred if ctx[test] == "true" else f"{pred} && {ctx[test]}"
        ctx.update(out=self.decl(op.result), other=other)
        return ctx

    def op_gather(self, op):
        return indexed.gather_ctx(self, op)

    def op_scatter(self, op):
        return indexed.scatter_ctx(self, op)

    def op_store(self, op):
        if op.operands[0].is_scalar and all(e[0] == "at" for e in op.attrs["index"]):  # one thread writes it
            return {"macro": "scalar_store", "addr": self._element(op), "src": name(op.operands[0]), "atomic": False}
        ctx = self._access(op, True)
        ctx.update(src=name(op.operands[0]), atomic=False)
        return ctx

    def op_atomic_add(self, op):
        if op.operands[0].is_scalar and all(e[0] == "at" for e in op.attrs["index"]):  # added once, by one thread
            return {"macro": "scalar_store", "addr": self._element(op), "src": name(op.operands[0]), "atomic": True}
        # one red.global.add.vN.f32 per vector where the target has them (descriptor)
        ctx = self._access(op, True, widest=self.target.global_fp32_atomic_vector)
        ctx.update(src=name(op.operands[0]), atomic=True, macro="store")
        if "bulk" in op.attrs:  # through each warp's slice of shared memory (passes/bulk_reduce.py)
            ctx.update(macro="bulk_add", bulk=self._bulk(op, ctx))
        return ctx

    def _bulk(self, op, ctx: dict) -> dict:
        """A warp's rows and columns: the lane and register bits of the layout locate an element
        in the warp's slice, the warp bits the slice's corner in the tile."""
        geo, lay = op.attrs["bulk"], op.operands[0].layout
        rows, cols = ctx["dims"]
        # a kernel adds only into outputs and scratch (it may not write its op's inputs), which the
        # op allocates contiguous and aligned (kgen/runtime/op.py): every row is 16-byte aligned
        return {**geo, "offset": op.attrs["smem_offset"], "slice": geo["rows"] * geo["ld"],
                "row": str(cat(self.coords.lane(lay, 0), self.coords.reg(lay, 0))), "col": str(cat(self.coords.lane(lay, 1), self.coords.reg(lay, 1))),
                "row0": str(cat(rows["start"], self.coords.warp(lay, 0))), "col0": str(cat(cols["start"], self.coords.warp(lay, 1))),
                "stride": rows["stride"], "in_row": "true" if rows["whole"] else f"i0_ < {rows['bound']}",
                "row_bytes": geo["cols"] * 4}

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
                            "ctype": self.ctype(v.dtype), "i": i} for i, v in enumerate(op.operands)]}


def strides_multiple_of(tensor: str, strides: int, m: int) -> list[str]:
    """The tests that each of a tensor's `strides` leading strides is a multiple of m, joined by
    &&: one KG_STRIDES_MULTIPLE<n> macro (templates/common/kgen_tile.h, which writes them out)."""
    if not strides:
        return []
    if strides <= MAX_STRIDES_MACRO:
        return [f"KG_STRIDES_MULTIPLE{strides}({tensor}, {m})"]
    return [f"stride_{tensor}_{d} % {m} == 0" for d in range(strides)]
