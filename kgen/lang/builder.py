"""Emit typed IR ops, with shape and dtype checks, into the current block.

The parser (kgen.lang.parse) walks the tile program's syntax tree and calls these methods; all
type rules live here so that they are checked once, at the spec position of the construct.
Python numbers stay Python numbers (folded at compile time) until an op needs them as values.
"""
from __future__ import annotations

from typing import Any, Union

from ..errors import SourceLoc, SpecError
from ..ir.core import FLOAT_DTYPES, INT_DTYPES, Block, Op, Value
from .types import broadcast_shapes, promote

Operand = Union[Value, int, float, bool]

UNARY_FLOAT = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "sin", "cos", "floor", "ceil"}
COMPARE = {"lt", "le", "gt", "ge", "eq", "ne"}


class Builder:
    def __init__(self) -> None:
        self.blocks: list[Block] = [Block()]
        self.loc: SourceLoc | None = None

    @property
    def block(self) -> Block:
        return self.blocks[-1]

    def fail(self, message: str) -> SpecError:
        return SpecError(message, self.loc)

    def emit(self, kind: str, operands: list[Value], results: list[Value], **attrs: Any) -> Op:
        op = Op(kind, operands, results, attrs, loc=self.loc)
        self.block.ops.append(op)
        return op

    # --- constants -----------------------------------------------------------------------------
    def const(self, value: int | float | bool, dtype: str | None = None) -> Value:
        if dtype is None:
            dtype = "bool" if isinstance(value, bool) else _int_dtype(value) if isinstance(value, int) else "fp32"
        return self.emit("const", [], [Value((), dtype)], value=value).result

    def as_value(self, x: Operand, like: str | None = None) -> Value:
        """Materialise a Python number, typed after its partner `like` when one is given (an
        integer too large for int32 stays int64, as torch would not wrap it)."""
        if isinstance(x, Value):
            return x
        if like is not None and like != "bool" and not (like in INT_DTYPES and isinstance(x, float)):
            if like == "int32" and isinstance(x, int) and not isinstance(x, bool):
                like = _int_dtype(x)
            return self.const(x, like)
        return self.const(x)

    # --- elementwise ---------------------------------------------------------------------------
    def binary(self, fn: str, a: Operand, b: Operand) -> Operand:
        if not isinstance(a, Value) and not isinstance(b, Value):
            return _fold(fn, a, b, self)
        # `t and True`, `t or False`: t itself (a hook that is true everywhere adds no op)
        for x, y in ((a, b), (b, a)):
            if isinstance(y, bool) and isinstance(x, Value) and x.dtype == "bool" and y == (fn == "and") and fn in ("and", "or"):
                return x
        da = a.dtype if isinstance(a, Value) else None
        db = b.dtype if isinstance(b, Value) else None
        a = self.as_value(a, db)
        b = self.as_value(b, da)
        if fn in ("and", "or"):
            if a.dtype != "bool" or b.dtype != "bool":
                raise self.fail(f"'{fn}' needs two boolean tiles, got {a.dtype} and {b.dtype}")
            dtype = "bool"
        else:
            dtype = promote(a.dtype, b.dtype)
            if fn == "div" and dtype in INT_DTYPES:
                dtype = "fp32"
            if fn in ("floordiv", "mod") and dtype not in INT_DTYPES:
                raise self.fail(f"'{'//' if fn == 'floordiv' else '%'}' is for integers; got {dtype}")
            if "bool" in (a.dtype, b.dtype) and fn not in COMPARE:
                raise self.fail("arithmetic on a boolean tile; cast it with .to(...) first")
        shape = broadcast_shapes(a.shape, b.shape)
        if shape is None:
            raise self.fail(f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast")
        a, b = self.cast(self.broadcast(a, shape), dtype), self.cast(self.broadcast(b, shape), dtype)
        out = "bool" if fn in COMPARE else dtype
        return self.emit("binary", [a, b], [Value(shape, out)], fn=fn).result

    def rand(self, seed: Operand, offset: Operand, fn: str = "rand") -> Operand:
        """rand(seed, offset): a uniform fp32 number on [0, 1) per element, Philox4x32-10 keyed by
        the seed's 64 bits at counter offset (kgen/ir/philox.py); both integers, taken as int64.
        fn="rand8": the same in steps of 1/256, sixteen offsets per Philox call."""
        for what, x in (("seed", seed), ("offset", offset)):
            dtype = x.dtype if isinstance(x, Value) else "bool" if isinstance(x, bool) else "int64" if isinstance(x, int) else "fp32"
            if dtype not in INT_DTYPES:
                raise self.fail(f"{fn}(seed, offset) takes an integer {what} (int32 or int64 scalar or tile), got {dtype}")
        if not isinstance(seed, Value) and not isinstance(offset, Value):
            from ..ir import philox

            return float(getattr(philox, fn)(seed, offset))
        a, b = self.cast(self.as_value(seed, "int64"), "int64"), self.cast(self.as_value(offset, "int64"), "int64")
        shape = broadcast_shapes(a.shape, b.shape)
        if shape is None:
            raise self.fail(f"{fn}(seed, offset): shapes {list(a.shape)} and {list(b.shape)} do not broadcast")
        return self.emit("binary", [self.broadcast(a, shape), self.broadcast(b, shape)], [Value(shape, "fp32")], fn=fn).result

    def unary(self, fn: str, x: Operand) -> Operand:
        if not isinstance(x, Value):
            return _fold(fn, x, None, self)
        if fn in UNARY_FLOAT and x.dtype not in FLOAT_DTYPES:
            x = self.cast(x, "fp32")
        if fn == "not" and x.dtype != "bool":
            raise self.fail(f"'not' needs a boolean tile, got {x.dtype}")
        return self.emit("unary", [x], [Value(x.shape, x.dtype)], fn=fn).result

    def where(self, c: Operand, a: Operand, b: Operand) -> Value:
        c = self.as_value(c)
        if c.dtype != "bool":
            raise self.fail(f"where() needs a boolean condition, got {c.dtype}")
        da = a.dtype if isinstance(a, Value) else None
        db = b.dtype if isinstance(b, Value) else None
        a, b = self.as_value(a, db), self.as_value(b, da)
        dtype = promote(a.dtype, b.dtype)
        shape = broadcast_shapes(c.shape, broadcast_shapes(a.shape, b.shape) or ())
        if shape is None or broadcast_shapes(a.shape, b.shape) is None:
            raise self.fail(f"where(): shapes {list(c.shape)}, {list(a.shape)}, {list(b.shape)} do not broadcast")
        args = [self.broadcast(c, shape), self.cast(self.broadcast(a, shape), dtype), self.cast(self.broadcast(b, shape), dtype)]
        return self.emit("where", args, [Value(shape, dtype)]).result

    def cast(self, x: Value, dtype: str) -> Value:
        if x.dtype == dtype:
            return x
        return self.emit("cast", [x], [Value(x.shape, dtype)], dtype=dtype).result

    # --- shapes --------------------------------------------------------------------------------
    def broadcast(self, x: Value, shape: tuple[int, ...]) -> Value:
        if x.shape == shape or x.is_scalar:
            return x  # scalars are used as they are: every thread holds them
        while len(x.shape) < len(shape):
            x = self.expand(x, 0)
        if x.shape == shape:
            return x
        return self.emit("broadcast", [x], [Value(shape, x.dtype)], shape=shape).result

    def expand(self, x: Value, axis: int) -> Value:
        if len(x.shape) >= 2:
            raise self.fail("tiles have at most two dimensions")
        shape = x.shape[:axis] + (1,) + x.shape[axis:]
        return self.emit("expand", [x], [Value(shape, x.dtype)], axis=axis).result

    def trans(self, x: Value) -> Value:
        if len(x.shape) != 2:
            raise self.fail(f".T needs a 2D tile, got shape {list(x.shape)}")
        return self.emit("trans", [x], [Value((x.shape[1], x.shape[0]), x.dtype)]).result

    def reduce(self, fn: str, x: Value, axis: int) -> Value:
        if not isinstance(x, Value) or x.is_scalar:
            raise self.fail(f"{fn}() reduces a tile along an axis; got a scalar")
        if axis < 0:
            axis += len(x.shape)
        if not 0 <= axis < len(x.shape):
            raise self.fail(f"{fn}(): axis {axis} is out of range for a {len(x.shape)}D tile")
        shape = x.shape[:axis] + x.shape[axis + 1:]
        return self.emit("reduce", [x], [Value(shape, x.dtype)], fn=fn, axis=axis).result

    def scan(self, fn: str, x: Value, axis: int) -> Value:
        """Inclusive prefix `fn` (sum) along `axis`: same shape and dtype as x."""
        if not isinstance(x, Value) or x.is_scalar:
            raise self.fail(f"cum{fn}() runs along an axis of a tile; got a scalar")
        if x.dtype == "bool":
            raise self.fail(f"cum{fn}() takes a float or integer tile, got bool; cast it with .to(int32) first")
        if axis < 0:
            axis += len(x.shape)
        if not 0 <= axis < len(x.shape):
            raise self.fail(f"cum{fn}(): axis {axis} is out of range for a {len(x.shape)}D tile")
        return self.emit("scan", [x], [Value(x.shape, x.dtype)], fn=fn, axis=axis).result

    # --- tiles ---------------------------------------------------------------------------------
    def full(self, shape: tuple[int, ...], value: int | float, dtype: str) -> Value:
        for s in shape:
            if not isinstance(s, int) or s <= 0 or s & (s - 1):
                raise self.fail(f"tile sizes must be powers of two known at compile time; got {list(shape)}")
        if len(shape) > 2:
            raise self.fail("tiles have at most two dimensions")
        return self.emit("full", [], [Value(tuple(shape), dtype)], shape=tuple(shape), value=value).result

    def arange(self, n: int) -> Value:
        if not isinstance(n, int) or n <= 0 or n & (n - 1):
            raise self.fail(f"arange(n) needs a power of two known at compile time; got {n}")
        return self.emit("arange", [], [Value((n,), "int32")], n=n).result

    def dot(self, a: Value, b: Value, acc: Value | None) -> Value:
        if not (isinstance(a, Value) and isinstance(b, Value)) or len(a.shape) != 2 or len(b.shape) != 2:
            raise self.fail("dot(a, b) needs two 2D tiles")
        if a.shape[1] != b.shape[0]:
            raise self.fail(f"dot(a, b): inner sizes differ, {list(a.shape)} @ {list(b.shape)}")
        if a.dtype != b.dtype or a.dtype not in ("bf16", "fp16"):
            raise self.fail(f"dot(a, b) takes two bf16 or two fp16 tiles, got {a.dtype} and {b.dtype}")
        shape = (a.shape[0], b.shape[1])
        if acc is None:
            acc = self.full(shape, 0.0, "fp32")
        elif not isinstance(acc, Value) or acc.shape != shape or acc.dtype != "fp32":
            got = acc.type_str() if isinstance(acc, Value) else repr(acc)
            raise self.fail(f"dot(a, b, acc): acc must be an fp32 tile of shape {list(shape)}, got {got}")
        return self.emit("dot", [a, b, acc], [Value(shape, "fp32")]).result


def _int_dtype(value: int) -> str:
    """int32 for a Python int that fits it, else int64."""
    return "int32" if -2**31 <= value < 2**31 else "int64"


def _fold(fn: str, a: Any, b: Any, builder: Builder) -> Any:
    import math

    table = {
        "add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a / b,
        "floordiv": lambda: a // b, "mod": lambda: a % b, "pow": lambda: a ** b,
        "max": lambda: max(a, b), "min": lambda: min(a, b),
        "lt": lambda: a < b, "le": lambda: a <= b, "gt": lambda: a > b, "ge": lambda: a >= b,
        "eq": lambda: a == b, "ne": lambda: a != b, "and": lambda: a and b, "or": lambda: a or b,
        "neg": lambda: -a, "not": lambda: not a, "abs": lambda: abs(a),
        "exp": lambda: math.exp(a), "exp2": lambda: 2.0 ** a, "log": lambda: math.log(a),
        "log2": lambda: math.log2(a), "sqrt": lambda: math.sqrt(a), "rsqrt": lambda: 1 / math.sqrt(a),
        "sigmoid": lambda: 0.5 * (1 + math.tanh(a / 2)), "tanh": lambda: math.tanh(a), "erf": lambda: math.erf(a),
        "sin": lambda: math.sin(a), "cos": lambda: math.cos(a), "floor": lambda: float(math.floor(a)),
        "ceil": lambda: float(math.ceil(a)),
    }
    try:
        return table[fn]()
    except (ZeroDivisionError, ValueError) as e:
        raise builder.fail(f"constant expression fails at compile time: {e}") from None
