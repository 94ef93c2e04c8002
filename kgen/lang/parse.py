"""The tile language: a tile program (Python syntax, parsed with `ast`, never executed) -> IR.

A program sees: its kernel's compile-time constants (variant values, tunables, dtype names,
`inf`), the spec's runtime sizes (int32) and scalars (fp32, int32 or int64), and its tensors, which are only
indexed inside load/store/atomic_add. docs/SPEC_LANGUAGE.md describes the language.
"""
from __future__ import annotations

import ast
from typing import Any

from ..errors import SourceLoc, SpecError
from ..ir.core import DTYPES, INT_DTYPES, Block, Op, Value
from .builder import Builder, Operand
from .hooks import Hook, Origin, hook_body as _hook_body
from .calls import call, is_builtin
from .derivative import NotDifferentiable, derivative_body, load_derivative_bodies, wanted_load
from . import phases
from .terms import TensorRef, _DType


BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
          ast.Mod: "mod", ast.Pow: "pow"}
CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
def parse_program(source: str, origin: Origin, *, constants: dict[str, Any], sizes: list[str],
                  scalars: dict[str, str], tensors: dict[str, TensorRef], hooks: dict[str, Hook] | None = None) -> Block:
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise SpecError(f"tile program: {e.msg}", SourceLoc(origin.file, origin.line + (e.lineno or 1) - 1, origin.col + (e.offset or 1))) from None
    p = _Parser(origin, constants, sizes, scalars, tensors, hooks or {})
    p.statements(tree.body)
    return p.b.blocks[0]


# the calls answered by kgen/lang/phases.py, with the parser
_QUESTIONS = {"block_phases": phases.block_phases, "block_table": phases.block_table, "is_identity": phases.is_identity,
              "uses": phases.uses}


class _Parser:
    def __init__(self, origin: Origin, constants, sizes, scalars, tensors, hooks: dict[str, Hook]):
        self.b = Builder()
        self.origin = origin
        self.env: dict[str, Any] = {"inf": float("inf"), "True": True, "False": False}
        self.env.update({d: _DType(d) for d in DTYPES})
        self.env.update({k: (_DType(v) if isinstance(v, str) and v in DTYPES else v) for k, v in constants.items()})
        self.sizes, self.scalars, self.tensors = sizes, scalars, tensors
        self.runtime: dict[str, Value] = {}
        self.globals = dict(self.env)  # what a hook's body sees besides its arguments
        self.hooks, self.inlining = hooks, []
        for name, hook in hooks.items():
            if is_builtin(name):
                raise SpecError(f"hook '{name}' has the name of a function of the tile language; give it another",
                                SourceLoc(hook.origin.file, hook.origin.line, hook.origin.col + 1))

    # --- positions -------------------------------------------------------------------------------
    def at(self, node: ast.AST) -> None:
        if hasattr(node, "lineno"):
            self.b.loc = SourceLoc(self.origin.file, self.origin.line + node.lineno - 1, self.origin.col + node.col_offset + 1)

    def fail(self, node: ast.AST, message: str) -> SpecError:
        self.at(node)
        return self.b.fail(message)

    # --- statements ------------------------------------------------------------------------------
    def statements(self, body: list[ast.stmt]) -> None:
        for s in body:
            self.at(s)
            if isinstance(s, ast.Assign):
                if len(s.targets) != 1 or not isinstance(s.targets[0], ast.Name):
                    raise self.fail(s, "assign to one plain name at a time (no tuples, attributes or subscripts)")
                value = self.expr(s.value)
                if isinstance(value, Value) and not value.name:  # the generated source calls it so
                    value.name = s.targets[0].id
                self.env[s.targets[0].id] = value
            elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
                op = BINOPS.get(type(s.op))
                if op is None:
                    raise self.fail(s, "this augmented assignment is not supported; use + - * / // %")
                value = self.env[s.target.id] = self.b.binary(op, self.name(s.target), self.expr(s.value))
                if isinstance(value, Value) and not value.name:
                    value.name = s.target.id
            elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
                self.expr(s.value)
            elif isinstance(s, ast.For):
                self.for_loop(s)
            elif isinstance(s, ast.If):
                cond = self.expr(s.test)
                if isinstance(cond, Value):
                    raise self.fail(s, "'if' needs a condition known at compile time (a variant or tunable); use where() for data")
                self.statements(s.body if cond else s.orelse)
            elif isinstance(s, ast.Pass):
                pass
            else:
                raise self.fail(s, f"'{type(s).__name__}' statements are not part of the tile language; use assignments, for-range loops, compile-time if, and store/atomic_add calls")

    def unrolled_loop(self, s: ast.For) -> None:
        """`for name in (a, b, ...)`: the body once per value, `name` bound to it as a compile-time
        constant (a variant or tunable would be), so that one body can serve two loops that differ
        in their bounds and in a compile-time `if` (the causal attention's masked and unmasked
        query blocks)."""
        values = self.expr(s.iter)
        if isinstance(s.target, ast.Tuple):  # for masked, start, stop[, at] in block_phases(...)
            names = [t.id if isinstance(t, ast.Name) else None for t in s.target.elts]
            if isinstance(values, tuple) and len(names) == 3 and all(isinstance(v, tuple) and len(v) == 4 for v in values):
                if not all(v[3].identity for v in values):
                    raise self.fail(s, "this block table lists blocks: unpack 'for masked, start, stop, at in "
                                       "block_phases(...)' and take the block at position i as at(i)")
                values = tuple(v[:3] for v in values)
            if None in names or not isinstance(values, tuple) or any(not isinstance(v, tuple) or len(v) != len(names) for v in values):
                raise self.fail(s, f"'for {ast.unparse(s.target)} in ...' unpacks tuples of {len(names)} values "
                                   "(each a name), as block_phases() gives (masked, start, stop[, at])")
            for value in values:
                self.env.update(zip(names, value))
                self.statements(s.body)
            return
        if not isinstance(values, tuple) or any(isinstance(v, (Value, TensorRef, _DType, tuple)) for v in values):
            raise self.fail(s.iter, "a loop over a tuple is unrolled when the spec is read: its values must be known "
                                    "at compile time (numbers, booleans, variants, tunables)")
        for value in values:
            self.env[s.target.id] = value
            self.statements(s.body)

    def for_loop(self, s: ast.For) -> None:
        if s.orelse:
            raise self.fail(s, "for-else is not supported")
        if isinstance(s.target, (ast.Name, ast.Tuple)) and (isinstance(s.iter, (ast.Tuple, ast.IfExp)) or (
                isinstance(s.iter, ast.Call) and isinstance(s.iter.func, ast.Name) and s.iter.func.id == "block_phases")):
            return self.unrolled_loop(s)
        if not isinstance(s.target, ast.Name) or not (isinstance(s.iter, ast.Call) and isinstance(s.iter.func, ast.Name) and s.iter.func.id == "range"):
            raise self.fail(s, "loops are written 'for name in range(stop)', 'range(start, stop[, step])' or, "
                               "unrolled when the spec is read, 'for name in (a, b, ...)' over values known at compile time")
        args = [self.expr(a) for a in s.iter.args]
        if not 1 <= len(args) <= 3:
            raise self.fail(s.iter, "range() takes 1 to 3 arguments")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        # generated loops test `i < stop`: a step must be a positive number known at compile time
        if isinstance(step, Value) or isinstance(step, bool) or not isinstance(step, int) or step <= 0:
            raise self.fail(s.iter, f"range()'s step must be a positive integer known at compile time, got {step!r}")
        bounds = [self.b.as_value(x, "int32") for x in (start, stop, step)]
        for x in bounds:
            if x.dtype not in INT_DTYPES or not x.is_scalar:
                raise self.fail(s.iter, f"range() bounds must be integer scalars, got {x.type_str()}")
        # loops count in int32 (a bound read from an int64 tensor, as cu_seqlens, is narrowed:
        # sizes are int32, so a bound that means anything fits)
        bounds = [self.b.cast(x, "int32") for x in bounds]
        assigned = _assigned_names(s.body)
        carried = [n for n in assigned if n in self.env and n != s.target.id]
        inits = []
        for n in carried:
            v = self.env[n]
            if isinstance(v, (_DType, TensorRef)):
                raise self.fail(s, f"'{n}' cannot be reassigned inside a loop")
            inits.append(self.b.as_value(v))
        iv = Value((), "int32", name=s.target.id)
        args_ = [Value(v.shape, v.dtype, name=n) for n, v in zip(carried, inits)]
        body = Block(args=[iv] + args_)
        saved = dict(self.env)
        self.env[s.target.id] = iv
        self.env.update(zip(carried, args_))
        self.b.blocks.append(body)
        self.statements(s.body)
        yields = []
        for n, init in zip(carried, inits):
            y = self.b.as_value(self.env[n], init.dtype)
            if y.shape != init.shape or y.dtype != init.dtype:
                raise self.fail(s, f"'{n}' changes type inside the loop, from {init.type_str()} to {y.type_str()}; give it its final type before the loop")
            yields.append(y)
        self.b.emit("yield", yields, [])
        self.b.blocks.pop()
        self.at(s)
        results = [Value(v.shape, v.dtype, name=n) for n, v in zip(carried, inits)]
        self.b.block.ops.append(Op("for", bounds + inits, results, {}, body=body, loc=self.b.loc))
        # names first bound inside the loop are not visible after it
        self.env = saved
        self.env.update(zip(carried, results))

    # --- expressions -----------------------------------------------------------------------------
    def name(self, node: ast.Name) -> Any:
        n = node.id
        if n in self.env:
            return self.env[n]
        if n in self.sizes:
            if n not in self.runtime:
                self.runtime[n] = self._top_level("size", Value((), "int32", name=n), name=n)
            return self.runtime[n]
        if n in self.scalars:
            if n not in self.runtime:
                self.runtime[n] = self._top_level("scalar_arg", Value((), self.scalars[n], name=n), name=n)
            return self.runtime[n]
        if n in self.tensors:
            return self.tensors[n]
        raise self.fail(node, f"unknown name '{n}'")

    def _top_level(self, kind: str, v: Value, **attrs) -> Value:
        """Runtime arguments are defined once, at the top of the kernel, so loops can use them."""
        self.b.blocks[0].ops.insert(0, Op(kind, [], [v], attrs, loc=self.b.loc))
        return v

    def expr(self, node: ast.expr) -> Any:
        self.at(node)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (int, float, bool)):
                return node.value
            raise self.fail(node, f"constant {node.value!r} is not a number")
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.BinOp):
            op = BINOPS.get(type(node.op))
            if op is None:
                raise self.fail(node, "this operator is not supported; use + - * / // % **")
            a, b = self.expr(node.left), self.expr(node.right)
            self.at(node)
            return self.b.binary(op, self.operand(node.left, a), self.operand(node.right, b))
        if isinstance(node, ast.UnaryOp):
            x = self.operand(node.operand, self.expr(node.operand))
            self.at(node)
            if isinstance(node.op, ast.USub):
                return -x if not isinstance(x, Value) else self.b.binary("sub", 0, x) if x.dtype in INT_DTYPES else self.b.binary("mul", x, -1.0)
            if isinstance(node.op, ast.Not):
                return self.b.unary("not", x)
            if isinstance(node.op, ast.UAdd):
                return x
            raise self.fail(node, "this unary operator is not supported")
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise self.fail(node, "chained comparisons are not supported; combine two with 'and'")
            a, b = self.expr(node.left), self.expr(node.comparators[0])
            self.at(node)
            return self.b.binary(CMPOPS[type(node.ops[0])], self.operand(node.left, a), self.operand(node.comparators[0], b))
        if isinstance(node, ast.BoolOp):
            vals = [self.expr(v) for v in node.values]
            self.at(node)
            out = vals[0]
            for v in vals[1:]:
                out = self.b.binary("and" if isinstance(node.op, ast.And) else "or", out, v)
            return out
        if isinstance(node, ast.IfExp):
            cond = self.expr(node.test)
            if isinstance(cond, Value):
                raise self.fail(node, "'x if c else y' needs c known at compile time; use where(c, x, y) for data")
            return self.expr(node.body if cond else node.orelse)
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in self.hooks and node.func.id not in self.env:
                return self.call_hook(node)
            if isinstance(node.func, ast.Call) and isinstance(node.func.func, ast.Name) and node.func.func.id == "grad":
                return self.call_grad(node)
            if isinstance(node.func, ast.Call) and isinstance(node.func.func, ast.Name) and node.func.func.id == "tensor_grads":
                return self.call_tensor_grads(node)
            if isinstance(node.func, ast.Name) and isinstance(self.env.get(node.func.id), phases.BlockAt):
                return self.env[node.func.id](self, node)
            if isinstance(node.func, ast.Name) and node.func.id in _QUESTIONS and node.func.id not in self.env:
                return _QUESTIONS[node.func.id](self, node)
            return call(self, node)
        if isinstance(node, ast.Tuple):
            return tuple(self.expr(e) for e in node.elts)
        raise self.fail(node, f"'{type(node).__name__}' expressions are not part of the tile language")

    def call_hook(self, node: ast.Call) -> Any:
        """A hook's body inlined: its arguments evaluated here, its statements and `return`
        expression parsed at the hook's own place in the spec."""
        name = node.func.id
        return self.inline(node, name, self.hooks[name], _hook_body(name, self.hooks[name]))

    def call_grad(self, node: ast.Call) -> Any:
        """`grad(hook, i)(args)`: the derivative of a hook with respect to its argument i (an
        index or the argument's name), inlined as a hook (kgen/lang/derivative.py)."""
        spec = node.func
        if (spec.keywords or len(spec.args) != 2 or not isinstance(spec.args[0], ast.Name)
                or spec.args[0].id not in self.hooks or not isinstance(spec.args[1], ast.Constant)):
            raise self.fail(spec, "grad() takes a hook and the index or name of one of its arguments: "
                                  f"grad(score_mod, 0); hooks: {', '.join(self.hooks) or 'none'}")
        name, which = spec.args[0].id, spec.args[1].value
        hook = self.hooks[name]
        wrt = hook.args.index(which) if which in hook.args else which
        if isinstance(wrt, bool) or not isinstance(wrt, int) or not 0 <= wrt < len(hook.args):
            raise self.fail(spec, f"grad({name}, {which!r}): {name} takes ({', '.join(hook.args)}); give an index "
                                  f"from 0 to {len(hook.args) - 1} or one of those names")
        try:
            body = derivative_body(_hook_body(name, hook), hook.args, wrt, set(self.hooks))
        except NotDifferentiable as e:
            self.origin = hook.origin
            raise self.fail(e.node, f"grad({name}, {which!r}): {e}") from None
        return self.inline(node, f"grad({name}, {wrt})", hook, body)

    def call_tensor_grads(self, node: ast.Call) -> None:
        """`tensor_grads(hook, g)(args)`, a statement: for each load in the hook's body of a tensor
        T whose gradient the spec writes (a tensor named d<T>), adds g times the derivative of
        the hook with respect to the loaded value into d<T> at the load's indices (atomic adds,
        summed first over the axes along which the indices do not change)."""
        spec = node.func
        if spec.keywords or len(spec.args) != 2 or not isinstance(spec.args[0], ast.Name) or spec.args[0].id not in self.hooks:
            raise self.fail(spec, "tensor_grads() takes a hook and the gradient of its result: "
                                  f"tensor_grads(score_mod, ds)(args...); hooks: {', '.join(self.hooks) or 'none'}")
        name = spec.args[0].id
        hook = self.hooks[name]
        g = self.operand(spec.args[1], self.expr(spec.args[1]))

        def wanted(t: str) -> bool:
            grad = self.tensors.get(f"d{t}")
            return t in self.tensors and grad is not None and grad.writable

        self._no_grads_below(name, wanted, spec)
        try:
            sites = load_derivative_bodies(_hook_body(name, hook), wanted, set(self.hooks))
        except NotDifferentiable as e:
            self.origin = hook.origin
            raise self.fail(e.node, f"tensor_grads({name}): {e}") from None
        for tensor, body in sites:
            coeff, *index = self.inline(node, f"tensor_grads({name})", hook, body)
            self.at(node)
            value = self.b.as_value(self.b.binary("mul", g, coeff), "fp32")
            shape: tuple[int, ...] = ()
            for i in index:
                if isinstance(i, Value) and not i.is_scalar:
                    shape = tuple(max(a, b) for a, b in zip((1,) * (len(i.shape) - len(shape)) + shape,
                                                              (1,) * (len(shape) - len(i.shape)) + i.shape))
            shape = (1,) * (len(value.shape) - len(shape)) + shape if shape else shape
            if len(shape) == len(value.shape) or not shape:
                for axis in reversed(range(len(value.shape))):  # the axes the indices do not follow
                    if not shape or shape[axis] == 1 and value.shape[axis] != 1:
                        value = self.b.reduce("sum", value, axis)
                        if shape:
                            value = self.b.expand(value, axis)
            temps = {f"__tg_i{j}": i for j, i in enumerate(index)}
            saved = self.env
            self.env = {**self.env, **temps, "__tg_value": value}
            target = ast.Subscript(value=ast.Name(id=f"d{tensor}", ctx=ast.Load()),
                                   slice=ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Load()) for n in temps], ctx=ast.Load()),
                                   ctx=ast.Load())
            add = ast.Call(func=ast.Name(id="atomic_add", ctx=ast.Load()), args=[target, ast.Name(id="__tg_value", ctx=ast.Load())], keywords=[])
            try:
                self.expr(ast.fix_missing_locations(ast.copy_location(add, node)))
            finally:
                self.env = saved

    def _no_grads_below(self, name: str, wanted, node: ast.AST, seen: tuple[str, ...] = ()) -> None:
        """A load that takes a gradient in a hook the hook calls is an error, not a gradient left out."""
        for n in (x for s in _hook_body(name, self.hooks[name]) for x in ast.walk(s)):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.hooks and n.func.id not in seen + (name,):
                inner = n.func.id
                for m in (x for s in _hook_body(inner, self.hooks[inner]) for x in ast.walk(s)):
                    if wanted_load(m, wanted):
                        raise self.fail(node, f"tensor_grads({name}): hook {inner}, which {name} calls, loads "
                                              f"'{m.args[0].value.id}', whose gradient this spec writes; write that load in {name} itself")
                self._no_grads_below(inner, wanted, node, seen + (name,))

    def static(self, node: ast.expr) -> Any:
        """node's value when it is known at compile time (a number or bool), else None; nothing
        it would emit reaches the program."""
        saved = (self.b, dict(self.runtime), self.origin)
        self.b = Builder()
        try:
            value = self.expr(node)
        except SpecError:
            value = None
        finally:
            self.b, self.runtime, self.origin = saved
        return None if isinstance(value, (Value, TensorRef, _DType, tuple)) else value

    def inline(self, node: ast.Call, name: str, hook: Hook, body: list[ast.stmt]) -> Any:
        """`body` (statements ending in `return`) evaluated with `hook`'s arguments bound to the
        call's, at the hook's place in the spec."""
        if node.keywords or len(node.args) != len(hook.args):
            raise self.fail(node, f"{name} takes {len(hook.args)} arguments ({', '.join(hook.args)}), got "
                                  f"{len(node.args) + len(node.keywords)}")
        if name in self.inlining:
            raise self.fail(node, f"hook {name} calls itself (through {' -> '.join(self.inlining)})")
        values = [self.expr(a) for a in node.args]
        saved = (self.env, self.origin)
        self.env, self.origin = {**self.globals, **dict(zip(hook.args, values))}, hook.origin
        self.inlining.append(name)
        try:
            self.statements(body[:-1])
            self.at(body[-1])
            return self.expr(body[-1].value)
        finally:
            self.env, self.origin = saved
            self.inlining.pop()
            self.at(node)

    def operand(self, node: ast.expr, x: Any) -> Operand:
        if isinstance(x, (_DType, TensorRef, tuple)):
            raise self.fail(node, f"'{ast.unparse(node)}' is not a number or a tile here")
        return x

    def attribute(self, node: ast.Attribute) -> Any:
        base = self.expr(node.value)
        self.at(node)
        if node.attr == "T" and isinstance(base, Value):
            return self.b.trans(base)
        if node.attr == "shape" and isinstance(base, Value):
            return base.shape
        raise self.fail(node, f"unknown attribute '.{node.attr}'; tiles have .T, .shape and .to(dtype)")

    def subscript(self, node: ast.Subscript) -> Any:
        base = self.expr(node.value)
        self.at(node)
        if isinstance(base, TensorRef):
            raise self.fail(node, f"tensor '{base.name}' can only be indexed inside load(), store() or atomic_add()")
        if isinstance(base, tuple):
            idx = self.expr(node.slice)
            return base[idx]
        if not isinstance(base, Value):
            raise self.fail(node, "only tiles can be indexed")
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        out = base
        axis = 0
        for it in items:
            if isinstance(it, ast.Constant) and it.value is None:
                out = self.b.expand(out, axis)
                axis += 1
            elif isinstance(it, ast.Slice) and it.lower is None and it.upper is None and it.step is None:
                axis += 1
            else:
                raise self.fail(node, "tiles are indexed only with ':' and None, as in x[:, None]")
        if axis != len(out.shape):
            raise self.fail(node, f"index has {axis} entries for a {len(out.shape)}D result")
        return out


def _assigned_names(body: list[ast.stmt]) -> list[str]:
    out: list[str] = []
    for node in body:
        for sub in ast.walk(node):
            target = None
            if isinstance(sub, ast.Assign) and len(sub.targets) == 1:
                target = sub.targets[0]
            elif isinstance(sub, ast.AugAssign):
                target = sub.target
            if isinstance(target, ast.Name) and target.id not in out:
                out.append(target.id)
    return out
