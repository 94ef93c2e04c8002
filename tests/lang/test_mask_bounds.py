"""block_phases' interval analysis (kgen/lang/mask_bounds.py) against brute force: for masks in
the shapes attention variants take (causal, windows, prefix-LM, equality, negation, conditions
on one index alone, terms it cannot bound), every visible position lies in a block the phases
cover, every block called whole is visible for every row of the span, and for the affine masks
the covered blocks are exactly the visible ones."""
from __future__ import annotations

import ast
import copy
import itertools
import random

import pytest

from kgen.lang import mask_bounds as mb

SCALARS = {"SQ": 50, "SK": 70, "window": 9, "prefix": 13}
# packed documents over the 70 positions: each position's document's first and past-last position
_CUTS = [0, 11, 12, 30, 58, 70]
START = [max(c for c in _CUTS if c <= p) for p in range(70)]
END = [min(c for c in _CUTS if c > p) for p in range(70)]
# segment ids over the 70 positions (domain segments: runs), one run empty: id d from RUNS[d] up to RUNS[d + 1]
RUNS = [0, 11, 12, 12, 30, 58, 70]
DOC = [max(d for d, r in enumerate(RUNS[:-1]) if r <= p) for p in range(70)]
# a second numbering of the same documents over the 50 query positions (a varlen query's
# cu_seqlens beside the key's): its starts declared with the same shape as RUNS
QRUNS = [0, 5, 5, 9, 20, 44, 50]
QDOC = [max(d for d, r in enumerate(QRUNS[:-1]) if r <= p) for p in range(50)]
# ids of another numbering (starts of another shape): comparing them with doc bounds nothing
ORUNS = [0, 10, 30, 50]
OTHER = [max(d for d, r in enumerate(ORUNS[:-1]) if r <= p) for p in range(50)]
ORDERED = frozenset({"start", "end", "doc", "qdoc", "other"})
SEGMENTS = {"doc": ("runs", ("B", "N1")), "qdoc": ("qruns", ("B", "N1")), "other": ("oruns", ("B", "N2"))}
LISTS = {"start": START, "end": END, "doc": DOC, "runs": RUNS, "qdoc": QDOC, "qruns": QRUNS, "other": OTHER, "oruns": ORUNS}


def _int32(v):
    """The value of one arithmetic step: the generated code computes the ends in int32, where a
    step past its range is undefined (C++) and wraps in practice (CUDA, HIP)."""
    assert not isinstance(v, int) or -2 ** 31 <= v < 2 ** 31, f"an end's arithmetic leaves int32: {v}"
    return v


class _Checked(ast.NodeTransformer):
    def visit_BinOp(self, node):
        self.generic_visit(node)
        return ast.Call(func=ast.Name(id="_int32", ctx=ast.Load()), args=[node], keywords=[])


def _eval(e: ast.expr | None, env: dict) -> int:
    fns = {"minimum": min, "maximum": max, "where": lambda c, a, b: a if c else b, "cdiv": lambda a, b: -(-a // b),
           "load": lambda x: x, "_int32": _int32, **LISTS}
    checked = _Checked().visit(copy.deepcopy(e))
    return eval(compile(ast.Expression(ast.fix_missing_locations(checked)), "<bound>", "eval"), fns, dict(env))


def _static(e: ast.expr):
    try:
        v = _eval(e, dict(SCALARS, causal=True))
    except NameError:
        return None
    return v if isinstance(v, (int, bool)) else None


MASKS = {  # name: (body over q, k; exact: the covered blocks are exactly those with a visible pair, asking
    # for k's blocks and for q's, or for k's only)
    "all": ("True", True),
    "causal": ("k <= q + (SK - SQ)", True),
    "causal_if": ("k <= q + (SK - SQ) if causal else True", True),
    "window": ("k <= q and q - k <= window", True),
    "two_sided": ("k >= q - window and k <= q + 3", True),
    "prefix_lm": ("k <= q or k < prefix", True),
    "equal": ("k == q", True),
    "not_causal": ("not (k > q)", True),
    "not_equal": ("k != q", False),
    "rows_after": ("q >= prefix and k <= q", False),
    "scaled": ("2 * k <= q", False),
    "loaded": ("load(k // 16) == load(q // 16)", False),
    "document": ("k >= load(start[q]) and k < load(end[q])", "k"),
    "document_causal": ("k >= load(start[q]) and k <= q", "k"),
    "document_falling": ("k >= 69 - load(end[q]) + 1", "k"),
    "negated_window": ("not (k > q or q - k > window)", True),
    "same_segment": ("load(doc[k]) == load(doc[q])", True),
    "same_segment_causal": ("load(doc[minimum(maximum(q + (SK - SQ), 0), SK - 1)]) == load(doc[k]) and k <= q + (SK - SQ)", True),
    "same_segment_shifted": ("load(doc[maximum(q - 7, 0)]) == load(doc[minimum(k + 5, SK - 1)])", True),
    "different_segment": ("load(doc[k]) != load(doc[q])", False),
    "varlen": ("load(qdoc[q]) == load(doc[k])", True),
    "varlen_causal": ("load(qdoc[q]) == load(doc[k]) and k <= q + load(runs[load(qdoc[q]) + 1]) - load(qruns[load(qdoc[q]) + 1])", False),
    "other_numbering": ("load(other[q]) == load(doc[k])", False),
}


def _visible(body: str, q: int, k: int) -> bool:
    return bool(eval(body, {"load": lambda x: x, "minimum": min, "maximum": max},
                     dict(SCALARS, causal=True, q=q, k=k, **LISTS)))


@pytest.mark.parametrize("name", sorted(MASKS))
@pytest.mark.parametrize("free", ["k", "q"])
def test_phases_cover_every_visible_pair_and_whole_blocks_are_whole(name, free):
    body, exact = MASKS[name]
    fixed = "q" if free == "k" else "k"
    expr = mb.expand([ast.Return(value=ast.parse(body, mode="eval").body)],
                     {free: ast.Name(id=mb.FREE, ctx=ast.Load()), fixed: ast.Name(id=mb.FIXED, ctx=ast.Load())}, {}, _static)
    possible, sure = mb.visible(expr, _static, ORDERED, SEGMENTS)
    rng = random.Random(len(name))
    n = SCALARS["SK"] if free == "k" else SCALARS["SQ"]
    n_fixed = SCALARS["SQ"] if free == "k" else SCALARS["SK"]
    for (block, span_len), bounded in itertools.product(itertools.product((8, 16), (1, 8, 16)), (True, False)):
        ends = mb.block_range(possible, sure, block, ast.Name(id="N", ctx=ast.Load()), bounded)
        for lo in [0, n_fixed - span_len] + [rng.randrange(0, n_fixed - span_len + 1) for _ in range(3)]:
            env = {mb.FIXED_LO: lo, mb.FIXED_HI: lo + span_len - 1, "N": n, **SCALARS}
            got = {k: _eval(e, env) for k, e in ends.items()}
            first, end = got["first"], got["end"]
            # no full_end: no whole blocks; no full_first: they start at first
            full_first, full_end = (got.get("full_first", first), got["full_end"]) if "full_end" in got else (first, first)
            assert 0 <= first <= end <= -(-n // block) and first <= full_first <= full_end <= end
            ys = range(lo, lo + span_len)
            pair = (lambda x, y: _visible(body, y, x)) if free == "k" else (lambda x, y: _visible(body, x, y))
            seen_blocks = {x // block for x in range(n) if any(pair(x, y) for y in ys)}
            assert all(first <= j < end for j in seen_blocks), (name, lo, block, got, sorted(seen_blocks))
            for j in range(full_first, full_end):  # unbounded: the caller tests n itself
                assert (j + 1) * block <= n or not bounded, (name, lo, j, got)
                assert all(pair(x, y) for x in range(j * block, min((j + 1) * block, n)) for y in ys), (name, lo, j, got)
            if (exact is True or exact == free) and seen_blocks:
                assert (first, end) == (min(seen_blocks), max(seen_blocks) + 1), (name, lo, block, got)
