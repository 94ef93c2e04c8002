"""A spec's hooks as PyTorch functions, for its `reference:` code (kgen.check.reference): the
same body text, read with torch's meaning of the tile language's functions.

A hook body is Python syntax over tiles (docs/SPEC_LANGUAGE.md, "Hooks and extends"); on torch
tensors `and`, `or` and `not` are the elementwise &, | and ~ the tile language means, `load(t[i])`
is `t[i]` (the reference holds whole tensors, so an index tensor gathers), each function is its
torch namesake, a hook returns a tensor even where its body is a constant, and `grad(hook, i)` is
torch.autograd's derivative.
"""
from __future__ import annotations

import ast
import math
from typing import Any, Callable

import torch

from ..ir import philox
from ..spec.model import Spec


def _t(x: Any) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (bool, int)):  # an int stays one: hook results index tensors (a document's start)
        return torch.tensor(x)
    return torch.tensor(x, dtype=torch.float64)


def _unary(fn: Callable) -> Callable:
    return lambda x: fn(_t(x))


LANGUAGE = {
    "load": lambda x: x, "where": lambda c, a, b: torch.where(_t(c).bool(), _t(a), _t(b)),
    "maximum": lambda a, b: torch.maximum(_t(a), _t(b)), "minimum": lambda a, b: torch.minimum(_t(a), _t(b)),
    "cdiv": lambda a, b: -(-a // b), "rsqrt": _unary(torch.rsqrt), "abs": _unary(torch.abs),
    **{fn: _unary(getattr(torch, fn)) for fn in ("exp", "exp2", "log", "log2", "sqrt", "sigmoid", "tanh", "erf", "sin",
                                                  "cos", "floor", "ceil")},
    "rand": lambda seed, offset: philox.rand(seed, offset),
    "rand8": lambda seed, offset: philox.rand8(seed, offset),
    "grad": lambda fn, wrt: grad(fn, wrt),
    "inf": math.inf, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int32": torch.int32, "int64": torch.int64,
}


class _Elementwise(ast.NodeTransformer):
    """`a and b` -> `a & b`, `a or b` -> `a | b`, `not a` -> `~a`, as the tile language means them."""

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        op = ast.BitAnd() if isinstance(node.op, ast.And) else ast.BitOr()
        out = node.values[0]
        for v in node.values[1:]:
            out = ast.copy_location(ast.BinOp(left=out, op=op, right=v), node)
        return out

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(ast.UnaryOp(op=ast.Invert(), operand=node.operand), node)
        return node


def torch_hooks(spec: Spec, namespace: dict[str, Any]) -> dict[str, Callable]:
    """Each hook of `spec` as a function over torch tensors and numbers; its body sees
    `namespace` (the reference's sizes, scalars, tensors and variant values) and LANGUAGE."""
    scope = {**LANGUAGE, **namespace}
    out: dict[str, Callable] = {}
    for name, hook in spec.hooks.items():
        try:
            body = [ast.Return(value=ast.parse(hook.body.strip(), mode="eval").body)]
        except SyntaxError:
            body = ast.parse(hook.body).body
        fn = ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in hook.args],
                                                           kwonlyargs=[], kw_defaults=[], defaults=[]),
                             body=body, decorator_list=[], returns=None, type_params=[])
        module = ast.fix_missing_locations(_Elementwise().visit(ast.Module(body=[fn], type_ignores=[])))
        exec(compile(module, f"<{spec.name} hook {name}>", "exec"), scope)
        out[name] = _tensor_result(scope[name])
        out[name].args = tuple(hook.args)
    scope.update(out)  # hooks call hooks
    return out


def grad(fn: Callable, wrt: int | str) -> Callable:
    """The tile language's `grad(hook, i)` in a reference: the derivative by torch.autograd (not by
    kgen/lang/derivative.py, which it checks), elementwise at the arguments' shapes."""
    i = fn.args.index(wrt) if isinstance(wrt, str) else wrt

    def d(*args):
        args = list(args)
        x = _t(args[i]).detach().double().requires_grad_(True)
        args[i] = x
        with torch.enable_grad():
            y = _t(fn(*args))
            g = torch.autograd.grad(y.sum(), x, allow_unused=True)[0] if y.requires_grad else None
        return torch.zeros_like(x) if g is None else g
    return d


def _tensor_result(fn: Callable) -> Callable:
    """`fn` returning a tensor even where its body is a constant (`mask_mod: "True"`)."""
    def hook(*args):
        return _t(fn(*args))
    return hook
