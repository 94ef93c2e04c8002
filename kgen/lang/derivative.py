"""The derivative of a hook with respect to one of its arguments, as another hook body: forward-mode
differentiation of the tile-language AST (docs/SPEC_LANGUAGE.md, "Hooks and extends").

`grad(score_mod, 0)` in a program is a hook whose body computes d score_mod / d args[0] at the
same arguments: each assignment `t = e` of the body gains `__d_t = D(e)`, and `return e` becomes
`return D(e)`. D follows the usual rules (the chain rule through the language's functions, the
quotient rule, where/maximum/minimum by branch); comparisons, integer division, floor, ceil,
loads and everything that does not depend on the argument have derivative 0, kept symbolic so
that the result carries no multiplications by 0 or 1. A call of another hook differentiates
through `grad(other, i)` for each argument that depends on ours. Anything else is an error
naming it.

`tensor_grads(hook, g)(args)` (load_derivative_bodies) differentiates the same way with respect
to one load of a tensor in the body: the loaded value becomes a local the derivative is seeded
at, and the body returns that derivative with the load's indices, for the caller to add g times
it into the tensor's gradient.
"""
from __future__ import annotations

import ast
import copy
import math
from typing import Callable

LN2 = math.log(2.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
# functions whose derivative is 0 everywhere it exists (piecewise constant) or that make no
# number from the argument (indices, sizes)
FLAT = ("floor", "ceil", "rand", "rand8", "cdiv", "program_id", "arange", "load", "zeros", "full", "block")


class NotDifferentiable(ValueError):
    def __init__(self, node: ast.AST, message: str):
        super().__init__(message)
        self.node = node


def derivative_body(stmts: list[ast.stmt], args: tuple[str, ...], wrt: int, hooks: set[str]) -> list[ast.stmt]:
    """The statements of d f / d args[wrt], f's body being `stmts` (its last a `return`); `hooks`:
    the names of the spec's hooks (their calls differentiate through `grad`)."""
    d = _Forward(args[wrt], hooks)
    out: list[ast.stmt] = []
    for s in stmts[:-1]:
        out += d.statement(s)
    ret = ast.Return(value=_zero_to_number(d.expr(stmts[-1].value)))
    return out + [ast.fix_missing_locations(ast.copy_location(ret, stmts[-1]))]


LOADED, INDEX = "__tg_load", "__tg_index"


def load_derivative_bodies(stmts: list[ast.stmt], wanted: Callable[[str], bool],
                           hooks: set[str]) -> list[tuple[str, list[ast.stmt]]]:
    """For each load in `stmts` (a hook's body, its last a `return`) of a tensor T that
    `wanted(T)`, in source order: (T, statements returning `(d f / d load, index_0, ...)`), the
    load's indices evaluated where the load is. A load the result does not depend on (one
    under a comparison) is left out."""
    sites = [n for n in _walk(stmts) if wanted_load(n, wanted)]
    out = []
    for k, site in enumerate(sites):
        body = copy.deepcopy(stmts)
        mine = [n for n in _walk(body) if wanted_load(n, wanted)][k]
        ref = mine.args[0]
        items = ref.slice.elts if isinstance(ref.slice, ast.Tuple) else [ref.slice]
        if any(isinstance(i, ast.Slice) for i in items):
            raise NotDifferentiable(site, f"cannot differentiate with respect to '{ast.unparse(site)}': a load that "
                                          "takes a gradient is indexed element by element, without ':'")
        names = [f"{INDEX}{j}" for j in range(len(items))]
        before = [ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store())], value=i) for n, i in zip(names, items)]
        indexed = ast.Subscript(value=ref.value, slice=ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Load()) for n in names],
                                                                  ctx=ast.Load()), ctx=ast.Load())
        before.append(ast.Assign(targets=[ast.Name(id=LOADED, ctx=ast.Store())],
                                 value=ast.Call(func=mine.func, args=[indexed], keywords=mine.keywords)))
        for b in before:
            ast.copy_location(b, mine)
        if not _replace(body, mine, before):
            continue
        d = _Forward(LOADED, hooks, seeded=True)
        lowered = []
        try:
            for s in body[:-1]:
                lowered += d.statement(s)
            grad = d.expr(body[-1].value)
        except NotDifferentiable as e:  # named as written, not by the local it became
            raise NotDifferentiable(e.node, str(e).replace(LOADED, ast.unparse(site))) from None
        if grad is None:
            continue
        ret = ast.Return(value=ast.Tuple(elts=[grad] + [ast.Name(id=n, ctx=ast.Load()) for n in names], ctx=ast.Load()))
        out.append((ref.value.id, lowered + [ast.fix_missing_locations(ast.copy_location(ret, body[-1]))]))
    return out


def wanted_load(n: ast.AST, wanted: Callable[[str], bool]) -> bool:
    """Whether `n` is `load(T[...])` of a tensor T that `wanted(T)`."""
    return (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "load" and len(n.args) == 1
            and isinstance(n.args[0], ast.Subscript) and isinstance(n.args[0].value, ast.Name) and wanted(n.args[0].value.id))


def _walk(stmts: list[ast.stmt]) -> list[ast.AST]:
    return [n for s in stmts for n in ast.walk(s)]


def _replace(stmts: list[ast.stmt], site: ast.Call, before: list[ast.stmt]) -> bool:
    """`site` replaced by the loaded local, `before` inserted ahead of the innermost statement
    that holds it (inside a compile-time if's branch where it is there)."""
    for i, s in enumerate(stmts):
        if isinstance(s, ast.If) and (_replace(s.body, site, before) or _replace(s.orelse, site, before)):
            return True
        if any(n is site for n in ast.walk(s)):
            _Substitute(site).visit(s)
            stmts[i:i] = before
            return True
    return False


class _Substitute(ast.NodeTransformer):
    def __init__(self, site: ast.AST):
        self.site = site

    def visit(self, node: ast.AST) -> ast.AST:
        if node is self.site:
            return ast.copy_location(ast.Name(id=LOADED, ctx=ast.Load()), node)
        return super().visit(node)


def _num(v: float) -> ast.expr:
    return ast.Constant(value=v)


def _zero_to_number(e: ast.expr | None) -> ast.expr:
    return _num(0.0) if e is None else e


def _add(a: ast.expr | None, b: ast.expr | None) -> ast.expr | None:
    if a is None:
        return b
    if b is None:
        return a
    return ast.BinOp(left=a, op=ast.Add(), right=b)


def _sub(a: ast.expr | None, b: ast.expr | None) -> ast.expr | None:
    if b is None:
        return a
    if a is None:
        return ast.UnaryOp(op=ast.USub(), operand=b)
    return ast.BinOp(left=a, op=ast.Sub(), right=b)


def _mul(a: ast.expr | None, b: ast.expr | None) -> ast.expr | None:
    """a * b where either may be the symbolic 0 (None) or the number 1."""
    if a is None or b is None:
        return None
    if isinstance(a, ast.Constant) and a.value == 1.0:
        return b
    if isinstance(b, ast.Constant) and b.value == 1.0:
        return a
    return ast.BinOp(left=a, op=ast.Mult(), right=b)


def _call(fn: str, *args: ast.expr) -> ast.expr:
    return ast.Call(func=ast.Name(id=fn, ctx=ast.Load()), args=list(args), keywords=[])


class _Forward:
    def __init__(self, wrt: str, hooks: set[str], seeded: bool = False):
        """seeded: `wrt` is a local whose assignment the derivative starts at (a loaded value)."""
        self.wrt, self.hooks, self.seeded = wrt, hooks, seeded
        self.tangent: dict[str, str | None] = {}  # assigned name -> its derivative's name (None: 0)

    def statement(self, s: ast.stmt) -> list[ast.stmt]:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            name = s.targets[0].id
            d = _num(1.0) if self.seeded and name == self.wrt else self.expr(s.value)
            if d is None:
                self.tangent[name] = None
                return [s]
            self.tangent[name] = f"__d_{name}"
            da = ast.Assign(targets=[ast.Name(id=f"__d_{name}", ctx=ast.Store())], value=d)
            return [s, ast.copy_location(da, s)]
        if isinstance(s, ast.If):  # compile-time: both branches, each differentiated
            return [ast.copy_location(ast.If(test=s.test, body=self.block(s.body), orelse=self.block(s.orelse)), s)]
        if isinstance(s, ast.Pass):
            return [s]
        raise NotDifferentiable(s, f"a hook with '{type(s).__name__}' statements cannot be differentiated; "
                                   "use assignments and compile-time if")

    def block(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out = [x for s in stmts for x in self.statement(s)]
        return out or [ast.Pass()]

    def expr(self, e: ast.expr) -> ast.expr | None:
        """d e / d wrt, None where it is 0."""
        if isinstance(e, ast.Constant):
            return None
        if isinstance(e, ast.Name):
            if e.id in self.tangent:  # assigned in the body (the argument itself, reassigned, too)
                t = self.tangent[e.id]
                return ast.Name(id=t, ctx=ast.Load()) if t else None
            return _num(1.0) if e.id == self.wrt else None
        if isinstance(e, ast.BinOp):
            return self.binop(e)
        if isinstance(e, ast.UnaryOp):
            if isinstance(e.op, ast.USub):
                d = self.expr(e.operand)
                return None if d is None else ast.UnaryOp(op=ast.USub(), operand=d)
            if isinstance(e.op, ast.UAdd):
                return self.expr(e.operand)
            return None  # not
        if isinstance(e, (ast.Compare, ast.BoolOp)):
            return None
        if isinstance(e, ast.IfExp):  # a compile-time choice
            a, b = self.expr(e.body), self.expr(e.orelse)
            return None if a is None and b is None else ast.IfExp(test=e.test, body=_zero_to_number(a), orelse=_zero_to_number(b))
        if isinstance(e, ast.Subscript):  # x[:, None]: the derivative indexed alike
            d = self.expr(e.value)
            return None if d is None else ast.Subscript(value=d, slice=e.slice, ctx=ast.Load())
        if isinstance(e, ast.Attribute):  # x.T; x.shape is a number
            d = self.expr(e.value) if e.attr == "T" else None
            return None if d is None else ast.Attribute(value=d, attr=e.attr, ctx=ast.Load())
        if isinstance(e, ast.Call):
            return self.call(e)
        raise NotDifferentiable(e, f"cannot differentiate '{ast.unparse(e)}'")

    def binop(self, e: ast.BinOp) -> ast.expr | None:
        a, b = e.left, e.right
        da, db = self.expr(a), self.expr(b)
        if isinstance(e.op, ast.Add):
            return _add(da, db)
        if isinstance(e.op, ast.Sub):
            return _sub(da, db)
        if isinstance(e.op, ast.Mult):
            return _add(_mul(da, b), _mul(a, db))
        if isinstance(e.op, ast.Div):
            first = None if da is None else ast.BinOp(left=da, op=ast.Div(), right=b)
            if db is None:
                return first
            second = ast.BinOp(left=_mul(e, db), op=ast.Div(), right=b)  # (a / b) * db / b
            return _sub(first, second)
        if isinstance(e.op, (ast.FloorDiv, ast.Mod)):
            return None
        if isinstance(e.op, ast.Pow):
            if db is not None:
                raise NotDifferentiable(e, f"cannot differentiate '{ast.unparse(e)}': an exponent that depends on the "
                                           "argument (write exp2(y * log2(x)))")
            if da is None:
                return None
            lower = ast.BinOp(left=a, op=ast.Pow(), right=ast.BinOp(left=b, op=ast.Sub(), right=_num(1.0)))
            return _mul(_mul(b, lower), da)
        raise NotDifferentiable(e, f"cannot differentiate '{ast.unparse(e)}'")

    def call(self, e: ast.Call) -> ast.expr | None:
        if isinstance(e.func, ast.Attribute) and e.func.attr == "to":  # x.to(dtype)
            d = self.expr(e.func.value)
            return None if d is None else ast.Call(func=ast.Attribute(value=d, attr="to", ctx=ast.Load()),
                                                   args=e.args, keywords=[])
        if not isinstance(e.func, ast.Name):
            raise NotDifferentiable(e, f"cannot differentiate '{ast.unparse(e)}'")
        fn, args = e.func.id, e.args
        if fn in FLAT:
            return None
        if fn in self.hooks:  # the chain rule through another hook
            out = None
            for i, a in enumerate(args):
                da = self.expr(a)
                if da is not None:
                    inner = ast.Call(func=_call("grad", ast.Name(id=fn, ctx=ast.Load()), _num(i)), args=args, keywords=[])
                    out = _add(out, _mul(inner, da))
            return out
        if fn == "where":
            c, a, b = args
            da, db = self.expr(a), self.expr(b)
            return None if da is None and db is None else _call("where", c, _zero_to_number(da), _zero_to_number(db))
        if fn in ("maximum", "minimum"):
            a, b = args
            da, db = self.expr(a), self.expr(b)
            if da is None and db is None:
                return None
            pick = ast.Compare(left=a, ops=[ast.GtE() if fn == "maximum" else ast.LtE()], comparators=[b])
            return _call("where", pick, _zero_to_number(da), _zero_to_number(db))
        rule = UNARY_RULES.get(fn)
        if rule is None or len(args) != 1:
            raise NotDifferentiable(e, f"cannot differentiate '{fn}' (in '{ast.unparse(e)}')")
        d = self.expr(args[0])
        return None if d is None else _mul(rule(args[0], e), d)


def _b(left: ast.expr, op: ast.operator, right: ast.expr) -> ast.expr:
    return ast.BinOp(left=left, op=op, right=right)


# f -> f'(x) as an expression of x (and of the call f(x) itself, `y`)
UNARY_RULES: dict[str, Callable[[ast.expr, ast.expr], ast.expr]] = {
    "exp": lambda x, y: y,
    "exp2": lambda x, y: _b(y, ast.Mult(), _num(LN2)),
    "log": lambda x, y: _b(_num(1.0), ast.Div(), x),
    "log2": lambda x, y: _b(_num(1.0 / LN2), ast.Div(), x),
    "sqrt": lambda x, y: _b(_num(0.5), ast.Div(), y),
    "rsqrt": lambda x, y: _b(_b(_num(-0.5), ast.Mult(), y), ast.Div(), x),
    "tanh": lambda x, y: _b(_num(1.0), ast.Sub(), _b(y, ast.Mult(), y)),
    "sigmoid": lambda x, y: _b(y, ast.Mult(), _b(_num(1.0), ast.Sub(), y)),
    "erf": lambda x, y: _b(_num(TWO_OVER_SQRT_PI), ast.Mult(), _call("exp", _b(_b(_num(0.0), ast.Sub(), x), ast.Mult(), x))),
    "sin": lambda x, y: _call("cos", x),
    "cos": lambda x, y: ast.UnaryOp(op=ast.USub(), operand=_call("sin", x)),
    "abs": lambda x, y: _call("where", ast.Compare(left=x, ops=[ast.GtE()], comparators=[_num(0.0)]), _num(1.0), _num(-1.0)),
}
