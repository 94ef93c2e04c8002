"""Integer tiles register by register as linear forms over a thread's lane and warp bits.

A register tile's element e is, for the thread that holds it, a function of e (known while
rendering: loops over registers are unrolled), of the thread's lane and warp bits, and of
run-time values (sizes, program ids, loop indices). This analysis writes each element of an
integer tile as a linear form: a constant plus integer multiples of atoms. An atom is a lane or
warp bit (0 or 1), a run-time value (any integer), or an operation it could not see through,
keyed by its operands' forms. Two elements with equal forms hold equal values in every thread
and every run (integer arithmetic without overflow, as the generated C++ assumes of its int and
long long), which is what a draw of random numbers needs to know: registers whose Philox
counters are equal share one call (kgen.codegen.rand_draw).

Floor division and floor modulo by a positive constant d see through a form whose terms split
into multiples of d (a coefficient divisible by d) and a remainder of bounded atoms whose range
stays within one period [kd, kd + d - 1]: then f // d = (multiples) / d + k and
f % d = remainder - kd. This is the rule that follows a coordinate through `(q_idx // 8) % 2`
when the block's origin is a multiple of 8. Otherwise the result is a new atom (with the range
[0, d - 1] for a modulo). The same rule is Triton's axis analysis (contiguity, divisibility,
constancy of a tensor's elements) asked per register of a known layout instead of per block.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

from ..ir.core import Op, Value
from ..layout import broadcast_reg_map
from .dtypes import INTEGER


@dataclass(frozen=True)
class Form:
    """const + sum(coef * atom) with atoms numbered by a FormTable, terms sorted by atom."""
    terms: tuple[tuple[int, int], ...]
    const: int

    @property
    def is_const(self) -> bool:
        return not self.terms


def const(c: int) -> Form:
    return Form((), int(c))


def _combine(a: Form, b: Form, sb: int = 1) -> Form:
    acc = dict(a.terms)
    for atom, c in b.terms:
        acc[atom] = acc.get(atom, 0) + sb * c
    return Form(tuple(sorted((k, c) for k, c in acc.items() if c)), a.const + sb * b.const)


def _scale(a: Form, s: int) -> Form:
    if s == 0:
        return const(0)
    return Form(tuple((k, c * s) for k, c in a.terms), a.const * s)


class FormTable:
    """The atoms of one kernel's forms (numbered as first met) and their ranges."""

    def __init__(self) -> None:
        self._ids: dict[Hashable, int] = {}
        self.ranges: list[tuple[int, int] | None] = []
        self.keys: list[Hashable] = []

    def atom(self, key: Hashable, bounds: tuple[int, int] | None = None) -> Form:
        if key not in self._ids:
            self._ids[key] = len(self.keys)
            self.keys.append(key)
            self.ranges.append(bounds)
        return Form(((self._ids[key], 1),), 0)

    def bit(self, var: str, b: int) -> Form:
        """Bit b of the thread's `lane` or `warp` index."""
        return self.atom((var, b), (0, 1))

    def bounds(self, f: Form) -> tuple[int, int] | None:
        lo = hi = f.const
        for atom, c in f.terms:
            r = self.ranges[atom]
            if r is None:
                return None
            lo, hi = lo + min(c * r[0], c * r[1]), hi + max(c * r[0], c * r[1])
        return lo, hi

    # --- arithmetic ------------------------------------------------------------------------------
    def add(self, a: Form, b: Form) -> Form:
        return _combine(a, b)

    def sub(self, a: Form, b: Form) -> Form:
        return _combine(a, b, -1)

    def mul(self, a: Form, b: Form) -> Form:
        if a.is_const:
            return _scale(b, a.const)
        if b.is_const:
            return _scale(a, b.const)
        x, y = sorted((a, b), key=repr)
        return self.atom(("mul", x, y))

    def _split(self, a: Form, d: int) -> tuple[Form, int] | None:
        """(a - r) / d and k where r, the terms of a not multiples of d, lies in [kd, kd + d - 1]."""
        whole = tuple((k, c // d) for k, c in a.terms if c % d == 0)
        rest = Form(tuple((k, c) for k, c in a.terms if c % d), a.const % d)
        r = self.bounds(rest)
        if r is None or r[0] // d != r[1] // d:
            return None
        return Form(whole, a.const // d), r[0] // d

    def floordiv(self, a: Form, d: Form) -> Form:
        if d.is_const and d.const > 0:
            split = self._split(a, d.const)
            if split is not None:
                q, k = split
                return _combine(q, const(k))
        r = self.bounds(a)
        bounds = (r[0] // d.const, r[1] // d.const) if r is not None and d.is_const and d.const > 0 else None
        return self.atom(("floordiv", a, d), bounds)

    def mod(self, a: Form, d: Form) -> Form:
        if d.is_const and d.const > 0:
            split = self._split(a, d.const)
            if split is not None:
                q, k = split  # a = d q + r with r in [kd, kd + d - 1]: a % d = r - kd
                return _combine(a, _scale(_combine(q, const(k)), d.const), -1)
            return self.atom(("mod", a, d), (0, d.const - 1))
        return self.atom(("mod", a, d))

    def opaque(self, key: Hashable) -> Form:
        return self.atom(key)

    def evaluate(self, f: Form, leaves: dict[Hashable, int]) -> int:
        """The form's value where each leaf atom (a lane or warp bit, a run-time value: the keys
        `bit` and `atom` made) has the value `leaves` gives; an atom of an operation is computed
        from its operands' forms."""
        total = f.const
        for atom, c in f.terms:
            key = self.keys[atom]
            if key in leaves:
                x = leaves[key]
            elif key[0] in ("mul", "floordiv", "mod"):
                a, b = (self.evaluate(g, leaves) for g in key[1:])
                x = a * b if key[0] == "mul" else a // b if key[0] == "floordiv" else a % b
            else:
                raise KeyError(key)
            total += c * x
        return total


class NoForms(ValueError):
    """A value the analysis cannot write register by register (one not held in registers)."""


BINARY = {"add": FormTable.add, "sub": FormTable.sub, "mul": FormTable.mul, "floordiv": FormTable.floordiv,
          "mod": FormTable.mod}


class RegisterForms:
    """The forms of a kernel's integer values, one per register (one for a scalar), computed on
    demand from the ops that make them (`producer`: id of a value -> its op)."""

    def __init__(self, producer: dict[int, Op]):
        self.producer = producer
        self.table = FormTable()
        self._memo: dict[int, list[Form]] = {}

    def of(self, v: Value) -> list[Form]:
        if id(v) not in self._memo:
            self._memo[id(v)] = self._compute(v)
        return self._memo[id(v)]

    def _unknown(self, v: Value) -> list[Form]:
        if v.is_scalar:
            return [self.table.opaque(("value", v.id))]
        if v.layout is None:  # not in registers: no register to name
            raise NoForms(f"{v!r} has no register layout")
        return [self.table.opaque(("value", v.id, e)) for e in range(v.layout.nregs)]

    def _compute(self, v: Value) -> list[Form]:
        op = self.producer.get(id(v))
        if v.dtype not in INTEGER or op is None:
            return self._unknown(v)
        kind, fn = op.kind, op.attrs.get("fn")
        if kind == "const":
            return [const(op.attrs["value"])]
        if kind == "arange":
            return self._arange(op.result)
        if kind in ("expand", "trans", "cast") and op.operands[0].dtype in INTEGER:
            return self.of(op.operands[0])
        if kind == "broadcast":
            src = self.of(op.operands[0])
            if op.operands[0].is_scalar:
                return src * v.layout.nregs
            return [src[r] for r in broadcast_reg_map(v.layout, op.operands[0].shape)]
        if kind == "binary" and fn in BINARY:
            a, b = (self.of(x) for x in op.operands)
            n = 1 if v.is_scalar else v.layout.nregs
            a, b = (x * n if len(x) == 1 else x for x in (a, b))
            return [BINARY[fn](self.table, x, y) for x, y in zip(a, b)]
        return self._unknown(v)

    def _arange(self, v: Value) -> list[Form]:
        lay = v.layout
        thread = const(0)
        for var, bases in (("lane", lay.lane), ("warp", lay.warp)):
            for b, basis in enumerate(bases):
                if basis[0]:
                    thread = self.table.add(thread, _scale(self.table.bit(var, b), basis[0]))
        out = []
        for e in range(lay.nregs):
            reg = sum(basis[0] for b, basis in enumerate(lay.reg) if e >> b & 1)
            out.append(self.table.add(thread, const(reg)))
        return out

    def spell(self, f: Form) -> str | None:
        """A form of lane and warp bits and a constant as a C expression (`lane`, `warp`: the
        thread's indices, as the layouts' coordinates spell them), else None."""
        parts = []
        for atom, c in f.terms:
            key = self.table.keys[atom]
            if not (isinstance(key, tuple) and len(key) == 2 and key[0] in ("lane", "warp")):
                return None
            parts.append(f"(({key[0]} >> {key[1]}) & 1) * {c}")
        parts.append(str(f.const))
        return " + ".join(parts)
