"""The tile language's functions: one small handler per name.

load/store/atomic_add take a tensor indexed by scalars, block(i, size) and ':' (a whole static
dim, in a tile of the next power of two); everything else works on tiles and scalars.
"""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from ..ir.core import INT_DTYPES, Value
from ..spec.expr import pow2
from .terms import UNARY_FNS, BlockIndex, TensorRef, _DType
from .types import broadcast_shapes

if TYPE_CHECKING:  # the parser hands itself to call(); only its type is named here
    from .parse import _Parser

REDUCE = ("sum", "max", "min")


def call(p: _Parser, node: ast.Call) -> Any:
    if isinstance(node.func, ast.Attribute) and node.func.attr == "to":
        x = p.expr(node.func.value)
        (dt,) = _args(p, node, 1, 1)
        p.at(node)
        if not isinstance(x, Value):
            x = p.b.as_value(x)
        return p.b.cast(x, _dtype(p, node, dt))
    if not isinstance(node.func, ast.Name):
        raise p.fail(node, "only the tile language's functions can be called")
    fn = node.func.id
    if fn in ("load", "store", "atomic_add"):
        return _memory(p, node, fn)
    handler = _HANDLERS.get(fn)
    if handler is None:
        known = ", ".join(sorted(list(_HANDLERS) + ["load", "store", "atomic_add"]))
        raise p.fail(node, f"unknown function '{fn}'; the tile language has: {known}")
    return handler(p, node)


def _args(p: _Parser, node: ast.Call, lo: int, hi: int, kw: tuple[str, ...] = (), evaluate: bool = True) -> list[Any]:
    names = [k.arg for k in node.keywords]
    bad = [n for n in names if n not in kw]
    if bad:
        raise p.fail(node, f"{ast.unparse(node.func)}() has no keyword '{bad[0]}'" + (f"; accepted: {', '.join(kw)}" if kw else ""))
    if not lo <= len(node.args) <= hi:
        want = f"{lo} positional argument{'' if hi == 1 else 's'}" if lo == hi else f"{lo} to {hi} positional arguments"
        # x.to(...) is named by its method alone, not by the whole expression before it
        fn = f".{node.func.attr}" if isinstance(node.func, ast.Attribute) else ast.unparse(node.func)
        raise p.fail(node, f"{fn}() takes {want}, got {len(node.args)}")
    return [p.expr(a) for a in node.args] if evaluate else []


def _kw(p: _Parser, node: ast.Call, name: str, default: Any) -> Any:
    for k in node.keywords:
        if k.arg == name:
            return p.expr(k.value)
    return default


def _dtype(p: _Parser, node: ast.AST, dt: Any) -> str:
    if not isinstance(dt, _DType):
        raise p.fail(node, f"expected a dtype (bf16, fp16, fp32, int32, int64, bool), got {dt!r}")
    return str(dt)


def _static_int(p: _Parser, node: ast.AST, x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        got = (f"a runtime {x.type_str()} value" if isinstance(x, Value) else "a block(i, size)" if isinstance(x, BlockIndex)
               else f"the dtype {x}" if isinstance(x, _DType) else repr(x))
        raise p.fail(node, f"{what} must be an integer known at compile time (a literal, tunable or variant value), got {got}")
    return x


def _shape(p: _Parser, node: ast.AST, s: Any) -> tuple[int, ...]:
    s = s if isinstance(s, tuple) else (s,)
    return tuple(_static_int(p, node, x, "a tile size") for x in s)


def _program_id(p, node):
    (axis,) = _args(p, node, 1, 1)
    axis = _static_int(p, node, axis, "program_id's axis")
    if axis not in (0, 1, 2):
        raise p.fail(node, "program_id(axis) takes axis 0, 1 or 2")
    p.at(node)
    return p.b.emit("program_id", [], [Value((), "int32", name=f"pid{axis}")], axis=axis).result


def _arange(p, node):
    (n,) = _args(p, node, 1, 1)
    p.at(node)
    return p.b.arange(_static_int(p, node, n, "arange's size"))


def _full(p, node):
    args = _args(p, node, 2, 3, ("dtype",))
    shape, value = args[0], args[1]
    dt = _dtype(p, node, args[2] if len(args) == 3 else _kw(p, node, "dtype", _DType("fp32")))
    p.at(node)
    if isinstance(value, Value):  # a runtime scalar: zeros plus the value, in the tile's dtype
        if not value.is_scalar or dt == "bool" or value.dtype == "bool":
            raise p.fail(node.args[1], f"full(shape, value): a runtime value must be a float or integer scalar for a float or integer tile, got {value.type_str()} for {dt}")
        return p.b.binary("add", p.b.full(_shape(p, node, shape), 0, dt), p.b.cast(value, dt))
    return p.b.full(_shape(p, node, shape), value, dt)


def _zeros(p, node):
    args = _args(p, node, 1, 2, ("dtype",))
    shape = args[0]
    dt = _dtype(p, node, args[1] if len(args) == 2 else _kw(p, node, "dtype", _DType("fp32")))
    p.at(node)
    return p.b.full(_shape(p, node, shape), 0, dt)


def _unary(fn):
    def handler(p, node):
        (x,) = _args(p, node, 1, 1)
        p.at(node)
        return p.b.unary(fn, p.operand(node.args[0], x))
    return handler


def _binary(fn):
    def handler(p, node):
        a, b = _args(p, node, 2, 2)
        p.at(node)
        return p.b.binary(fn, p.operand(node.args[0], a), p.operand(node.args[1], b))
    return handler


def _rand(fn):
    def handler(p, node):
        seed, offset = _args(p, node, 2, 2)
        p.at(node)
        return p.b.rand(p.operand(node.args[0], seed), p.operand(node.args[1], offset), fn)
    return handler


def _reduce(fn):
    def handler(p, node):
        args = _args(p, node, 1, 2, ("axis",))
        axis = args[1] if len(args) == 2 else _kw(p, node, "axis", None)
        if axis is None:
            raise p.fail(node, f"{fn}(x, axis) needs the axis to reduce along")
        p.at(node)
        return p.b.reduce(fn, p.operand(node.args[0], args[0]), _static_int(p, node, axis, "the axis"))
    return handler


def _cumsum(p, node):
    args = _args(p, node, 1, 2, ("axis",))
    axis = args[1] if len(args) == 2 else _kw(p, node, "axis", None)
    if axis is None:
        raise p.fail(node, "cumsum(x, axis) needs the axis to sum along")
    p.at(node)
    return p.b.scan("sum", p.operand(node.args[0], args[0]), _static_int(p, node, axis, "the axis"))


def _where(p, node):
    c, a, b = _args(p, node, 3, 3)
    p.at(node)
    return p.b.where(c, a, b)


def _dot(p, node):
    args = _args(p, node, 2, 3)
    p.at(node)
    return p.b.dot(args[0], args[1], args[2] if len(args) == 3 else None)


def _cdiv(p, node):
    a, b = _args(p, node, 2, 2)
    p.at(node)
    if not isinstance(a, Value) and not isinstance(b, Value):
        return -(-a // b)
    return p.b.binary("floordiv", p.b.binary("add", a, p.b.binary("sub", b, 1)), b)


def _pow2(p, node):
    (n,) = _args(p, node, 1, 1)
    return pow2(_static_int(p, node.args[0], n, "the argument of pow2(n)"))


def _block(p, node):
    i, size = _args(p, node, 2, 2)
    scalar_int = isinstance(i, Value) and i.is_scalar and i.dtype in INT_DTYPES
    if not (scalar_int or (isinstance(i, int) and not isinstance(i, bool))):
        got = i.type_str() if isinstance(i, Value) else repr(i)
        raise p.fail(node.args[0], f"the index of block(i, size) must be an integer scalar (which block along the dim), got {got}")
    if isinstance(i, Value) and i.dtype != "int32":
        # a block's first position lies in an int32 dim (sizes are int32): the block number is
        # narrowed, as a loop bound is
        p.at(node)
        i = p.b.cast(i, "int32")
    return BlockIndex(i, _static_int(p, node.args[1], size, "the size of block(i, size)"))


def _memory(p: _Parser, node: ast.Call, fn: str) -> Any:
    if fn == "load":
        _args(p, node, 1, 1, ("other",), evaluate=False)
        other = _kw(p, node, "other", 0)
        if isinstance(other, Value):
            raise p.fail(node, "load(..., other=) takes a number known at compile time")
    else:
        _args(p, node, 2, 2, evaluate=False)
    ref = node.args[0]
    if not isinstance(ref, ast.Subscript):
        raise p.fail(node, f"{fn}() takes an indexed tensor first, as in {fn}(x[block(i, BLOCK), :]" + (")" if fn == "load" else ", value)"))
    t = p.expr(ref.value)
    if not isinstance(t, TensorRef):
        raise p.fail(ref, f"{fn}() needs a tensor of the spec, got '{ast.unparse(ref.value)}'")
    items = ref.slice.elts if isinstance(ref.slice, ast.Tuple) else [ref.slice]
    if len(items) != len(t.dims):
        raise p.fail(ref, f"tensor '{t.name}' has {len(t.dims)} dims, the index has {len(items)}")
    operands: list[Value] = []
    value = None
    if fn != "load":
        value = p.operand(node.args[1], p.expr(node.args[1]))
        p.at(node)
        value = p.b.as_value(value)
        operands.append(value)
    index, shape, evaluated = [], [], []
    for d, (it, static) in enumerate(zip(items, t.dims)):
        if isinstance(it, ast.Slice):
            if it.lower or it.upper or it.step:
                raise p.fail(it, "write a block of a dim as block(i, size); ':' takes the whole dim")
            if static is None:
                raise p.fail(it, f"dim {d} of '{t.name}' is a runtime size; take it in blocks with block(i, size)")
            size = pow2(static)
            if size == static:
                index.append(("all", size))
            else:
                # a tile the next power of two wide (Triton's padded head dims): the block at 0,
                # so its columns past the dim are bound-tested (loads read 0 there, stores skip them)
                operands.append(p.b.as_value(0, "int32"))
                index.append(("block", len(operands) - 1, size))
            shape.append(size)
            continue
        x = p.expr(it)
        evaluated.append(x)
        if isinstance(x, Value) and not x.is_scalar:  # an index tile: a gather or scatter
            if any(isinstance(i, ast.Slice) for i in items):
                raise p.fail(ref, f"{fn}() indexed by a tile takes integer tiles and scalars in every dim, not ':'")
            rest = [p.expr(i) for i in items[d + 1:]]
            return _gather_scatter(p, node, fn, t, items, evaluated + rest, operands[:1] if fn != "load" else [], value)
        if isinstance(x, BlockIndex):
            operands.append(p.b.as_value(x.index, "int32"))
            if x.size <= 0 or x.size & (x.size - 1):
                raise p.fail(it, f"block sizes must be powers of two, got {x.size}")
            index.append(("block", len(operands) - 1, x.size))
            shape.append(x.size)
        else:
            v = p.b.as_value(p.operand(it, x), "int32")
            if v.dtype not in INT_DTYPES or not v.is_scalar:
                raise p.fail(it, f"a tensor index must be an integer scalar or block(i, size), got {v.type_str()}")
            operands.append(v)
            index.append(("at", len(operands) - 1))
    if len(shape) > 2:
        raise p.fail(ref, "a tile has at most two dimensions: index the others with scalars")
    p.at(node)
    attrs = dict(tensor=t.name, index=tuple(index))
    if fn == "load":
        dtype = t.dtype
        return p.b.emit("load", operands, [Value(tuple(shape), dtype)], other=other, **attrs).result
    dtype = t.dtype
    if not t.writable:
        raise p.fail(node, f"{fn}() writes into '{t.name}', an input of the op; write outputs and scratch tensors only")
    if fn == "atomic_add" and dtype != "fp32":
        raise p.fail(node, f"atomic_add() needs an fp32 tensor; '{t.name}' is {dtype}")
    if tuple(value.shape) not in (tuple(shape), ()):
        raise p.fail(node, f"{fn}(): the value has shape {list(value.shape)}, the indexed block has {shape}")
    value = p.b.cast(value, dtype)
    if value.is_scalar and shape:
        value = p.b.binary("add", p.b.full(tuple(shape), 0, dtype), value)
    operands[0] = value
    p.b.emit(fn, operands, [], **attrs)
    return None


def _gather_scatter(p: _Parser, node: ast.Call, fn: str, t: TensorRef, items: list, evaluated: list,
                    operands: list[Value], value: Value | None) -> Any:
    """A tensor indexed by integer tiles (and scalars): one element per element of the tiles'
    broadcast shape, read (`gather`) or written (`scatter`; atomic_add: fp32 adds), an index
    outside its dim reading `other` or writing nothing."""
    shape: tuple[int, ...] = ()
    for it, x in zip(items, evaluated):
        if isinstance(x, BlockIndex):
            raise p.fail(it, f"{fn}() indexed by a tile takes integer tiles and scalars, not block(i, size), in every dim")
        v = p.b.as_value(p.operand(it, x), "int32")
        if v.dtype not in INT_DTYPES:
            raise p.fail(it, f"a tensor index must be an integer scalar, an integer tile or block(i, size), got {v.type_str()}")
        if not v.is_scalar:
            joined = broadcast_shapes(shape, v.shape)
            if joined is None:
                raise p.fail(it, f"the index tiles' shapes {list(shape)} and {list(v.shape)} do not broadcast")
            shape = joined
    if len(shape) > 2:
        raise p.fail(node, "a tile has at most two dimensions")
    index = []
    for it, x in zip(items, evaluated):
        v = p.b.as_value(x, "int32")
        if v.is_scalar:
            operands.append(v)
            index.append(("at", len(operands) - 1))
        else:
            p.at(it)
            operands.append(p.b.broadcast(v, shape) if v.shape != shape else v)
            index.append(("tile", len(operands) - 1))
    p.at(node)
    if fn == "load":
        return p.b.emit("gather", operands, [Value(shape, t.dtype)], tensor=t.name, index=tuple(index),
                        other=_kw(p, node, "other", 0)).result
    if not t.writable:
        raise p.fail(node, f"{fn}() writes into '{t.name}', an input of the op; write outputs and scratch tensors only")
    if fn == "atomic_add" and t.dtype != "fp32":
        raise p.fail(node, f"atomic_add() needs an fp32 tensor; '{t.name}' is {t.dtype}")
    if value.shape not in (shape, ()) and broadcast_shapes(value.shape, shape) != shape:
        raise p.fail(node, f"{fn}(): the value has shape {list(value.shape)}, the index tiles {list(shape)}")
    value = p.b.cast(value, t.dtype)
    if value.shape != shape:  # a scalar as a tile of the index's shape; a smaller tile broadcast
        value = p.b.broadcast(value, shape) if value.shape else p.b.binary("add", p.b.full(shape, 0, t.dtype), value)
    operands[0] = value
    p.b.emit("scatter", operands, [], tensor=t.name, index=tuple(index), atomic=fn == "atomic_add")
    return None


_HANDLERS = {
    "program_id": _program_id, "arange": _arange, "full": _full, "zeros": _zeros,
    "where": _where, "dot": _dot, "cumsum": _cumsum, "cdiv": _cdiv, "pow2": _pow2, "block": _block,
    "maximum": _binary("max"), "minimum": _binary("min"), "rand": _rand("rand"), "rand8": _rand("rand8"),
    **{fn: _unary(fn) for fn in UNARY_FNS},
    **{fn: _reduce(fn) for fn in REDUCE},
}


def is_builtin(name: str) -> bool:
    """Whether `name` is a function of the tile language (a hook may not take its name)."""
    return name in _HANDLERS or name in ("load", "store", "atomic_add", "range", "grad", "tensor_grads", "block_phases", "block_table",
                                               "span", "is_identity", "uses")
