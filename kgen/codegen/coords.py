"""C++ expressions for layouts: which tile coordinate a thread's register holds.

A layout's coordinate is the sum of the basis vectors of the set bits of (reg, lane, warp)
(kgen.layout; our layouts use disjoint single-bit bases, so XOR is a sum). The lane/warp
part is computed once per thread; the register part is a constant once loops over `e` are
unrolled, so the compiler folds it into address offsets.
"""
from __future__ import annotations

from ..layout import Layout
import re

from .cexpr import Expr, add, band, bxor, cat, div, expr, lit, mod, mul, shl, shr, spelled, sym, total


def _is_disjoint(layout: Layout) -> bool:
    seen = [0] * len(layout.shape)
    for bases in (layout.reg, layout.lane, layout.warp):
        for v in bases:
            for d, x in enumerate(v):
                if x and (x & (x - 1) or seen[d] & x):
                    return False
                seen[d] |= x
    return True


def _bits_expr(var: str, bases, dim: int) -> Expr:
    v = sym(var)
    return total(mul(band(shr(v, b), 1), base[dim]) for b, base in enumerate(bases) if base[dim])


def thread_coord(layout: Layout, dim: int) -> Expr:
    """The lane/warp part of the coordinate along `dim` (variables `lane`, `warp`), spelled at
    each use: named once at the top of the kernel instead, it is computed apart from the corners
    and register parts it is added to, and nvcc combines it with them differently (other
    instructions and registers in every kernel, kgen.bench.machine_code)."""
    assert _is_disjoint(layout), layout
    return cat(_bits_expr("lane", layout.lane, dim), _bits_expr("warp", layout.warp, dim))


def lane_coord(layout: Layout, dim: int) -> Expr:
    """The lane part of the coordinate along `dim` (variable `lane`)."""
    return _bits_expr("lane", layout.lane, dim)


def warp_coord(layout: Layout, dim: int) -> Expr:
    """The warp part of the coordinate along `dim` (variable `warp`)."""
    return _bits_expr("warp", layout.warp, dim)


def reg_coord(layout: Layout, dim: int, var: str = "e") -> Expr:
    """The register part of the coordinate along `dim`, an expression in `var`."""
    return _bits_expr(var, layout.reg, dim)


class CoordMacros:
    """A kernel's layout coordinates, a sum of two or more bit terms each written by a macro the
    kernel defines once: `tcN_` for a thread's part (lane and warp bits), `rcN_(e)` for register
    e's. A macro expands to the very sum it replaces, unparenthesised, and stands with the sum's
    precedence (cexpr.spelled), so the compiler reads the expression it read written out
    (kgen.bench.machine_code: the same instructions)."""

    def __init__(self) -> None:
        self._names: dict[tuple[str, str], str] = {}  # (kind, text in `e`) -> name

    def thread(self, layout: Layout, dim: int) -> Expr:
        return self._spell("tc", thread_coord(layout, dim))

    def lane(self, layout: Layout, dim: int) -> Expr:
        return self._spell("tc", lane_coord(layout, dim))

    def warp(self, layout: Layout, dim: int) -> Expr:
        return self._spell("tc", warp_coord(layout, dim))

    def reg(self, layout: Layout, dim: int, var: str = "e") -> Expr:
        return self._spell("rc", reg_coord(layout, dim, var), reg_coord(layout, dim, "e"), var)

    def _spell(self, kind: str, actual: Expr, body: Expr | None = None, var: str | None = None) -> Expr:
        body = body or actual
        if " + " not in body.text:  # one term: as short written out
            return actual
        key = (kind, body.text)
        if key not in self._names:
            self._names[key] = f"{kind}{sum(k == kind for k, _ in self._names)}_"
        call = self._names[key] + (f"({var})" if var is not None else "")
        expansion = body.text if var is None else re.sub(r"\be\b", var, body.text)
        assert expansion == actual.text, (call, expansion, actual.text)
        return spelled(call, actual)

    def definitions(self) -> list[dict]:
        """{"name", "body"} of each macro used, in the order of first use."""
        return [{"name": name + ("(e)" if kind == "rc" else ""), "body": body} for (kind, body), name in self._names.items()]


def reg_map_expr(mapping: list[int], var: str = "e") -> Expr:
    """An expression in `var` computing mapping[var] when the mapping keeps a subset of bits."""
    n = len(mapping)
    bits = n.bit_length() - 1
    for r in range(n):  # the mapping must be linear in the bits of r, as slices are
        assert mapping[r] == sum(mapping[1 << b] for b in range(bits) if r >> b & 1), mapping
    v = sym(var)
    return total(mul(band(shr(v, b), 1), mapping[1 << b]) for b in range(bits) if mapping[1 << b])


def dup_masks(layout: Layout) -> tuple[int, int]:
    """(lane mask, warp mask) of the bits that only make copies: a store is done by the threads
    whose masked bits are zero, so each element is written once."""
    lane = sum(1 << b for b, v in enumerate(layout.lane) if not any(v))
    warp = sum(1 << b for b, v in enumerate(layout.warp) if not any(v))
    return lane, warp


def tensor_param(name: str) -> str:
    """The C name of a tensor's pointer: prefixed, so that a spec's tensor may be called `do` (a
    C keyword) or `lane` (a name the templates use)."""
    return f"t_{name}"


def shared_slot(attrs: dict, outer: str, inner: str, elem_bytes: int) -> str:
    """The element offset in a staged buffer of (outer, inner) coordinates, inner being the
    contiguous dim. `rows` (the default): row-major with rows `ld` elements apart (padded).
    `cores`: 8-row x 16-byte core matrices of 128 contiguous bytes, cores in row-major order
    (kgen.ir.passes.operands), the layout wgmma's matrix descriptors read. `sw128`: the tile's
    columns in blocks of 128 bytes, each block `rows` rows of 128 bytes, the 16-byte chunk c of
    row r at chunk c ^ (r % 8) (the 128-byte swizzle; the buffer is 1024-byte aligned, so this
    is the XOR the hardware applies to address bits 4-6 from bits 7-9)."""
    layout = attrs.get("smem_layout", "rows")
    outer, inner = expr(outer), expr(inner)
    if layout == "rows":
        return add(mul(outer, attrs["ld"]), inner)
    t = 16 // elem_bytes
    if layout == "sw128":
        # bit operations, not % and /: nvcc then sees that rows 8 apart (the copy's iterations,
        # a fragment's registers) share the XOR and folds their offsets to immediates; with
        # signed % it kept one per chunk, and the D=128 dkdv spilled
        e, lt = 128 // elem_bytes, (16 // elem_bytes).bit_length() - 1
        return total([mul(div(inner, e), attrs["rows"] * e), mul(outer, e),
                      shl(bxor(band(shr(inner, lt), 7), band(outer, 7)), lt), band(inner, t - 1)])
    per_row = attrs["ld"] // t
    return total([mul(add(mul(div(outer, 8), per_row), div(inner, t)), 8 * t), mul(mod(outer, 8), t), mod(inner, t)])


def rep_index(var: str, reps: int) -> Expr:
    """A dot's repeat index along M (`rm`) or N (`rn`): the constant 0 when there is one repeat
    (kgen.codegen.emit.rep_loops then makes no loop)."""
    return sym(var) if reps > 1 else lit(0)


def register_operand_ptr(array: str, rep: Expr, ksteps: int, n: int) -> str:
    """The fragment of a dot operand read from registers for repeat `rep` and k-step `ks`:
    element (rep * ksteps + ks) * n (kgen.ir.passes.operands.operand_layout)."""
    return f"&{array}[{mul(add(mul(rep, ksteps), sym('ks')), n)}]"


def rep_loops(reps_m: int, reps_n: int) -> dict:
    """The loops over a dot's instruction repeats along M (`rm`) and N (`rn`), nested, and where
    repeat (rm, rn)'s accumulator registers start (`acc_at`, in units of one instruction's): a
    count of one is no loop, its index the constant 0 (coords.rep_index). `rep_indent` is the
    instruction's indent inside them."""
    loops = [(v, n) for v, n in (("rm", reps_m), ("rn", reps_n)) if n > 1]
    lines = ["  " * i + f"KG_FOR({v}, {n})" for i, (v, n) in enumerate(loops)]
    at = add(mul(rep_index("rm", reps_m), reps_n), rep_index("rn", reps_n))
    return {"rep_loops": lines, "rep_indent": "  " * len(loops), "acc_at": at}
