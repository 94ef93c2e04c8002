"""C++ expressions for layouts: which tile coordinate a thread's register holds.

A layout's coordinate is the sum of the basis vectors of the set bits of (reg, lane, warp)
(kgen.layout; our layouts use disjoint single-bit bases, so XOR is a sum). The lane/warp
part is computed once per thread; the register part is a constant once loops over `e` are
unrolled, so the compiler folds it into address offsets.
"""
from __future__ import annotations

from ..layout import Layout


def _is_disjoint(layout: Layout) -> bool:
    seen = [0] * len(layout.shape)
    for bases in (layout.reg, layout.lane, layout.warp):
        for v in bases:
            for d, x in enumerate(v):
                if x and (x & (x - 1) or seen[d] & x):
                    return False
                seen[d] |= x
    return True


def _bits_expr(var: str, bases, dim: int) -> str:
    terms = [f"(({var} >> {b}) & 1) * {v[dim]}" if b else f"({var} & 1) * {v[dim]}" for b, v in enumerate(bases) if v[dim]]
    return " + ".join(terms) if terms else "0"


def thread_coord(layout: Layout, dim: int) -> str:
    """The lane/warp part of the coordinate along `dim` (variables `lane`, `warp`)."""
    assert _is_disjoint(layout), layout
    parts = [p for p in (_bits_expr("lane", layout.lane, dim), _bits_expr("warp", layout.warp, dim)) if p != "0"]
    return " + ".join(parts) if parts else "0"


def lane_coord(layout: Layout, dim: int) -> str:
    """The lane part of the coordinate along `dim` (variable `lane`)."""
    return _bits_expr("lane", layout.lane, dim)


def warp_coord(layout: Layout, dim: int) -> str:
    """The warp part of the coordinate along `dim` (variable `warp`)."""
    return _bits_expr("warp", layout.warp, dim)


def reg_coord(layout: Layout, dim: int, var: str = "e") -> str:
    """The register part of the coordinate along `dim`, an expression in `var`."""
    return _bits_expr(var, layout.reg, dim)


def reg_map_expr(mapping: list[int], var: str = "e") -> str:
    """An expression in `var` computing mapping[var] when the mapping keeps a subset of bits."""
    n = len(mapping)
    bits = n.bit_length() - 1
    terms = []
    for b in range(bits):
        tgt = mapping[1 << b]
        if tgt:
            terms.append(f"(({var} >> {b}) & 1) * {tgt}")
    expr = " + ".join(terms) if terms else "0"
    for r in range(n):  # the mapping must be linear in the bits of r, as slices are
        assert mapping[r] == sum(mapping[1 << b] for b in range(bits) if r >> b & 1), mapping
    return expr


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
    if layout == "rows":
        return f"({outer}) * {attrs['ld']} + ({inner})"
    t = 16 // elem_bytes
    if layout == "sw128":
        # bit operations, not % and /: nvcc then sees that rows 8 apart (the copy's iterations,
        # a fragment's registers) share the XOR and folds their offsets to immediates; with
        # signed % it kept one per chunk, and the D=128 dkdv spilled
        e, lt = 128 // elem_bytes, (16 // elem_bytes).bit_length() - 1
        return (f"(({inner}) / {e} * {attrs['rows'] * e} + ({outer}) * {e}"
                f" + ((((({inner}) >> {lt}) & 7) ^ (({outer}) & 7)) << {lt}) + (({inner}) & {t - 1}))")
    per_row = attrs["ld"] // t
    return f"(({outer}) / 8 * {per_row} + ({inner}) / {t}) * {8 * t} + ({outer}) % 8 * {t} + ({inner}) % {t}"


def register_operand_ptr(array: str, rep: str, ksteps: int, n: int) -> str:
    """The fragment of a dot operand read from registers for repeat `rep` and k-step `ks`:
    element (rep * ksteps + ks) * n (kgen.ir.passes.operands.operand_layout)."""
    return f"&{array}[({rep} * {ksteps} + ks) * {n}]"
