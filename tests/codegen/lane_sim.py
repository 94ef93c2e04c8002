"""Run a kernel's emitted index expressions on the CPU, every lane of every warp at once.

The input is what kgen/codegen/emit.py hands the templates: one context dict per op, whose
index expressions are strings of C. `ProgramSim` evaluates those strings with numpy (`lane`
and `warp` are broadcast index arrays, so one evaluation covers the whole block), composing
them exactly as templates/common/ops.j2 does, and records each composed line in `snippets` so
that a test can check that the text it evaluated is the text the generated source contains.

Only what the matmul kernels need is simulated (and a producer warpgroup's rings): scalars, fills and casts, aliases, global
loads and stores, staging to shared memory, async copies into one- or two-slot buffers, dot
(the fragment reads from shared memory, the matrix instruction, the accumulator registers) and
loops. The matrix instruction is applied through the hardware descriptor's fragment layouts
(tests/hw/test_fragments.py checks those against the ISA): the lane registers of A and B are
placed into m x k and k x n matrices, multiplied, and D is added into the lane registers the C
layout names. A warpgroup instruction (wgmma) gathers A from the registers of its 4 warps or,
like B, reads it through the emitted matrix descriptor, each element located by the PTX ISA's
canonical layouts (lane_sim_wgmma.descriptor_element), and scatters D over its 4 warps. Values are float64
throughout: with integer inputs every result is exact, so a test can demand equality.

Anything the simulation cannot vouch for (an address outside its buffer, a misaligned vector
access, an op it does not model) raises `SimError`; an element nobody wrote stays NaN.
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Any

import numpy as np

from kgen.codegen.emit import name as c_name
from kgen.hw.descriptor import Target, load_target
from kgen.ir.core import ELEM_BYTES, Kernel, walk
from lane_sim_copies import AsyncCopySim, RingSim, SimError, TensorCopySim  # noqa: F401  (SimError: raised here, caught by the tests)
from lane_sim_macros import expand_all, expand_macros  # noqa: F401  (expand_all: for the tests)
from lane_sim_wgmma import WarpgroupSim



# --- C expressions as Python -------------------------------------------------------------------
# The emitted expressions are integer arithmetic on non-negative values (so C's `/` is floor
# division), plus a few value forms: float literals `0.0f`, `kg::cvt<T>(x)` conversions (values
# stay float64 here), `(int64_t)` casts, `kg::` helpers, element reads `vN[e]` (a whole
# register array at once) and `vN[f(e)]` (a broadcast's register map: a gather along registers).
_CAST = re.compile(r"\(int64_t\)")
_CVT = re.compile(r"kg::cvt<[^<>]*>")
_FLOAT = re.compile(r"\b(\d+\.\d*(?:e[-+]?\d+)?)f\b")
# a register array: v12 or a name from the spec (acc, m_new_2), never a macro temporary (p_)
_ARRAY = r"\b([A-Za-z](?:\w*[A-Za-z0-9])?)"
_ELEM = re.compile(_ARRAY + r"\[e\]")
_GATHER = re.compile(_ARRAY + r"\[([^\[\]]+)\]")  # x[f(e)]: a broadcast's register map
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.RShift, ast.LShift, ast.BitAnd, ast.BitOr,
        ast.BitXor, ast.USub, ast.UAdd)
_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Call, ast.Compare,
          ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq) + _OPS


@lru_cache(maxsize=None)
def compile_c(text: str):
    py = _ELEM.sub(r"\1", _FLOAT.sub(r"\1", _CVT.sub("", _CAST.sub("", text))))
    py = _GATHER.sub(r"kg::gather(\1, \2)", py).replace("kg::", "kg_")
    try:
        tree = ast.parse(py, mode="eval")
    except SyntaxError as e:
        raise SimError(f"cannot read the emitted C expression {text!r}: {e}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            node.op = ast.FloorDiv()
    for node in ast.walk(tree):
        if not isinstance(node, _NODES) or (isinstance(node, ast.Call) and not (
                isinstance(node.func, ast.Name) and node.func.id.startswith("kg_"))):
            raise SimError(f"the emitted C expression {text!r} uses {type(node).__name__}, which is not simulated")
    return compile(tree, f"<emitted: {text}>", "eval")


KG_FUNCS = {"true": True, "false": False, "kg_floordiv": lambda a, b: a // b, "kg_mod": lambda a, b: a % b, "kg_cdiv": lambda a, b: -(-a // b),
            "kg_f32": lambda x: x, "kg_min_": np.minimum, "kg_max_": np.maximum,
            "kg_gather": lambda regs, idx: np.take_along_axis(
                regs, np.broadcast_to(np.asarray(idx), regs.shape[:2] + np.shape(idx)[-1:]), axis=2)}


# --- the instruction, from the descriptor --------------------------------------------------------
@lru_cache(maxsize=None)
def _fragment_coords(target_name: str, instr_name: str, operand: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols), each (lanes, regs): the tile coordinate of each lane register."""
    lay = load_target(target_name).matrix_instr(instr_name).layout(operand)
    coords = np.array([[lay.coord(r, lane, 0) for r in range(lay.nregs)] for lane in range(lay.nlanes)])
    return coords[..., 0], coords[..., 1]


def apply_instr(target: Target, instr_name: str, d: np.ndarray, fa: np.ndarray, fb: np.ndarray) -> None:
    """d (warps, lanes, nc) += the instruction on fragments fa (warps, lanes, na), fb (.., nb)."""
    mi = target.matrix_instr(instr_name)
    mats = {}
    for op, frag, shape in (("a", fa, (mi.m, mi.k)), ("b", fb, (mi.k, mi.n))):
        rows, cols = _fragment_coords(target.name, instr_name, op)
        mat = np.full((frag.shape[0],) + shape, np.nan)
        mat[:, rows, cols] = frag
        mats[op] = mat
    prod = mats["a"] @ mats["b"]  # (warps, m, n): D[i, j] = sum_k A[i, k] B[k, j]
    rows, cols = _fragment_coords(target.name, instr_name, "c")
    d += prod[:, rows, cols]


# --- one program (block) ---------------------------------------------------------------------------
class ProgramSim(WarpgroupSim, AsyncCopySim, TensorCopySim, RingSim):
    """Executes emitted op contexts for one block at a time, all its threads together.

    `tensors`: name -> float64 array (outputs start as NaN); `sizes`: the spec's size values.
    Register tiles are (warps, lanes, registers) arrays; staged operands are flat arrays.
    """

    def __init__(self, k: Kernel, target: Target, tensors: dict[str, np.ndarray], sizes: dict[str, int],
                 land: str = "at_wait", macros: list[dict] = ()):
        self.k, self.target, self.tensors = k, target, tensors
        self.macros = list(macros)  # the kernel's coordinate macros (Emitter.macros), expanded before evaluation
        # when an async copy's data reaches shared memory: "at_wait" (as late as the wait allows:
        # catches a wait that lets a read run too early) or "at_issue" (at once: catches a
        # prefetch that overwrites a buffer before its last reader ran)
        self.land = land
        self.W, self.L = k.num_warps, target.wave_size
        self.lane = np.arange(self.L).reshape(1, self.L, 1)
        self.warp = np.arange(self.W).reshape(self.W, 1, 1)
        self.fixed: dict[str, Any] = {f"size_{s}": v for s, v in sizes.items()}
        for name, arr in tensors.items():
            for d in range(arr.ndim - 1):
                self.fixed[f"stride_{name}_{d}"] = int(np.prod(arr.shape[d + 1:]))
        self.staged = {c_name(op.result): op for op in walk(k.body) if op.kind in ("stage", "alloc_shared")}
        self.snippets: set[str] = set()  # every composed line evaluated, as the template writes it
        self.dots_run = 0

    # evaluation ------------------------------------------------------------------------------
    def ev(self, text: str, **idx) -> Any:
        env = {**KG_FUNCS, **self.fixed, **self.scalars, **self.regs, "lane": self.lane, "warp": self.warp,
               "kg_block_id_x": lambda: self.block[0], "kg_block_id_y": lambda: self.block[1],
               "kg_block_id_z": lambda: self.block[2], **idx}
        return eval(compile_c(expand_macros(text, self.macros)), {"__builtins__": {}}, env)

    def grid_shape(self, value, n: int) -> np.ndarray:
        """An index expression's value for every (warp, lane, one of n registers)."""
        return np.broadcast_to(np.asarray(value), (self.W, self.L, n))

    def note(self, line: str) -> None:
        self.snippets.add(line)

    def run_block(self, block: tuple[int, int, int], ctxs: list[dict]) -> None:
        self.note("const int lane = kg::thread_id() % kg::WAVE;")
        self.note("kg::thread_id() / kg::WAVE")  # warp (HIP wraps it in readfirstlane)
        self.block = block
        self.scalars: dict[str, Any] = {}
        self.regs: dict[str, np.ndarray] = {}
        self.smem: dict[str, np.ndarray] = {}
        self.groups: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = []  # committed, not yet landed
        # tensor copies: phases completed and waited for per barrier, and each copy's writes
        self.tma_done, self.tma_waited, self.tma_pending = {}, {}, {}
        self.in_flight: dict[str, tuple] = {}  # deferred dots by result name, until their dot_wait
        self.start_rings()
        self.run(ctxs)
        self.finish_rings()

    def run(self, ctxs: list[dict]) -> None:
        for c in ctxs:
            step = getattr(self, "op_" + c["macro"], None)
            if step is None:
                raise SimError(f"the {c['macro']} macro is not simulated")
            step(c)

    # scalars and register tiles ----------------------------------------------------------------
    def op_scalar(self, c):
        self.note(f"const {c['out']['ctype']} {c['out']['name']} = {c['expr']};")
        self.scalars[c["out"]["name"]] = self.ev(c["expr"])

    def op_declare(self, c):  # declared, never written: reading it before a write gives NaN
        self.note(f"{c['out']['ctype']} {c['out']['name']}[{c['out']['n']}];")
        self.regs[c["out"]["name"]] = np.full((self.W, self.L, c["out"]["n"]), np.nan)

    def op_pin(self, c):  # registers fixed where they are: no value changes
        self.note(f"KG_FOR(e, {c['out']['n']}) kg::fence_operand({c['out']['name']}[e]);")
        if c["out"]["name"] not in self.regs:
            raise SimError(f"pin of {c['out']['name']}, which nothing wrote")

    def op_elementwise(self, c):
        n = c["out"]["n"]
        self.note(f"KG_FOR(e, {n}) {c['out']['name']}[e] = {c['expr']};")
        value = self.ev(c["expr"], e=np.arange(n).reshape(1, 1, n))
        self.regs[c["out"]["name"]] = np.array(self.grid_shape(value, n), dtype=np.float64)

    def op_scan(self, c):
        """The template's prefix sum: per level, the partner register, lane or warp's block total
        is added to both totals, and to the prefix where the element's bit is set."""
        n, src = c["n"], c["src_val"]
        self.note(f"KG_FOR(e, {n}) p_[e] = t_[e] = ({c['acc_ctype']})({src});")
        p = self.grid_shape(self.ev(src, e=np.arange(n).reshape(1, 1, n)), n).astype(np.float64).copy()
        t = p.copy()
        e = np.arange(n)
        for lv in c["levels"]:
            m = lv["mask"]
            if lv["kind"] == "reg":
                other = t[:, :, e ^ m]
                p = np.where((e & m) != 0, p + other, p)
            elif lv["kind"] == "lane":
                other = t[:, np.arange(self.L) ^ m, :]
                p = np.where((self.lane & m) != 0, p + other, p)
            else:
                other = t[np.arange(self.W) ^ m, :, :]
                p = np.where((self.warp & m) != 0, p + other, p)
            t = t + other
        self.regs[c["out"]["name"]] = p

    def op_for_loop(self, c):
        for x in c["carried"]:
            res, init = x["res"]["name"], x["init"]
            if x["scalar"]:
                self.scalars[res] = self.ev(init)
            else:
                self.regs[res] = self.regs[init].copy()
        self.note(f"for (int {c['iv']} = {c['start']}; {c['iv']} < {c['stop']}; {c['iv']} += {c['step']})")
        for it in range(int(self.ev(c["start"])), int(self.ev(c["stop"])), int(self.ev(c["step"]))):
            self.scalars[c["iv"]] = it
            for x in c["carried"]:
                store = self.scalars if x["scalar"] else self.regs
                store[x["arg"]] = store[x["res"]["name"]]
            self.run(c["body"])

    def op_yield_values(self, c):
        values = [self.ev(y["src"]) if y["scalar"] else self.regs[y["src"]].copy() for y in c["values"]]
        for y, value, target in zip(c["values"], values, c["targets"]):
            if y["scalar"]:
                self.scalars[target] = value
            else:
                np.copyto(self.regs[target], value)

    # global memory ------------------------------------------------------------------------------
    def _addresses(self, c, n: int):
        """The element offsets (from the tensor's start) a load or store touches at registers
        e = 0, vec, 2 vec, ... (arrays over (warp, lane, e)), and for each v < vec whether
        element e + v is in bounds, as the template's `off_` and masks compute them."""
        self.note(f"{c['ctype']}* p_ = {c['ptr']} + ({c['base']});")
        self.note(f"KG_FOR_STEP(e, {n}, {c['vec']})")
        e = np.arange(0, n, c["vec"]).reshape(1, 1, -1)
        idx = {}
        for d, dim in enumerate(c["dims"]):
            self.note(f"const int t{d}_ = {dim['first']};")
            t = self.ev(dim["first"])
            self.note(f"const int i{d}_ = {dim['at']};")
            idx[f"i{d}_"] = self.grid_shape(self.ev(dim["at"], e=e, **{f"t{d}_": t}), e.shape[-1])
        off_line = c["off"]
        self.note(f"const int64_t off_ = {off_line};")
        off = self.ev(c["base"]) + self.grid_shape(self.ev(off_line, **idx), e.shape[-1])
        # the template's own per-element test (it leaves out dims the tile spans whole); an
        # access it lets through out of range fails _check_range
        masks = []
        for v in range(c["vec"]):
            mask = np.ones((self.W, self.L, e.shape[-1]), dtype=bool)
            for part in c["in_elem"].split(" && "):
                mask &= self.grid_shape(self.ev(part, v=v, **idx), e.shape[-1])
            masks.append(mask)
        return e.reshape(-1), off, masks

    def _check_range(self, what: str, addr: np.ndarray, size: int) -> None:
        if addr.size and (addr.min() < 0 or addr.max() >= size):
            raise SimError(f"{what} touches element {int(addr.min())}..{int(addr.max())} of {size}")

    def op_load(self, c):
        n, name, flat = c["out"]["n"], c["out"]["name"], self.tensors[c["tensor"]].reshape(-1)
        if c["vec"] > 1:
            self.note(f"kg::copy_vec<{c['vec']}>(&{name}[e], p_ + off_);")
            self.note(c["in_elem"])
        else:  # vec 1: one test, in_vec's form
            self.note(f"{name}[e] = ({c['in_vec']}) ? p_[off_] : {c['other']};")
        e, off, masks = self._addresses(c, n)
        other = float(self.ev(c["other"]))
        out = np.full((self.W, self.L, n), np.nan)
        for v, mask in enumerate(masks):
            self._check_range(f"load of {c['tensor']}", (off + v)[mask], flat.size)
            out[:, :, e + v] = np.where(mask, flat[np.where(mask, off + v, 0)], other)
        self.regs[name] = out

    def op_store(self, c):
        n, src, flat = c["n"], self.regs[c["src"]], self.tensors[c["tensor"]].reshape(-1)
        self.note(f"{c['writer']}{{")
        self.note(c["in_elem"] if c["vec"] > 1 else c["in_vec"])  # vec 1: one test, in_vec's form
        if c["vec"] > 1:
            self.note(f"kg::{'atomic_add_vec' if c['atomic'] else 'copy_vec'}<{c['vec']}>(p_ + off_, &{c['src']}[e]);")
        else:
            self.note(f"kg::atomic_add(p_ + off_, {c['src']}[e])" if c["atomic"] else f"p_[off_] = {c['src']}[e]")
        e, off, masks = self._addresses(c, n)
        writer = ((self.lane & c["lane_dup"]) == 0) & ((self.warp & c["warp_dup"]) == 0)
        for v, mask in enumerate(masks):
            mask = mask & writer
            addr = (off + v)[mask]
            self._check_range(f"store to {c['tensor']}", addr, flat.size)
            if c["atomic"]:
                np.add.at(flat, addr, src[:, :, e + v][mask])  # every writer's value, duplicates too
            else:
                flat[addr] = src[:, :, e + v][mask]

    def op_bulk_add(self, c):
        """templates/common/ops.j2 bulk_add: each warp writes its part into its slice of shared
        memory, then one bulk reduction per row adds the slice's rows into the tensor. A slot
        written twice, a row with a slot no lane wrote, or an address outside the slice or the
        tensor raises SimError."""
        b, n, vec = c["bulk"], c["n"], c["vec"]
        src, flat = self.regs[c["src"]], self.tensors[c["tensor"]].reshape(-1)
        self.note(f"{c['ctype']}* p_ = {c['ptr']} + ({c['base']});")
        self.note(f"float* st_ = reinterpret_cast<float*>(smem + {b['offset']}) + warp * {b['slice']};")
        slot_line = f"({b['row']}) * {b['ld']} + {b['col']}"
        self.note(f"kg::copy_vec<{vec}>(&st_[{slot_line}], &{c['src']}[e]);")
        e = np.arange(0, n, vec).reshape(1, 1, -1)
        slot = self.grid_shape(self.ev(slot_line, e=e), e.shape[-1])
        slices = np.full((self.W, b["slice"]), np.nan)
        for w in range(self.W):
            slots = np.concatenate([(slot[w] + v).reshape(-1) for v in range(vec)])
            if slots.min() < 0 or slots.max() >= b["slice"]:
                raise SimError(f"bulk_add: warp {w} writes slot {int(slots.min())}..{int(slots.max())} of {b['slice']}")
            if np.unique(slots).size != slots.size:
                raise SimError(f"bulk_add: warp {w} writes a slot of its slice twice")
            for v in range(vec):
                slices[w, slot[w] + v] = src[w][:, e[0, 0] + v]
        self.note(f"const int i0_ = {b['row0']} + r_;")
        self.note(f"if ({b['in_row']})")
        self.note(f"kg::bulk_add_f32(p_ + ((int64_t)i0_ * {b['stride']} + {b['col0']}), st_ + r_ * {b['ld']}, {b['row_bytes']});")
        base = int(np.asarray(self.ev(c["base"])).flat[0])
        for w in range(self.W):
            for r in range(b["rows"]):
                i0 = int(np.asarray(self.ev(f"{b['row0']} + r_", r_=r, warp=w)).flat[0])
                if not bool(np.asarray(self.ev(b["in_row"], i0_=i0, warp=w)).flat[0]):
                    continue
                off = base + i0 * int(np.asarray(self.ev(b["stride"])).flat[0]) + int(np.asarray(self.ev(b["col0"], warp=w)).flat[0])
                row = slices[w, r * b["ld"]: r * b["ld"] + b["cols"]]
                if np.isnan(row).any():
                    raise SimError(f"bulk_add: warp {w} row {r} reads a slot no lane wrote")
                self._check_range(f"bulk add to {c['tensor']}", np.array([off, off + b["cols"] - 1]), flat.size)
                flat[off: off + b["cols"]] += row

    # shared memory and the matrix instruction ----------------------------------------------------
    def op_stage(self, c):
        name = c["out"]["name"]
        op = self.staged[name]
        self.note(f"{c['ctype']}* {name} = reinterpret_cast<{c['ctype']}*>(smem + {c['offset']});")
        # NaN: a slot this round does not write cannot pass for data
        self.smem[name] = np.full(op.attrs["bytes"] // ELEM_BYTES[op.result.dtype], np.nan)
        self._write_registers(c, name)

    def op_stage_into(self, c):  # into a buffer (or a slot of one) allocated before, in place
        self._write_registers(c, c["dst"])

    def _write_registers(self, c, name: str) -> None:
        """Each lane's registers of c["src"] written where c["slot"] says, into smem[name]."""
        n, src, vec = c["n"], self.regs[c["src"]], c["vec"]
        buf = self.smem[name]
        size = buf.size
        if vec == 1:
            self.note(f"KG_FOR(e, {n}) {name}[{c['slot']}] = {c['src']}[e];")
            slot = self.grid_shape(self.ev(c["slot"], e=np.arange(n).reshape(1, 1, n)), n)
            self._check_range(f"stage {name}", slot, size)
            buf[slot] = src
        else:
            # copy_vec<vec>: registers e .. e+vec-1 go to vec consecutive slots from slot(e),
            # which must be aligned to the vector
            self.note(f"KG_FOR_STEP(e, {n}, {vec}) kg::copy_vec<{vec}>(&{name}[{c['slot']}], &{c['src']}[e]);")
            starts = np.arange(0, n, vec)
            slot = self.grid_shape(self.ev(c["slot"], e=starts.reshape(1, 1, -1)), len(starts))
            if (slot % vec).any():
                raise SimError(f"stage {name}: a {vec}-element vector store starts at a slot that is not a multiple of {vec}")
            for v in range(vec):
                self._check_range(f"stage {name}", slot + v, size)
                buf[slot + v] = src[:, :, starts + v]

    def op_read_shared(self, c):
        """Each lane's registers read from where c["slot"] says; a slot no copy or stage wrote
        (NaN) read into a register fails."""
        n, name, vec = c["out"]["n"], c["out"]["name"], c["vec"]
        buf = self.smem[c["src"]]
        if vec > 1:  # one vector of `vec` registers from its first register's slot on
            self.note(f"KG_FOR_STEP(e, {n}, {vec}) kg::copy_vec<{vec}>(&{name}[e], &{c['src']}[{c['slot']}]);")
            first = self.grid_shape(self.ev(c["slot"], e=np.arange(0, n, vec).reshape(1, 1, n // vec)), n // vec)
            if (first % vec).any():
                raise SimError(f"read of {c['src']}: a {vec}-element vector starts at a slot that is not a multiple of {vec}")
            slot = (first[..., :, None] + np.arange(vec)).reshape(*first.shape[:-1], n)
        else:
            self.note(f"KG_FOR(e, {n}) {name}[e] = {c['src']}[{c['slot']}];")
            slot = self.grid_shape(self.ev(c["slot"], e=np.arange(n).reshape(1, 1, n)), n)
        self._check_range(f"read of {c['src']}", slot, buf.size)
        if np.isnan(buf[slot]).any():
            raise SimError(f"read_shared of {c['src']} reads a slot nothing wrote")
        self.regs[name] = buf[slot].astype(np.float64)

    def op_view_shared(self, c):  # another name for the same buffer
        self.note(f"{c['ctype']}* {c['out']['name']} = {c['src']};")
        self.smem[c["out"]["name"]] = self.smem[c["src"]]
        self.staged[c["out"]["name"]] = self.staged[c["src"]]

    def op_slot(self, c):  # a view of one slot of a buffer: writes through it land in the buffer
        self.note(f"{c['ctype']}* {c['out']['name']} = {c['ptr']};")
        start = int(self.ev(c["offset"]))
        op = self.staged[c["src"]]
        n = op.attrs["slot_bytes"] // ELEM_BYTES[op.result.dtype]
        if start < 0 or start + n > self.smem[c["src"]].size:
            raise SimError(f"slot {c['out']['name']} lies outside {c['src']}")
        self.smem[c["out"]["name"]] = self.smem[c["src"]][start:start + n]
        self.staged[c["out"]["name"]] = op

    def _fragment(self, c, role: str, ks: int) -> np.ndarray:
        """Operand `role`'s fragment registers of every lane at k-step ks: (reps, warps, lanes, n).
        From registers, the elements the template's `ptr` names; from shared memory, filled as
        the template fills f{role}_ (vector reads, or the matrix load as the PTX ISA defines
        it: lanes 8j..8j+7 give the row addresses of matrix j, lane t receives row t / 4,
        elements 2 (t % 4) and + 1, or with .trans the same of the transposed matrix)."""
        f = c[role]
        rep = "rm" if role == "a" else "rn"
        n, reps = f["n"], f["reps"]
        out = np.full((reps, self.W, self.L, n), np.nan)
        if f["kind"] == "reg":
            src = self.regs[f["ptr"][1:f["ptr"].index("[")]]
            for r in range(reps):
                first = self.grid_shape(self.ev(f["ptr"][f["ptr"].index("[") + 1:-1], ks=ks, **{rep: r}), 1)[..., 0]
                if first.min() != first.max() or first.flat[0] < 0 or first.flat[0] + n > src.shape[-1]:
                    raise SimError(f"register operand {f['ptr']} reads outside {src.shape[-1]} registers")
                out[r] = src[:, :, int(first.flat[0]):int(first.flat[0]) + n]
            return out
        buf, elem = self.smem[f["src"]], ELEM_BYTES[self.staged[f["src"]].result.dtype]
        offset = self.staged[f["src"]].attrs["smem_offset"]
        flat = np.full((self.W, self.L, f["total"]), np.nan)
        if f["kind"] == "vec":
            pack = f["pack"]
            self.note(f"KG_FOR_STEP(i, {f['total']}, {pack}) kg::copy_vec<{pack}>(&{f['frag']}[i], &{f['src']}[{f['addr']}]);")
            i = np.arange(0, f["total"], pack)
            addr = self.grid_shape(self.ev(f["addr"], ks=ks, i=i.reshape(1, 1, -1)), i.size)
            if ((offset + addr * elem) % (pack * elem)).any():
                raise SimError(f"fragment read of {f['src']}: copy_vec<{pack}> is misaligned")
            for v in range(pack):
                self._check_range(f"fragment read of {f['src']}", addr + v, buf.size)
                flat[:, :, i + v] = buf[addr + v]
        else:
            self.note(f"KG_FOR(g, {f['groups']}) kg::{f['fn']}(&{f['frag']}[g * {f['per_group']}], &{f['src']}[{f['addr']}]);")
            trans = f["fn"].endswith("_trans")
            t = np.arange(self.L)
            for g in range(f["groups"]):
                rows = self.grid_shape(self.ev(f["addr"], ks=ks, g=g), 1)[..., 0]  # (warps, lanes)
                if ((offset + rows * elem) % 16).any():
                    raise SimError(f"matrix load of {f['src']}: a row address is not 16-byte aligned")
                for j in range(f["count"]):
                    for half in range(2):
                        if trans:  # element (t / 4, 2 (t % 4) + half) of the transposed matrix
                            addr = rows[:, 8 * j + 2 * (t % 4) + half] + t // 4
                        else:
                            addr = rows[:, 8 * j + t // 4] + 2 * (t % 4) + half
                        self._check_range(f"matrix load of {f['src']}", addr, buf.size)
                        flat[:, :, f["per_group"] * g + 2 * j + half] = buf[addr]
        for r in range(reps):
            out[r] = flat[:, :, r * n:(r + 1) * n]
        return out

    def accumulator(self, c) -> np.ndarray:
        """The registers a dot accumulates into: acc's own (through a C reference), or a copy
        when acc is read elsewhere."""
        out, acc = c["out"]["name"], self.regs[c["acc"]]
        if c["copy_acc"]:
            self.note(f"KG_FOR(e, {c['out']['n']}) {out}[e] = {c['acc']}[e];")
            acc = acc.copy()
        else:
            self.note(f"float (&{out})[{c['out']['n']}] = {c['acc']};")
        self.regs[out] = acc
        return acc

    def op_dot(self, c):
        out, acc = c["out"]["name"], self.accumulator(c)
        acc_text = c["acc_at"]
        self.note(f"KG_FOR(ks, {c['ksteps']}) {{")
        self.note(f"kg::{c['call']}(&{out}[{acc_text}], {c['a']['ptr']}, {c['b']['ptr']});")
        for line in c["rep_loops"]:
            self.note(line.strip())
        for ks in range(c["ksteps"]):
            fa = self._fragment(c, "a", ks)
            fb = self._fragment(c, "b", ks)
            for rm in range(c["reps_m"]):
                for rn in range(c["reps_n"]):
                    first = int(self.ev(acc_text, rm=rm, rn=rn))
                    if first < 0 or first + c["nc"] > acc.shape[-1]:
                        raise SimError(f"instruction ({rm}, {rn}) writes accumulator registers {first}.. of {acc.shape[-1]}")
                    apply_instr(self.target, c["instr"], acc[:, :, first:first + c["nc"]], fa[rm], fb[rn])
        self.dots_run += 1



def simulate(k: Kernel, target: Target, tensors: dict[str, np.ndarray], sizes: dict[str, int],
             blocks: list[tuple[int, int, int]], edit=None, land: str = "at_wait") -> tuple[ProgramSim, list[dict]]:
    """Render a lowered kernel's op contexts (kgen.codegen.emit), let `edit` change them (a
    mutation test), and run them for each of `blocks`: the simulation and the contexts."""
    from kgen.codegen.emit import Emitter
    from kgen.codegen.render import name_values, tensor_dims

    name_values(k)
    emitter = Emitter(k, target, tensor_dims(k))
    ctxs = emitter.ops(k.body)
    if edit:
        edit(ctxs)
    sim = ProgramSim(k, target, tensors, sizes, land=land, macros=emitter.macros())
    for block in blocks:
        sim.run_block(block, ctxs)
    return sim, ctxs
