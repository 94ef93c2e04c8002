"""Integer expressions of the generated C++, folded as they are built.

Index arithmetic (layout coordinates, shared-memory slots, descriptor offsets) is composed from
parts that are often constants: a tile's corner at 0, one warpgroup (`wg_` 0), a 1-wide step. The
constructors here fold what is known (0 + x, x * 1, 0 * x, x / 1, constants combined) and print
with the parentheses C's precedence needs, so that the source says `ks * 16` where it would say
`((0 / 1) * 64 + (ks * 16))`. Only identities and constant arithmetic are folded (C's truncating
division and remainder on constants of either sign); nothing is reassociated (`cat` continues a
sum the way its sites always spelled it), so the compiler is given the same additions in the
same order.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# C operator precedence, higher binds tighter (cppreference, "C++ Operator Precedence")
PREC = {"*": 13, "/": 13, "%": 13, "+": 12, "-": 12, "<<": 11, ">>": 11, "&": 8, "^": 7, "|": 6}
ATOM = 100
_BITWISE = {11, 8, 7, 6}


@dataclass(frozen=True)
class Expr:
    text: str
    prec: int = ATOM
    value: int | None = None  # the constant's value, when it is one

    def __str__(self) -> str:
        return self.text


def lit(v: int) -> Expr:
    return Expr(str(v) if v >= 0 else f"({v})", ATOM, v)


def sym(text: str) -> Expr:
    """A C name or an expression given as text, with the precedence its outermost operator has
    (a name, call, subscript or parenthesised whole binds tightest; anything else is
    parenthesised where it is an operand)."""
    t = text.strip()
    if t.lstrip("-").isdigit():
        return lit(int(t))
    return Expr(t, ATOM if _primary(t) else 14 if _cast(t) else 0)


_NAME = re.compile(r"[A-Za-z_][\w:]*(<[^<>()]*>)?")


def _primary(t: str) -> bool:
    m = _NAME.match(t)
    rest = t[m.end():] if m else t
    return rest == "" or (rest[0] in "([" and closes_at_end(rest))


def _cast(t: str) -> bool:
    """`(type)(x)` or `(type)name`: a C cast of a primary, which binds tighter than any binary operator."""
    m = re.match(r"\((?:const )?[\w:]+\*?\)", t)
    if not m or m.end() == len(t):
        return False
    rest = t[m.end():]
    return _primary(rest) if rest[0] != "(" else closes_at_end(rest)


def closes_at_end(t: str) -> bool:
    """Whether the bracket `t` opens with closes at its last character."""
    depth = 0
    for i, ch in enumerate(t):
        depth += ch in "(["
        depth -= ch in ")]"
        if depth == 0 and i < len(t) - 1:
            return False
    return depth == 0


def expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        raise TypeError("a bool is not an index")
    if isinstance(x, int):
        return lit(x)
    return sym(str(x))


def _bin(op: str, a: Expr, b: Expr) -> Expr:
    p = PREC[op]

    def clear(x: Expr, right: bool) -> bool:
        if x.prec >= ATOM:
            return True
        if x.prec != p and (x.prec in _BITWISE or p in _BITWISE):
            return False  # shifts and bit operations mixed with other operators: parenthesised to read
        return x.prec > p or (x.prec == p and not right)  # same precedence on the right: keep the tree

    left = a.text if clear(a, False) else f"({a.text})"
    right = b.text if clear(b, True) else f"({b.text})"
    return Expr(f"{left} {op} {right}", p)


def _c_div(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y > 0) else -q


def add(a, b) -> Expr:
    a, b = expr(a), expr(b)
    if a.value == 0:
        return b
    if b.value == 0:
        return a
    if a.value is not None and b.value is not None:
        return lit(a.value + b.value)
    return _bin("+", a, b)


def sub(a, b) -> Expr:
    a, b = expr(a), expr(b)
    if b.value == 0:
        return a
    if a.value is not None and b.value is not None:
        return lit(a.value - b.value)
    return _bin("-", a, b)


def mul(a, b) -> Expr:
    a, b = expr(a), expr(b)
    if a.value == 0 or b.value == 0:
        return lit(0)
    if a.value == 1:
        return b
    if b.value == 1:
        return a
    if a.value is not None and b.value is not None:
        return lit(a.value * b.value)
    return _bin("*", a, b)


def div(a, b) -> Expr:
    a, b = expr(a), expr(b)
    if b.value == 1 or a.value == 0:
        return a
    if a.value is not None and b.value is not None:
        return lit(_c_div(a.value, b.value))
    return _bin("/", a, b)


def mod(a, b) -> Expr:
    a, b = expr(a), expr(b)
    if b.value == 1 or a.value == 0:
        return lit(0)
    if a.value is not None and b.value is not None:
        return lit(a.value - _c_div(a.value, b.value) * b.value)
    return _bin("%", a, b)


def shr(a, b) -> Expr:
    a, b = expr(a), expr(b)
    if b.value == 0 or a.value == 0:
        return a
    if a.value is not None and b.value is not None and a.value >= 0:
        return lit(a.value >> b.value)
    return _bin(">>", a, b)


def shl(a, b) -> Expr:
    a, b = expr(a), expr(b)
    if b.value == 0 or a.value == 0:
        return a
    if a.value is not None and b.value is not None and a.value >= 0:
        return lit(a.value << b.value)
    return _bin("<<", a, b)


def band(a, b) -> Expr:
    a, b = expr(a), expr(b)
    if a.value == 0 or b.value == 0:
        return lit(0)
    if a.value is not None and b.value is not None:
        return lit(a.value & b.value)
    return _bin("&", a, b)


def bxor(a, b) -> Expr:
    a, b = expr(a), expr(b)
    if a.value == 0:
        return b
    if b.value == 0:
        return a
    if a.value is not None and b.value is not None:
        return lit(a.value ^ b.value)
    return _bin("^", a, b)


def cat(a, b) -> Expr:
    """a + b with a sum `b` written on without parentheses: `a + x + y` for b = x + y. The
    sum's tree is then ((a + x) + y), the order in which the compiler is given the terms at the
    sites that were spelled that way; the value is the same (int addition is associative)."""
    a, b = expr(a), expr(b)
    if a.value == 0:
        return b
    if b.value == 0:
        return a
    if b.prec == PREC["+"] and a.value is None:
        left = a.text if a.prec >= PREC["+"] and a.prec not in _BITWISE else f"({a.text})"
        return Expr(f"{left} + {b.text}", PREC["+"])
    return add(a, b)


def spelled(text: str, e: Expr) -> Expr:
    """`e` written as `text`, a macro that expands to e's own text: it keeps e's precedence,
    so the operators around it are parenthesised as they would be around e and the expansion
    is token for token what writing e out gives."""
    return Expr(text, e.prec, e.value)


def total(terms) -> Expr:
    """The sum of `terms`, left to right."""
    out = lit(0)
    for t in terms:
        out = add(out, t)
    return out


def wide(index: str) -> Expr:
    """An index as a 64-bit offset term: the constant itself, or the value cast to int64_t."""
    e = sym(index)
    if e.value is not None:
        return e
    return sym(f"(int64_t){index}" if _NAME.fullmatch(index.strip()) else f"(int64_t)({index})")

