"""A draw of random numbers over a register tile (`rand`, `rand8`): one Philox call per counter.

rand(seed, offset) reads word offset % 4 of the Philox call at counter offset >> 2, rand8 byte
offset % 16 of the call at offset >> 4 (templates/common/kgen_tile.h, kgen/ir/philox.py). A
tile's registers whose seeds and counters have equal forms (kgen.codegen.int_forms) hold equal
ones in every thread, so they share one call made at the first one's, and each takes its word or
byte by its own index: spelled from its form where that is a lane/warp-bit sum (the compiler then
folds the index's known bits: a constant shift, no per-element test), else read from the offset.
Where no two registers provably share a counter, the registers are drawn in order through a
RandMemo, which tests each counter against the last call's at run time.
"""
from __future__ import annotations

from ..ir.core import Op
from .int_forms import NoForms, RegisterForms, const

SHIFT = {"rand": 2, "rand8": 4}  # offset bits that index within one call: 4 words, 16 bytes
PICK = {"rand": "word", "rand8": "byte"}
MEMO_DRAW = {"rand": "uniform", "rand8": "uniform8"}


def rand_context(op: Op, forms: RegisterForms, seed_at, offset_at, decl: dict) -> dict:
    """The template context of a tile's draw: `seed_at(e)` and `offset_at(e)` the seed and the
    offset of register e in C, `decl` the result's declaration. Registers share a call when both
    their seeds and their counters have equal forms."""
    fn, (seed, offset) = op.attrs["fn"], op.operands
    shift = SHIFT[fn]
    table = forms.table
    per_call = const(1 << shift)
    nregs = op.result.layout.nregs
    groups: dict = {}
    try:
        seeds, offsets = ((fs * nregs if len(fs) == 1 else fs) for fs in (forms.of(seed), forms.of(offset)))
        for e, (s, f) in enumerate(zip(seeds, offsets)):
            groups.setdefault((s, table.floordiv(f, per_call)), []).append(e)
    except NoForms:
        groups = {}
    if len(groups) in (0, nregs):
        return {"macro": "rand", "out": decl, "seed": seed_at("e"), "offset": offset_at("e"), "draw": MEMO_DRAW[fn]}
    calls = []
    for members in groups.values():
        picks = []
        for e in members:
            index = forms.spell(table.mod(offsets[e], per_call))
            picks.append({"e": e, "index": index if index is not None else f"(int)({offset_at(e)} & {(1 << shift) - 1})"})
        calls.append({"seed": seed_at(members[0]), "counter": f"(unsigned long long)({offset_at(members[0])}) >> {shift}",
                      "picks": picks})
    return {"macro": "rand_calls", "out": decl, "calls": calls, "pick": PICK[fn]}
