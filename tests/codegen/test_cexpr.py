"""kgen/codegen/cexpr.py: folded index expressions print as C that computes the same value."""
from __future__ import annotations

import random
import re

import pytest

from kgen.codegen.cexpr import add, band, bxor, cat, div, lit, mod, mul, shl, shr, sub, sym, total


def c_eval(text: str, env: dict[str, int]) -> int:
    """Evaluate C integer arithmetic on non-negative values (where / and % are Python's // and %)."""
    return eval(re.sub(r"(?<![/])/(?![/])", "//", text), {"__builtins__": {}}, dict(env))


@pytest.mark.parametrize("built, text", [
    (add(0, sym("x")), "x"), (add(sym("x"), 0), "x"), (mul(sym("x"), 1), "x"), (mul(1, sym("x")), "x"),
    (mul(sym("x"), 0), "0"), (div(sym("x"), 1), "x"), (mod(sym("x"), 1), "0"), (sub(sym("x"), 0), "x"),
    (shr(sym("x"), 0), "x"), (bxor(sym("x"), 0), "x"), (band(sym("x"), 0), "0"),
    (add(lit(3), lit(4)), "7"), (div(lit(-7), 2), "(-3)"), (mod(lit(-7), 2), "(-1)"),  # C truncates
    (mul(add(sym("a"), sym("b")), 4), "(a + b) * 4"),
    (sub(sym("a"), add(sym("b"), sym("c"))), "a - (b + c)"),
    (add(band(shr(sym("lane"), 2), 1), mul(band(shr(sym("lane"), 3), 1), 2)), "((lane >> 2) & 1) + ((lane >> 3) & 1) * 2"),
    (mul(sym("kg::floordiv(a, b)"), 4), "kg::floordiv(a, b) * 4"),
    (mul(sym("(int64_t)(b)"), sym("stride_x_0")), "(int64_t)(b) * stride_x_0"),
    (mul(sym("x + 1"), 2), "(x + 1) * 2"),  # text of unknown shape is parenthesised
    (cat(sym("t"), add(sym("a"), sym("b"))), "t + a + b"),
    (add(sym("t"), add(sym("a"), sym("b"))), "t + (a + b)"),
])
def test_identities_fold_and_precedence_is_printed(built, text):
    assert str(built) == text


def _random_tree(rng: random.Random, depth: int):
    """(Expr, value) for a random expression over x, y, z and small constants, built with the
    folding constructors; the value computed directly from the same tree."""
    env = {"x": 13, "y": 6, "z": 1}
    if depth == 0 or rng.random() < 0.2:
        if rng.random() < 0.5:
            v = rng.choice([0, 1, 2, 3, 7, 8])
            return lit(v), v
        name = rng.choice(list(env))
        return sym(name), env[name]
    (a, x), (b, y) = _random_tree(rng, depth - 1), _random_tree(rng, depth - 1)
    op = rng.choice(["add", "mul", "div", "mod", "shr", "shl", "and", "xor", "cat"])
    if op in ("div", "mod") and y == 0:
        op = "add"
    if op in ("shr", "shl"):
        b, y = lit(y % 4), y % 4
    fn, value = {"add": (add, x + y), "cat": (cat, x + y), "mul": (mul, x * y), "div": (div, x // max(y, 1)),
                 "mod": (mod, x % max(y, 1)), "shr": (shr, x >> y), "shl": (shl, x << y), "and": (band, x & y),
                 "xor": (bxor, x ^ y)}[op]
    return fn(a, b), value


def test_printed_random_expressions_compute_their_values():
    rng = random.Random(7)
    for _ in range(2000):
        e, value = _random_tree(rng, 4)
        assert c_eval(str(e), {"x": 13, "y": 6, "z": 1}) == value, str(e)
        assert e.value is None or e.value == value


def test_total_sums_left_to_right_and_skips_zeros():
    assert str(total([sym("a"), lit(0), mul(sym("b"), 2), lit(0)])) == "a + b * 2"
    assert str(total([])) == "0"
