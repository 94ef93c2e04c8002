"""The tile language's questions about a hook, answered when the spec is read: `is_identity`
(does it return an argument unchanged) and `block_phases` (which blocks of an index a mask lets
the other index's span see, by kgen/lang/mask_bounds.py). Called by the parser with itself."""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from . import mask_bounds
from .hooks import Hook, hook_body as _hook_body

if TYPE_CHECKING:  # the parser hands itself in; only its type is named here
    from .parse import _Parser


def _hook_call(p: _Parser, node: ast.AST, what: str) -> tuple[str, Hook]:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in p.hooks):
        raise p.fail(node, f"{what} takes a call of one of the spec's hooks ({', '.join(p.hooks) or 'none'})")
    return node.func.id, p.hooks[node.func.id]


def _expanded(p: _Parser, name: str, hook: Hook, bound: dict[str, ast.expr]) -> ast.expr:
    hooks = {n: (h.args, _hook_body(n, h)) for n, h in p.hooks.items()}
    saved = p.origin
    p.origin = hook.origin
    try:
        return mask_bounds.expand(_hook_body(name, hook), bound, hooks, p.static, (name,))
    except mask_bounds.NotAnalyzable as e:
        raise p.fail(e.node, f"{name}: {e}") from None
    finally:
        p.origin = saved


def is_identity(p: _Parser, node: ast.Call) -> bool:
    """`is_identity(hook, i)`: whether the hook returns its argument i unchanged (known when
    the spec is read), so that a base can keep a cheaper form for the trivial hook."""
    if node.keywords or len(node.args) != 2 or not isinstance(node.args[1], ast.Constant):
        raise p.fail(node, "is_identity() takes a hook and the index or name of one of its arguments: "
                              "is_identity(score_mod, 0)")
    if not (isinstance(node.args[0], ast.Name) and node.args[0].id in p.hooks):
        raise p.fail(node.args[0], f"is_identity() takes a hook of the spec ({', '.join(p.hooks) or 'none'})")
    name, which = node.args[0].id, node.args[1].value
    hook = p.hooks[name]
    wrt = hook.args.index(which) if which in hook.args else which
    if isinstance(wrt, bool) or not isinstance(wrt, int) or not 0 <= wrt < len(hook.args):
        raise p.fail(node, f"is_identity({name}, {which!r}): {name} takes ({', '.join(hook.args)})")
    marks = {a: ast.Name(id=f"__arg{i}", ctx=ast.Load()) for i, a in enumerate(hook.args)}
    body = _expanded(p, name, hook, marks)
    return isinstance(body, ast.Name) and body.id == f"__arg{wrt}"


def block_phases(p: _Parser, node: ast.Call) -> tuple:
    """`block_phases(mask(args with one span(lo, hi) and one ...), BLOCK, N, whole=True, bounded=True)`:
    the blocks of [0, N) that the `...` argument of the mask hook can see while the spanned
    argument runs over [lo, hi], as phases (masked, start, stop) to loop over in order:
    blocks visible whole and below N in an unmasked phase, the others that may see something
    in masked phases before and after it (kgen/lang/mask_bounds.py). A mask that is true
    everywhere gives one masked phase over every block (only N masks); whole=False merges
    the phases into one masked phase; bounded=False lets a whole block pass N (for a program
    that tests N in every phase itself)."""
    usage = "block_phases(mask(..., span(lo, hi), ...), BLOCK, N[, whole=False][, bounded=False])"
    if len(node.args) != 3 or any(k.arg not in ("whole", "bounded") for k in node.keywords):
        raise p.fail(node, f"block_phases() is written {usage}")
    name, hook = _hook_call(p, node.args[0], "block_phases()")
    call = node.args[0]
    if len(call.args) != len(hook.args) or call.keywords:
        raise p.fail(call, f"{name} takes {len(hook.args)} arguments ({', '.join(hook.args)}), got {len(call.args)}")
    free = [i for i, a in enumerate(call.args) if isinstance(a, ast.Constant) and a.value is Ellipsis]
    spans = [i for i, a in enumerate(call.args) if isinstance(a, ast.Call) and isinstance(a.func, ast.Name) and a.func.id == "span"]
    if len(free) != 1 or len(spans) != 1:
        raise p.fail(call, f"block_phases(): give {name} one argument '...' (the index whose blocks are asked "
                              "for) and one span(lo, hi) (the range of the other index, both ends included)")
    span = call.args[spans[0]]
    if len(span.args) != 2 or span.keywords:
        raise p.fail(span, "span(lo, hi) takes the first and last value of the range")
    block = _static(p, node.args[1], "block_phases()'s block size")
    flags = {k.arg: p.static(k.value) for k in node.keywords}
    whole, bounded = flags.get("whole", True), flags.get("bounded", True)
    if not isinstance(whole, bool) or not isinstance(bounded, bool):
        raise p.fail(node, "block_phases(..., whole=, bounded=) take bools known at compile time")
    env = {mask_bounds.FIXED_LO: p.expr(span.args[0]), mask_bounds.FIXED_HI: p.expr(span.args[1])}
    bound: dict[str, ast.expr] = {}
    for i, (a, arg) in enumerate(zip(hook.args, call.args)):
        mark = mask_bounds.FREE if i == free[0] else mask_bounds.FIXED if i == spans[0] else f"__arg{i}"
        bound[a] = ast.Name(id=mark, ctx=ast.Load())
        if i not in (free[0], spans[0]):
            env[mark] = p.expr(arg)
    saved = (p.env, p.origin)
    p.env = {**p.globals, **env}
    try:
        expanded = _expanded(p, name, hook, bound)
        p.origin = hook.origin
        ordered = frozenset(n for n, t in p.tensors.items() if t.ordered)
        possible, sure = mask_bounds.visible(expanded, p.static, ordered)
        p.env, p.origin = {**p.globals, **env}, saved[1]
        p.env["__n"] = p.expr(node.args[2])
        ends = mask_bounds.block_range(possible, sure, block, ast.Name(id="__n", ctx=ast.Load()), bounded)
        p.at(node)
        v = {k: p.expr(_placed(e, node)) for k, e in ends.items() if k != "full_end" or e is not ends["end"]}
        if "full_end" in ends and ends["full_end"] is ends["end"]:
            v["full_end"] = v["end"]  # the same value: no phase after the whole blocks
    finally:
        p.env, p.origin = saved
    if possible == mask_bounds.ALL and sure == mask_bounds.ALL or not whole or "full_end" not in v:
        return ((True, v["first"], v["end"]),)
    phases = [] if "full_first" not in v else [(True, v["first"], v["full_first"])]
    start = v.get("full_first", v["first"])
    after = [] if v["full_end"] is v["end"] else [(True, v["full_end"], v["end"])]
    return tuple(phases + [(False, start, v["full_end"])] + after)


def _placed(e: ast.expr, node: ast.AST) -> ast.expr:
    """e with every node at `node`'s place: bounds derived from a hook are computed where the
    program asks for them."""
    for sub in ast.walk(e):
        ast.copy_location(sub, node)
    return e


def _static(p: "_Parser", node: ast.expr, what: str) -> int:
    value = p.static(node)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise p.fail(node, f"{what} must be a positive integer known at compile time")
    return value


