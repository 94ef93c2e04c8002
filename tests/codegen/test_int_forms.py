"""kgen/codegen/int_forms.py: integer values register by register as forms over lane and warp
bits. Every simplification is checked against plain integer arithmetic on random expressions of
tile coordinates (block origins any multiple of the block, run-time sizes of either sign), and the
forms of a real layout's coordinates are the ones the rand draw relies on."""
from __future__ import annotations

import random

import pytest

from kgen.codegen.int_forms import FormTable, const


def _coordinate(t: FormTable, origin_key: str, block: int, bits: list[tuple[str, int, int]], reg: int):
    """origin * block + sum(bit * basis) + reg: a tile coordinate as the layouts give it."""
    f = t.mul(t.atom(("value", origin_key)), const(block))
    for var, b, basis in bits:
        f = t.add(f, t.mul(t.bit(var, b), const(basis)))
    return t.add(f, const(reg))


def _random_expr(rng: random.Random, depth: int):
    """An expression over the leaves x (a coordinate), s (a run-time size) and small constants."""
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(["x", "x", "s", ("c", rng.choice([1, 2, 3, 4, 8, 16, 64]))])
    op = rng.choice(["add", "sub", "mul", "floordiv", "mod", "floordiv", "mod"])
    if op in ("floordiv", "mod"):
        return (op, _random_expr(rng, depth - 1), ("c", rng.choice([2, 4, 8, 16, 3, 5])))
    return (op, _random_expr(rng, depth - 1), _random_expr(rng, depth - 1))


def _form(t: FormTable, e, leaves):
    if isinstance(e, str):
        return leaves[e]
    if e[0] == "c":
        return const(e[1])
    return getattr(t, e[0])(_form(t, e[1], leaves), _form(t, e[2], leaves))


def _value(e, env):
    if isinstance(e, str):
        return env[e]
    if e[0] == "c":
        return e[1]
    a, b = _value(e[1], env), _value(e[2], env)
    return {"add": a + b, "sub": a - b, "mul": a * b, "floordiv": a // b, "mod": a % b}[e[0]]


@pytest.mark.parametrize("seed", range(40))
def test_forms_compute_what_the_arithmetic_does(seed):
    rng = random.Random(seed)
    t = FormTable()
    bits = [("lane", 0, 2), ("lane", 1, 4), ("lane", 2, 1), ("warp", 0, 16)]
    regs = [0, 1, 8, 9, 32]
    expr = _random_expr(rng, 4)
    forms = [_form(t, expr, {"x": _coordinate(t, "o", 64, bits, r), "s": t.atom(("value", "s"))}) for r in regs]
    for _ in range(30):
        lane, warp, o, s = rng.randrange(32), rng.randrange(2), rng.randrange(-50, 50), rng.randrange(-300, 300)
        leaves = {("lane", 0): lane & 1, ("lane", 1): lane >> 1 & 1, ("lane", 2): lane >> 2 & 1,
                  ("warp", 0): warp, ("value", "o"): o, ("value", "s"): s}
        for r, f in zip(regs, forms):
            x = o * 64 + 2 * (lane & 1) + 4 * (lane >> 1 & 1) + (lane >> 2 & 1) + 16 * warp + r
            try:
                want = _value(expr, {"x": x, "s": s})
            except ZeroDivisionError:
                continue
            assert t.evaluate(f, leaves) == want, (expr, r)


def test_floor_division_and_modulo_see_through_an_aligned_origin():
    """(o * 64 + 2 l0 + 4 l1 + r) // 16 is o * 4 for r < 10 and o * 4 + 1 for r in 16..25; its
    % 8 is 2 l0 + 4 l1 + r % 8 where that stays below 8 (not for r = 3: 3 + 6 reaches 9)."""
    t = FormTable()
    bits = [("lane", 0, 2), ("lane", 1, 4)]
    x = {r: _coordinate(t, "o", 64, bits, r) for r in (0, 1, 3, 9, 16, 25)}
    q = {r: t.floordiv(f, const(16)) for r, f in x.items()}
    assert q[0] == q[1] == q[9] and q[16] == q[25] and q[0] != q[16]
    assert q[0] == t.mul(t.atom(("value", "o")), const(4))
    m = {r: t.mod(f, const(8)) for r, f in x.items()}
    assert m[1] == t.add(t.add(t.mul(t.bit("lane", 0), const(2)), t.mul(t.bit("lane", 1), const(4))), const(1))
    assert m[3].terms and t.keys[m[3].terms[0][0]][0] == "mod"  # 3 + 2 + 4 = 9 crosses a period: not seen through
    assert t.bounds(m[3]) == (0, 7)


def test_a_run_time_size_is_not_aligned():
    """o * 64 + s: s any integer, so // 16 of it stays an atom, the same for equal operands only."""
    t = FormTable()
    s = t.atom(("value", "s"))
    a = t.add(_coordinate(t, "o", 64, [], 0), s)
    b = t.add(_coordinate(t, "o", 64, [], 1), s)
    assert t.floordiv(a, const(16)) != t.floordiv(b, const(16))
    assert t.floordiv(a, const(16)) == t.floordiv(t.add(s, _coordinate(t, "o", 64, [], 0)), const(16))


def test_a_value_outside_registers_has_no_forms():
    """A tile with no register layout (one in shared memory) cannot be named register by register:
    the analysis says so, and a draw over it takes the memo (kgen/codegen/rand_draw.py)."""
    from kgen.codegen.int_forms import NoForms, RegisterForms
    from kgen.ir.core import Value

    forms = RegisterForms({})
    with pytest.raises(NoForms):
        forms.of(Value((16,), "int64", place="shared"))
    assert len(forms.of(Value((), "int64"))) == 1  # a scalar: one form, the same in every register
