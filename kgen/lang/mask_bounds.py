"""Which blocks of an index a mask hook can see: interval analysis of the hook's body
(docs/SPEC_LANGUAGE.md, "Block phases").

`block_phases(mask_mod(b, h, span(lo, hi), ...), BLOCK, N)` asks, for every value of the spanned
argument y in [lo, hi], which values x of the `...` argument the mask may make true. The body is
expanded into one boolean expression (locals and other hooks substituted, compile-time `if`
chosen) and each comparison that is affine in x with coefficient +-1 and monotone in y (affine
in it, or through loads from tensors whose `domain` says they are sorted along the indexed last
dim, as a document's start offset is along the positions) becomes a bound x <= g(y), x >= g(y)
or x == g(y), g taken at the span's ends. An equality of two loads from a tensor of segment ids
(its `domain` says `segments: starts`: id d along the last dim from starts[..., d] up to
starts[..., d + 1]), one indexed by x (plus a term free of both, possibly clamped by
maximum/minimum) and one monotone in y, bounds x to the runs of the ids the span's ends have
(FlexAttention's document_id[q] == document_id[kv]). Two intervals come out, as tile-language expressions:
  - `possible`, a superset of every x that is visible for some y of the span (its hull);
  - `sure`, a subset of the x that are visible for every y of the span.
`and` intersects both; `or` takes the hull of `possible` and, of `sure`, the union where the two
intervals touch, else the longer; `not` is pushed onto the comparisons. A comparison in y alone
gives everything or nothing by its value at the span's ends. Anything else that names x (a load
indexed by it, a product of it with a run-time value) is unknown: possible everything, sure
nothing. So the result never hides a visible position; an unknown term only costs work.
Bounds known to be infinite are kept as None, so that the phases the analysis rules out are
left out when the spec is read.
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from typing import Any, Callable

FREE, FIXED, FIXED_LO, FIXED_HI = "__x", "__y", "__span_lo", "__span_hi"


class NotAnalyzable(ValueError):
    def __init__(self, node: ast.AST, message: str):
        super().__init__(message)
        self.node = node


@dataclass(frozen=True)
class Interval:
    """[lo, hi) over the integers, each end a tile-language expression or None (unbounded);
    empty when lo >= hi at run time. EMPTY is the interval known to be empty when the spec is read."""

    lo: ast.expr | None
    hi: ast.expr | None


ALL = Interval(None, None)
EMPTY = Interval(ast.Constant(1), ast.Constant(0))
# stand-ins for infinite ends inside a run-time choice; the ends are computed in int32, and an
# interval's length (union_within) takes the difference of two, so the stand-ins stay below 2^29:
# their difference, 2^30, plus any position below 2^29 stays within int32
_NEG, _POS = -(1 << 29), 1 << 29


def _is_empty(i: Interval) -> bool:
    return i is EMPTY


def _const(e: ast.expr | None) -> Any:
    return e.value if isinstance(e, ast.Constant) else None


def _neg(e: ast.expr) -> ast.expr:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return e.operand
    if isinstance(_const(e), int):
        return _num(-e.value)
    return ast.UnaryOp(op=ast.USub(), operand=e)


def _call(fn: str, *args: ast.expr) -> ast.expr:
    return ast.Call(func=ast.Name(id=fn, ctx=ast.Load()), args=list(args), keywords=[])


def _num(v: int) -> ast.expr:
    return ast.Constant(value=v)


def add(a: ast.expr, k: int) -> ast.expr:
    if k == 0:
        return a
    if isinstance(_const(a), int):
        return _num(a.value + k)
    return ast.BinOp(left=a, op=ast.Add() if k > 0 else ast.Sub(), right=_num(abs(k)))


def maximum(a: ast.expr | None, b: ast.expr | None, none_is: str = "neg") -> ast.expr | None:
    """max of two ends; None is -inf for none_is='neg' (lower ends), +inf for 'pos'."""
    if a is None or b is None:
        return (b if a is None else a) if none_is == "neg" else None
    if isinstance(_const(a), int) and isinstance(_const(b), int):
        return _num(max(a.value, b.value))
    return _call("maximum", a, b)


def minimum(a: ast.expr | None, b: ast.expr | None, none_is: str = "pos") -> ast.expr | None:
    if a is None or b is None:
        return (b if a is None else a) if none_is == "pos" else None
    if isinstance(_const(a), int) and isinstance(_const(b), int):
        return _num(min(a.value, b.value))
    return _call("minimum", a, b)


def _where(c: ast.expr, a: ast.expr, b: ast.expr) -> ast.expr:
    return _call("where", c, a, b)


def _lo(e: ast.expr | None) -> ast.expr:
    return _num(_NEG) if e is None else e


def _hi(e: ast.expr | None) -> ast.expr:
    return _num(_POS) if e is None else e


def conjoin(a: Interval, b: Interval) -> Interval:
    if _is_empty(a) or _is_empty(b):
        return EMPTY
    return Interval(maximum(a.lo, b.lo, "neg"), minimum(a.hi, b.hi, "pos"))


def hull(a: Interval, b: Interval) -> Interval:
    """The smallest interval holding both (an empty one adds nothing)."""
    if _is_empty(a) or _is_empty(b):
        return b if _is_empty(a) else a
    if a == ALL or b == ALL:
        return ALL
    lo = None if a.lo is None or b.lo is None else _call("minimum", a.lo, b.lo)
    hi = None if a.hi is None or b.hi is None else _call("maximum", a.hi, b.hi)
    a_empty = _call_cmp(_lo(a.lo), ast.GtE(), _hi(a.hi))
    b_empty = _call_cmp(_lo(b.lo), ast.GtE(), _hi(b.hi))
    # where one side is empty at run time, the hull is the other side
    return Interval(None if lo is None else _where(a_empty, _lo(b.lo), _where(b_empty, _lo(a.lo), lo)),
                    None if hi is None else _where(a_empty, _hi(b.hi), _where(b_empty, _hi(a.hi), hi)))


def union_within(a: Interval, b: Interval) -> Interval:
    """An interval inside a | b: their union where they overlap or touch, else the longer."""
    if _is_empty(a) or _is_empty(b):
        return b if _is_empty(a) else a
    if a == ALL or b == ALL:
        return ALL
    touch = _call_cmp(_call("maximum", _lo(a.lo), _lo(b.lo)), ast.LtE(), _call("minimum", _hi(a.hi), _hi(b.hi)))
    a_longer = _call_cmp(ast.BinOp(left=_hi(a.hi), op=ast.Sub(), right=_lo(a.lo)), ast.GtE(),
                         ast.BinOp(left=_hi(b.hi), op=ast.Sub(), right=_lo(b.lo)))
    lo = _where(touch, _call("minimum", _lo(a.lo), _lo(b.lo)), _where(a_longer, _lo(a.lo), _lo(b.lo)))
    hi = _where(touch, _call("maximum", _hi(a.hi), _hi(b.hi)), _where(a_longer, _hi(a.hi), _hi(b.hi)))
    return Interval(lo, hi)


def _call_cmp(a: ast.expr, op: ast.cmpop, b: ast.expr) -> ast.expr:
    return ast.Compare(left=a, ops=[op], comparators=[b])


def _when(cond: ast.expr) -> Interval:
    """Everything where a run-time condition holds, else nothing."""
    return Interval(_where(cond, _num(_NEG), _num(_POS)), _where(cond, _num(_POS), _num(_NEG)))


# --- expanding the body into one expression ------------------------------------------------------

def expand(stmts: list[ast.stmt], bound: dict[str, ast.expr], hooks: dict[str, tuple[tuple[str, ...], list[ast.stmt]]],
           static: Callable[[ast.expr], Any], inlining: tuple[str, ...] = ()) -> ast.expr:
    """The hook body as one expression: `bound` maps its argument names to expressions, each
    assignment is substituted into what follows, calls of other hooks are expanded, and
    `a if c else b` with c known at compile time is chosen."""
    env = dict(bound)
    for s in stmts[:-1]:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            env[s.targets[0].id] = _substitute(s.value, env, hooks, static, inlining)
        elif isinstance(s, ast.If):
            cond = static(_substitute(s.test, env, hooks, static, inlining))
            if cond is None:
                raise NotAnalyzable(s, "an 'if' in a mask needs a condition known at compile time")
            for sub in s.body if cond else s.orelse:
                if not (isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name)):
                    raise NotAnalyzable(sub, "a mask's body may only assign names and choose with compile-time 'if'")
                env[sub.targets[0].id] = _substitute(sub.value, env, hooks, static, inlining)
        elif not isinstance(s, ast.Pass):
            raise NotAnalyzable(s, "a mask's body may only assign names and choose with compile-time 'if'")
    return _substitute(stmts[-1].value, env, hooks, static, inlining)


def _substitute(e: ast.expr, env: dict[str, ast.expr], hooks, static, inlining) -> ast.expr:
    class Sub(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            return copy.deepcopy(env[node.id]) if node.id in env else node

        def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
            test = self.visit(node.test)
            cond = static(test)
            if cond is None:
                return ast.IfExp(test=test, body=self.visit(node.body), orelse=self.visit(node.orelse))
            return self.visit(node.body if cond else node.orelse)

        def visit_Call(self, node: ast.Call) -> ast.expr:
            if isinstance(node.func, ast.Name) and node.func.id in hooks and node.func.id not in env:
                name = node.func.id
                if name in inlining:
                    raise NotAnalyzable(node, f"hook {name} calls itself")
                args, body = hooks[name]
                if len(node.args) != len(args) or node.keywords:
                    raise NotAnalyzable(node, f"{name} takes {len(args)} arguments ({', '.join(args)})")
                values = {a: self.visit(v) for a, v in zip(args, node.args)}
                return expand(body, values, hooks, static, inlining + (name,))
            return self.generic_visit(node)

    return Sub().visit(copy.deepcopy(e))


# --- the analysis --------------------------------------------------------------------------------

def _names(e: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}


@dataclass(frozen=True)
class _Affine:
    """cx * x + rest, cx an integer and rest free of x (None for 0), rest monotone in y in the
    direction `mono`: 0 (free of y), +1 (non-decreasing) or -1 (non-increasing). y itself is
    non-decreasing in y, and so is a load from a sorted tensor at an index that is."""

    cx: int
    rest: ast.expr | None
    mono: int

    def scaled(self, k: int) -> _Affine:
        rest = (None if self.rest is None or k == 0 else self.rest if k == 1 else _neg(self.rest) if k == -1
                else ast.BinOp(left=_num(k), op=ast.Mult(), right=self.rest))
        return _Affine(self.cx * k, rest, 0 if k == 0 else self.mono * (1 if k > 0 else -1))

    def plus(self, o: _Affine, sign: int = 1) -> _Affine | None:
        mono = {self.mono, sign * o.mono} - {0}
        if len(mono) > 1:  # rising plus falling: no direction known
            return None
        if o.rest is None:
            rest = self.rest
        elif self.rest is None:
            rest = o.rest if sign > 0 else _neg(o.rest)
        else:
            rest = ast.BinOp(left=self.rest, op=ast.Add() if sign > 0 else ast.Sub(), right=o.rest)
        return _Affine(self.cx + sign * o.cx, rest, mono.pop() if mono else 0)


def _affine(e: ast.expr, static: Callable[[ast.expr], Any], ordered: frozenset[str]) -> _Affine | None:
    names = _names(e)
    if FREE not in names and FIXED not in names:
        return _Affine(0, e, 0)
    if isinstance(e, ast.Name):
        return _Affine(1, None, 0) if e.id == FREE else _Affine(0, e, 1)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        a = _affine(e.operand, static, ordered)
        return None if a is None else a.scaled(-1 if isinstance(e.op, ast.USub) else 1)
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)):
        a, b = _affine(e.left, static, ordered), _affine(e.right, static, ordered)
        return None if a is None or b is None else a.plus(b, 1 if isinstance(e.op, ast.Add) else -1)
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        for k_side, other in ((e.left, e.right), (e.right, e.left)):
            k = static(k_side) if not ({FREE, FIXED} & _names(k_side)) else None
            if isinstance(k, int) and not isinstance(k, bool):
                a = _affine(other, static, ordered)
                return None if a is None else a.scaled(k)
    if (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("maximum", "minimum")
            and len(e.args) == 2 and FREE not in names):
        parts = [_affine(a, static, ordered) for a in e.args]
        mono = {p.mono for p in parts if p is not None} - {0}
        if None not in parts and len(mono) <= 1:  # the max or min of two rising terms rises
            return _Affine(0, e, mono.pop() if mono else 0)
    sub = _sorted_load(e, ordered)
    if sub is not None and FREE not in names:
        *outer, last = sub
        inner = _affine(last, static, ordered)
        if inner is not None and inner.cx == 0 and not any({FREE, FIXED} & _names(o) for o in outer):
            return _Affine(0, e, inner.mono)  # the tensor rises along its last dim, as its index does
    return None


def _sorted_load(e: ast.expr, ordered: frozenset[str]) -> list[ast.expr] | None:
    """The indices of `load(t[...])` where t is non-decreasing along its last dim, else None."""
    if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "load" and len(e.args) == 1
            and isinstance(e.args[0], ast.Subscript) and isinstance(e.args[0].value, ast.Name)
            and e.args[0].value.id in ordered):
        return None
    index = e.args[0].slice
    return list(index.elts) if isinstance(index, ast.Tuple) else [index]


def _at(e: ast.expr, end: str) -> ast.expr:
    """e with the spanned index at one end of its span."""
    class At(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            return ast.Name(id=end, ctx=ast.Load()) if node.id == FIXED else node
    return At().visit(copy.deepcopy(e))


_FLIP = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}
_NEGATE = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


class _Analysis:
    def __init__(self, static: Callable[[ast.expr], Any], ordered: frozenset[str], segments: dict[str, tuple[str, tuple]]):
        self.static, self.ordered, self.segments = static, ordered, segments
        self.unknown = False  # a term that names x met no rule: its answer is (ALL, EMPTY)

    def _unknown(self) -> tuple[Interval, Interval]:
        self.unknown = True
        return ALL, EMPTY

    def spans(self, e: ast.expr, negate: bool = False) -> tuple[Interval, Interval]:
        """(possible, sure) for the boolean expression e (or for `not e`)."""
        if not ({FREE, FIXED} & _names(e)):
            value = self.static(e)
            if isinstance(value, bool):
                return (ALL, ALL) if value != negate else (EMPTY, EMPTY)
            cond = ast.UnaryOp(op=ast.Not(), operand=e) if negate else e
            both = _when(cond)
            return both, both
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            return self.spans(e.operand, not negate)
        if isinstance(e, ast.BoolOp):
            parts = [self.spans(v, negate) for v in e.values]
            conj = isinstance(e.op, ast.And) != negate
            poss, sure = parts[0]
            for p, s in parts[1:]:
                poss, sure = (conjoin(poss, p), conjoin(sure, s)) if conj else (hull(poss, p), union_within(sure, s))
            return poss, sure
        if isinstance(e, ast.Compare) and len(e.ops) == 1:
            op = type(e.ops[0])
            if negate:
                op = _NEGATE[op]
            return self.compare(e.left, op, e.comparators[0])
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "where" and len(e.args) == 3:
            c, a, b = e.args
            rewritten = ast.BoolOp(op=ast.Or(), values=[ast.BoolOp(op=ast.And(), values=[c, a]),
                                                         ast.BoolOp(op=ast.And(), values=[ast.UnaryOp(op=ast.Not(), operand=c), b])])
            return self.spans(rewritten, negate)
        return self._unknown()

    def compare(self, left: ast.expr, op: type, right: ast.expr) -> tuple[Interval, Interval]:
        if op is ast.Eq:
            same = self._same_segment(left, right)
            if same is not None:
                return same
        if op is ast.NotEq:  # x != g is x < g or x > g
            lt, gt = self.compare(left, ast.Lt, right), self.compare(left, ast.Gt, right)
            return hull(lt[0], gt[0]), union_within(lt[1], gt[1])
        a, b = _affine(left, self.static, self.ordered), _affine(right, self.static, self.ordered)
        d = None if a is None or b is None else a.plus(b, -1)  # cx x + rest(y)  op  0
        if d is None:
            return self._unknown()
        rest = d.rest if d.rest is not None else _num(0)
        if d.cx == 0:
            # a condition on y alone: true for some y of the span / for every y of it
            small, large = _at(rest, FIXED_LO), _at(rest, FIXED_HI)
            if d.mono < 0:
                small, large = large, small
            zero = _num(0)
            if op in (ast.Lt, ast.LtE):
                return _when(_call_cmp(small, op(), zero)), _when(_call_cmp(large, op(), zero))
            if op in (ast.Gt, ast.GtE):
                return _when(_call_cmp(large, op(), zero)), _when(_call_cmp(small, op(), zero))
            # == 0: possible where 0 lies between the ends, sure only where both are 0
            possible = ast.BoolOp(op=ast.And(), values=[_call_cmp(small, ast.LtE(), zero), _call_cmp(large, ast.GtE(), zero)])
            sure = ast.BoolOp(op=ast.And(), values=[_call_cmp(small, ast.Eq(), zero), _call_cmp(large, ast.Eq(), zero)])
            return _when(possible), _when(sure)
        if abs(d.cx) != 1:
            return self._unknown()
        # x op g(y): with cx = 1, g = -rest; with cx = -1, g = rest and op flips
        g, g_mono = (_neg(rest), -d.mono) if d.cx == 1 else (rest, d.mono)
        if d.cx == -1:
            op = _FLIP[op]
        g_min, g_max = _at(g, FIXED_LO), _at(g, FIXED_HI)
        if g_mono < 0:
            g_min, g_max = g_max, g_min
        if op is ast.LtE:
            return Interval(None, add(g_max, 1)), Interval(None, add(g_min, 1))
        if op is ast.Lt:
            return Interval(None, g_max), Interval(None, g_min)
        if op is ast.GtE:
            return Interval(g_min, None), Interval(g_max, None)
        if op is ast.Gt:
            return Interval(add(g_min, 1), None), Interval(add(g_max, 1), None)
        return Interval(g_min, add(g_max, 1)), Interval(g_max, add(g_min, 1))  # ==


    def _same_segment(self, left: ast.expr, right: ast.expr) -> tuple[Interval, Interval] | None:
        """`load(seg[o..., i(x)]) == load(ids[o..., j(y)])` (either way round) for tensors of
        segment ids, seg's runs starting at starts[o..., d] (ids the same tensor, or one of the
        same numbering: its starts declared with the same shape, as a varlen query's and key's
        cu_seqlens): where j is monotone in y, the span's ids lie in [d_lo, d_hi] (its ends'
        ids in `ids`), so i(x) lies in [starts[d_lo], starts[d_hi + 1]) where some y sees x, and
        in [starts[d_hi], starts[d_lo + 1]) where every y does (empty unless d_lo == d_hi).
        None where the terms are not of that form."""
        sides = [_segment_load(e, self.segments) for e in (left, right)]
        if None in sides or ast.dump(sides[0][1]) != ast.dump(sides[1][1]):
            return None
        if FREE in _names(sides[1][2]):
            sides.reverse()
        (tensor, outer, a), (y_tensor, _, b) = sides
        runs, y_runs = self.segments[tensor], self.segments[y_tensor]
        if runs[1] != y_runs[1]:  # ids of one numbering: their starts have the same declared shape
            return None
        if any({FREE, FIXED} & _names(o) for o in outer.elts):
            return None
        if FREE not in _names(a) or FIXED in _names(a) or FREE in _names(b):
            return None
        j = _affine(b, self.static, self.ordered)
        if j is None or j.cx != 0:
            return None
        j_lo, j_hi = _at(b, FIXED_LO), _at(b, FIXED_HI)
        if j.mono < 0:
            j_lo, j_hi = j_hi, j_lo

        def at(t: str, index: ast.expr) -> ast.expr:
            return _call("load", ast.Subscript(value=ast.Name(id=t, ctx=ast.Load()),
                                               slice=ast.Tuple(elts=[*copy.deepcopy(outer.elts), index], ctx=ast.Load())
                                               if outer.elts else index, ctx=ast.Load()))
        d_lo, d_hi = at(y_tensor, j_lo), at(y_tensor, j_hi)
        starts = runs[0]
        possible = _inverse(a, Interval(at(starts, d_lo), at(starts, add(d_hi, 1))), True, self.static, self.ordered)
        sure = _inverse(a, Interval(at(starts, copy.deepcopy(d_hi)), at(starts, add(copy.deepcopy(d_lo), 1))), False,
                        self.static, self.ordered)
        return None if possible is None or sure is None else (possible, sure)


def _segment_load(e: ast.expr, segments: dict) -> tuple[str, ast.Tuple, ast.expr] | None:
    """(tensor, its outer indices, its last index) of `load(t[...])` for a tensor of segment ids."""
    if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "load" and len(e.args) == 1
            and not e.keywords and isinstance(e.args[0], ast.Subscript) and isinstance(e.args[0].value, ast.Name)
            and e.args[0].value.id in segments):
        return None
    index = e.args[0].slice
    items = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    if any(isinstance(i, ast.Slice) for i in items):
        return None
    return e.args[0].value.id, ast.Tuple(elts=items[:-1], ctx=ast.Load()), items[-1]


def _inverse(e: ast.expr, target: Interval, possible: bool, static, ordered) -> Interval | None:
    """The x for which e(x) lies in target: a superset of them (possible) or a subset (not
    possible), for e = x + c (c free of x and y) under any maximum(., a) / minimum(., b) with a
    and b free of both; None for any other e."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("maximum", "minimum") and len(e.args) == 2:
        inner, edge = e.args if FREE in _names(e.args[0]) else e.args[::-1]
        if {FREE, FIXED} & _names(edge):
            return None
        lo, hi = _lo(target.lo), _hi(target.hi)
        if e.func.id == "maximum":  # max(inner, a) in [lo, hi): inner in it, or inner < a with a in it
            inner_target = (Interval(_where(_call_cmp(edge, ast.GtE(), lo), _num(_NEG), lo), hi) if possible
                            else Interval(_call("maximum", lo, edge), hi))
        else:  # min(inner, b) in [lo, hi): inner in it, or inner > b with b in it
            inner_target = (Interval(lo, _where(_call_cmp(edge, ast.Lt(), hi), _num(_POS), hi)) if possible
                            else Interval(lo, _call("minimum", hi, add(edge, 1))))
        return _inverse(inner, inner_target, possible, static, ordered)
    a = _affine(e, static, ordered)
    if a is None or a.cx != 1 or a.mono != 0:
        return None
    if a.rest is None:
        return target
    shift = lambda end: None if end is None else ast.BinOp(left=end, op=ast.Sub(), right=copy.deepcopy(a.rest))  # noqa: E731
    return Interval(shift(target.lo), shift(target.hi))


def visible(expr: ast.expr, static: Callable[[ast.expr], Any], ordered: frozenset[str] = frozenset(),
            segments: dict[str, tuple[str, tuple]] | None = None) -> tuple[Interval, Interval]:
    """(possible, sure) intervals of FREE for the expanded mask `expr`, whose spanned argument is
    the name FIXED (ranging over [FIXED_LO, FIXED_HI]); `ordered`: the tensors known to be
    non-decreasing along their last dim (their `domain` says sorted, offsets or segments);
    `segments`: each tensor of segment ids, as (the tensor of its runs' starts, that
    tensor's declared shape)."""
    return analyse(expr, static, ordered, segments)[:2]


def analyse(expr: ast.expr, static: Callable[[ast.expr], Any], ordered: frozenset[str] = frozenset(),
            segments: dict[str, tuple[str, tuple]] | None = None) -> tuple[Interval, Interval, bool]:
    """visible()'s intervals, and whether some term of the mask met no rule (so that the
    intervals may be far wider than the visible set: a block table computed at run time can
    do better, kgen/lang/phases.py block_table)."""
    a = _Analysis(static, ordered, dict(segments or {}))
    possible, sure = a.spans(expr)
    return possible, sure, a.unknown


def block_range(possible: Interval, sure: Interval, block: int, n: ast.expr, bounded: bool = True) -> dict[str, ast.expr]:
    """first, full_first, full_end, end: block indices over [0, cdiv(n, block)). Blocks outside
    [first, end) see nothing; blocks in [full_first, full_end) are visible whole and, `bounded`,
    lie below n (unbounded: the caller tests n itself, so the last partial block may be whole).
    A key is left out where the analysis shows the phase it bounds is empty when the spec is
    read (no whole blocks: no full_first; nothing before the whole blocks: full_first is first;
    nothing after them: full_end is end itself)."""
    n_blocks = _call("cdiv", n, _num(block))
    if _is_empty(possible):
        return {"first": _num(0), "end": _num(0)}
    first = _num(0) if possible.lo is None else _call(
        "minimum", ast.BinOp(left=_call("maximum", possible.lo, _num(0)), op=ast.FloorDiv(), right=_num(block)), n_blocks)
    end = n_blocks if possible.hi is None else _call(
        "maximum", _call("minimum", _call("cdiv", _call("maximum", possible.hi, _num(0)), _num(block)), n_blocks), first)
    out = {"first": first, "end": end}
    if _is_empty(sure):
        return out
    below_n = ast.BinOp(left=n, op=ast.FloorDiv(), right=_num(block))  # blocks that lie below n whole
    if sure.lo is not None:
        out["full_first"] = _call("minimum", _call("maximum", _call("cdiv", _call("maximum", sure.lo, _num(0)), _num(block)), first), end)
    if not bounded and sure.hi is None and possible.hi is None:
        out["full_end"] = end  # whole up to the last block: no masked phase after them
        return out
    if not bounded:
        below_n = n_blocks
    cap = below_n if sure.hi is None else _call(
        "minimum", ast.BinOp(left=_call("maximum", sure.hi, _num(0)), op=ast.FloorDiv(), right=_num(block)), below_n)
    out["full_end"] = _call("maximum", _call("minimum", cap, end), out.get("full_first", first))
    return out
