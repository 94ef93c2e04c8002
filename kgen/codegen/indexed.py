"""Gathers and scatters (loads and stores indexed by integer tiles): one element per element of
the index tiles, in their layout. Element e's address is the sum of each dim's index times its
stride; one unsigned compare per dim tests 0 <= index < size (docs/SPEC_LANGUAGE.md, "Gather and
scatter")."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir.core import Op
from .cexpr import mul, sym, total, wide
from .coords import dup_masks, tensor_param

if TYPE_CHECKING:  # the emitter hands itself in
    from .emit import Emitter


def _address(em: "Emitter", op: Op) -> tuple[str, str]:
    """Element e's lvalue and its in-range test."""
    from .emit import elem

    t = op.attrs["tensor"]
    dims = em.dims[t]
    terms, tests = [], []
    for d, e in enumerate(op.attrs["index"]):
        index = op.operands[e[1]]
        i = elem(index)
        terms.append(mul(wide(i), 1 if d == len(dims) - 1 else sym(f"stride_{t}_{d}")))
        # an int64 index compares in 64 bits: 2^32 + 1 is out of range, not 1
        u = "unsigned long long" if index.dtype == "int64" else "unsigned"
        tests.append(f"({u})({i}) < ({u})({dims[d]})")
    return f"{tensor_param(t)}[{total(terms)}]", " && ".join(tests)


def gather_ctx(em: "Emitter", op: Op) -> dict:
    from .emit import literal

    where, test = _address(em, op)
    return {"macro": "elementwise", "out": em.decl(op.result),
            "expr": f"({test}) ? {where} : {literal(op.attrs['other'], op.result.dtype, em.half)}"}


def scatter_ctx(em: "Emitter", op: Op) -> dict:
    """One write (or fp32 add) per element in range, by one thread of each group of threads
    holding the same element."""
    from .emit import elem

    where, test = _address(em, op)
    value = op.operands[0]
    lane_dup, warp_dup = dup_masks(value.layout)
    writer = [f"(lane & {lane_dup}) == 0"] * bool(lane_dup) + [f"(warp & {warp_dup}) == 0"] * bool(warp_dup)
    write = f"kg::atomic_add(&{where}, {elem(value)})" if op.attrs["atomic"] else f"{where} = {elem(value)}"
    return {"macro": "scatter", "n": value.layout.nregs, "test": " && ".join(writer + [test]), "write": write}
