"""Size expressions of a spec (grids, constraints): parsed with `ast`, evaluated on integers.

A preference (`prefer:`) may also ask two questions of a hook, answered from the hooks eval_expr
is given:
  is_identity(hook, i)   whether the hook's body, as written, is its argument i (the tile
                         language's question of the same name, answered without expanding other
                         hooks or compile-time choices, so a body that only reaches its argument
                         through them reads as not the identity);
  transcendentals(hook)  how many calls of the functions in TRANSCENDENTAL its body makes, with
                         those of the other hooks it calls, each call once as written: the work a
                         form that evaluates the hook twice (fa2_bwd's recomputed dq) repeats on
                         the special-function units."""
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


def pow2(n: int) -> int:
    """The smallest power of two at least n (1 for n <= 1): the tile that holds n."""
    return 1 << max(0, int(n) - 1).bit_length()


_FN = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max, "pow2": pow2}
# what the hook questions ask about: each hook's name -> (its arguments, its body)
Hooks = dict[str, tuple[list[str], str]]
# The tile language's functions that run on the special-function units, not the FMA pipes:
# NVIDIA's MUFU (ex2, lg2, rsqrt, sqrt, sin, cos, tanh: 16 results a clock a multiprocessor on
# sm_90 against 128 fp32 multiply-adds; CUDA C++ Programming Guide, "Arithmetic Instructions")
# and CDNA3's transcendental VALU instructions (v_exp_f32, v_log_f32, v_rsq_f32, v_sqrt_f32,
# v_sin_f32, v_cos_f32; AMD Instinct MI300 ISA, "Vector ALU Operations"). sigmoid, tanh and erf
# count once each, though their expansions may take more than one.
TRANSCENDENTAL = frozenset({"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "sin", "cos"})
# the questions a preference may ask of a hook, and the arguments each takes after it
HOOK_QUESTIONS = {"is_identity": 1, "transcendentals": 0}


def _hook_is_identity(hooks: Hooks, name: str, which: int | str) -> bool:
    args, body = hooks[name]
    arg = args[which] if isinstance(which, int) else which
    try:
        tree = ast.parse(body.strip(), mode="eval").body
    except SyntaxError:  # a body of statements: not the bare argument
        return False
    return isinstance(tree, ast.Name) and tree.id == arg


def _hook_transcendentals(hooks: Hooks, name: str, seen: frozenset[str] = frozenset()) -> int:
    try:
        tree = ast.parse(hooks[name][1].strip())
    except SyntaxError:  # the loader parses every body: only a text never loaded gets here
        return 0
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn = node.func.id
            if fn in TRANSCENDENTAL:
                count += 1
            elif fn in hooks and fn != name and fn not in seen:
                count += _hook_transcendentals(hooks, fn, seen | {name})
    return count


@lru_cache(maxsize=512)
def compile_expr(text: str) -> ast.expr:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise SpecError(f"'{text}' is not an expression ({e.msg}); write one like cdiv(M, BLOCK_M)") from None


def eval_expr(text: str | int, env: dict[str, Any], hooks: Hooks | None = None) -> Any:
    """Evaluate an integer expression over `env` (sizes, variant values, tunables), asking the
    hook questions of `hooks`."""
    if isinstance(text, int):
        return text
    return _eval(compile_expr(text), env, text, hooks)


@lru_cache(maxsize=512)
def names_in(text: str | int) -> frozenset[str]:
    """The names an expression uses (cached: ops ask at every call)."""
    if isinstance(text, int):
        return frozenset()
    tree = compile_expr(text)
    hooks = {id(c.args[0]) for c in ast.walk(tree) if _hook_question(c) and c.args}
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in hooks) - set(_FN)


def _hook_question(node: ast.AST) -> str | None:
    """The hook question (HOOK_QUESTIONS) `node` calls, if it calls one."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in HOOK_QUESTIONS:
        return node.func.id
    return None


def check_expr(text: str | int, known: list[str], hooks: dict[str, list[str]] | None = None) -> None:
    """Raise SpecError unless `text` is an expression that eval_expr can evaluate over the names
    `known` (and, where `hooks` is given, asks the hook questions of them): checked when a spec is
    loaded, so a typo in a grid is not found at the first call."""
    if not isinstance(text, int):
        _check(compile_expr(text), known, text, hooks)


# the arity of each function, as (fewest, most) arguments
_FN_ARITY = {"cdiv": (2, 2), "min": (2, None), "max": (2, None), "pow2": (1, 1)}


def _check_hook_question(node: ast.Call, text: str, hooks: dict[str, list[str]] | None) -> None:
    question = node.func.id  # type: ignore[attr-defined]
    if hooks is None:
        raise SpecError(f"'{text}': {question}() is asked only in prefer:, where the spec's hooks are known")
    takes_arg = HOOK_QUESTIONS[question]
    if (node.keywords or len(node.args) != 1 + takes_arg or not isinstance(node.args[0], ast.Name)
            or (takes_arg and not isinstance(node.args[1], ast.Constant))):
        usage = ("a hook and the index or name of one of its arguments, as is_identity(score_mod, 0)" if takes_arg
                 else f"one hook, as {question}(score_mod)")
        raise SpecError(f"'{text}': {question}() takes {usage}")
    name = node.args[0].id
    if name not in hooks:
        raise SpecError(f"'{text}': '{name}' is not a hook of the spec; hooks: {', '.join(hooks) or 'none'}")
    if not takes_arg:
        return
    which = node.args[1].value  # type: ignore[attr-defined]
    args = hooks[name]
    if not (which in args or (isinstance(which, int) and not isinstance(which, bool) and 0 <= which < len(args))):
        raise SpecError(f"'{text}': {name} takes ({', '.join(args)}); name one of them or its index")


def _check(node: ast.expr, known: list[str], text: str, hooks: dict[str, list[str]] | None = None) -> None:
    if _hook_question(node):
        _check_hook_question(node, text, hooks)
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
        return
    if isinstance(node, ast.Name):
        if node.id not in known:
            raise SpecError(f"'{text}' uses '{node.id}', which is not a size, tunable or integer variant axis; "
                            f"accepted: {', '.join(known) or 'none'}")
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fn = node.func.id
        if fn not in _FN:
            raise SpecError(f"'{text}' calls '{fn}', which is not a function of size expressions; accepted: {', '.join(_FN)}")
        lo, hi = _FN_ARITY[fn]
        if len(node.args) < lo or (hi is not None and len(node.args) > hi):
            want = f"{lo}" if lo == hi else f"at least {lo}"
            raise SpecError(f"'{text}': {fn}() takes {want} arguments, got {len(node.args)}")
        children = node.args
    elif isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        children = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        children = [node.operand]
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        children = [node.left, node.comparators[0]]
    elif isinstance(node, ast.BoolOp):
        children = node.values
    else:
        raise SpecError(_ONLY.format(text=text))
    for child in children:
        _check(child, known, text, hooks)


def _eval(node: ast.expr, env: dict[str, Any], text: str, hooks: Hooks | None = None) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise SpecError(f"'{text}' uses '{node.id}', which is not a size, variant axis or tunable")
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        return _BIN[type(node.op)](_eval(node.left, env, text, hooks), _eval(node.right, env, text, hooks))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env, text, hooks)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _eval(node.operand, env, text, hooks)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        return _CMP[type(node.ops[0])](_eval(node.left, env, text, hooks), _eval(node.comparators[0], env, text, hooks))
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, env, text, hooks) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    question = _hook_question(node)
    if question == "is_identity" and hooks is not None:
        return _hook_is_identity(hooks, node.args[0].id, node.args[1].value)  # type: ignore[attr-defined]
    if question == "transcendentals" and hooks is not None:
        return _hook_transcendentals(hooks, node.args[0].id)  # type: ignore[attr-defined]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FN and not node.keywords:
        return _FN[node.func.id](*(_eval(a, env, text, hooks) for a in node.args))
    raise SpecError(_ONLY.format(text=text))


_ONLY = ("'{text}' is not a size expression; accepted: integers, names, + - * // % **, comparisons, "
         "and/or/not, cdiv, min, max and pow2")
