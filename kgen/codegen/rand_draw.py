"""A draw of random numbers over a register tile (`rand`, `rand8`): one Philox call per counter.

rand(seed, offset) reads word offset % 4 of the Philox call at counter offset >> 2, rand8 byte
offset % 16 of the call at offset >> 4 (templates/common/kgen_tile.h, kgen/ir/philox.py). A
tile's registers whose counters have equal forms (kgen.codegen.int_forms) hold equal counters in
every thread, so they share one call made at the first one's counter, and each takes its word or
byte by its own index: spelled from its form where that is a lane/warp-bit sum (the compiler then
folds the index's known bits: a constant shift, no per-element test), else read from the offset.
Where no two registers provably share a counter, the registers are drawn in order through a
RandMemo, which tests each counter against the last call's at run time.
"""
from __future__ import annotations

from ..ir.core import Op
from .int_forms import RegisterForms, const

SHIFT = {"rand": 2, "rand8": 4}  # offset bits that index within one call: 4 words, 16 bytes
PICK = {"rand": "word", "rand8": "byte"}
MEMO_DRAW = {"rand": "uniform", "rand8": "uniform8"}


def rand_context(op: Op, forms: RegisterForms, seed: str, offset_at, decl: dict) -> dict:
    """The template context of a tile's draw: `seed` the seed in C, `offset_at(e)` the offset of
    register e in C, `decl` the result's declaration."""
    fn, offset = op.attrs["fn"], op.operands[1]
    shift = SHIFT[fn]
    table = forms.table
    per_call = const(1 << shift)
    nregs = op.result.layout.nregs
    offsets = forms.of(offset)
    offsets = offsets * nregs if len(offsets) == 1 else offsets
    groups: dict = {}
    for e, f in enumerate(offsets):
        groups.setdefault(table.floordiv(f, per_call), []).append(e)
    if len(groups) == nregs:
        return {"macro": "rand", "out": decl, "seed": seed, "offset": offset_at("e"), "draw": MEMO_DRAW[fn]}
    calls = []
    for members in groups.values():
        picks = []
        for e in members:
            index = forms.spell(table.mod(offsets[e], per_call))
            picks.append({"e": e, "index": index if index is not None else f"(int)({offset_at(e)} & {(1 << shift) - 1})"})
        calls.append({"counter": f"(unsigned long long)({offset_at(members[0])}) >> {shift}", "picks": picks})
    return {"macro": "rand_calls", "out": decl, "seed": seed, "calls": calls, "pick": PICK[fn]}
