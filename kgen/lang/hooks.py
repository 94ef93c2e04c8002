"""A spec's hooks as the parser holds them (docs/SPEC_LANGUAGE.md, "Hooks and extends"): where a
program's text starts, a hook's arguments and body, and the body as statements."""
from __future__ import annotations

import ast
from dataclasses import dataclass

from ..errors import SourceLoc, SpecError


@dataclass(frozen=True)
class Origin:
    """Where the program text starts in the spec file, to turn ast positions into file:line:col."""

    file: str
    line: int
    col: int


@dataclass(frozen=True)
class Hook:
    """A spec's hook (docs/SPEC_LANGUAGE.md, "Hooks and extends"): inlined at each call, its body
    seeing its arguments and the program's constants, sizes, scalars and tensors, never the
    caller's other names."""

    args: tuple[str, ...]
    body: str
    origin: Origin


def hook_body(name: str, hook: Hook) -> list[ast.stmt]:
    """A hook's statements, the last a `return`: an expression body becomes `return <it>`."""
    def at(line: int, col: int) -> SourceLoc:
        return SourceLoc(hook.origin.file, hook.origin.line + line - 1, hook.origin.col + col)
    try:
        expr = ast.parse(hook.body.strip(), mode="eval")
        ret = ast.Return(value=expr.body)
        ast.copy_location(ret, expr.body)
        return [ret]
    except SyntaxError:
        pass
    try:
        stmts = ast.parse(hook.body).body
    except SyntaxError as e:
        raise SpecError(f"hook {name}: {e.msg}", at(e.lineno or 1, e.offset or 1)) from None
    if not stmts or not isinstance(stmts[-1], ast.Return) or stmts[-1].value is None:
        last = stmts[-1] if stmts else None
        raise SpecError(f"hook {name}: a body of statements ends with `return <expression>`",
                        at(getattr(last, "lineno", 1), getattr(last, "col_offset", 0) + 1))
    for s in stmts[:-1]:
        for sub in ast.walk(s):
            if isinstance(sub, ast.Return):
                raise SpecError(f"hook {name}: `return` only as the body's last statement", at(sub.lineno, sub.col_offset + 1))
    return stmts
