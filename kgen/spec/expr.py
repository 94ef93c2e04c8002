"""Size expressions of a spec (grids, constraints): parsed with `ast`, evaluated on integers."""
from __future__ import annotations

import ast
import operator
from functools import lru_cache
from typing import Any

from ..errors import SpecError

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.Pow: operator.pow}
_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne}
_FN = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}


@lru_cache(maxsize=512)
def compile_expr(text: str) -> ast.expr:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise SpecError(f"'{text}' is not an expression: {e.msg}") from None


def eval_expr(text: str | int, env: dict[str, Any]) -> Any:
    """Evaluate an integer expression over `env` (sizes, variant values, tunables)."""
    if isinstance(text, int):
        return text
    return _eval(compile_expr(text), env, text)


def names_in(text: str | int) -> set[str]:
    if isinstance(text, int):
        return set()
    return {n.id for n in ast.walk(compile_expr(text)) if isinstance(n, ast.Name)} - set(_FN)


def _eval(node: ast.expr, env: dict[str, Any], text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise SpecError(f"'{text}' uses '{node.id}', which is not a size, variant axis or tunable")
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        return _BIN[type(node.op)](_eval(node.left, env, text), _eval(node.right, env, text))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env, text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _eval(node.operand, env, text)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        return _CMP[type(node.ops[0])](_eval(node.left, env, text), _eval(node.comparators[0], env, text))
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, env, text) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FN and not node.keywords:
        return _FN[node.func.id](*(_eval(a, env, text) for a in node.args))
    raise SpecError(f"'{text}': only integers, names, + - * // % **, comparisons, and/or/not, cdiv, min and max are allowed")
