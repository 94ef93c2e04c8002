"""kgen/ir/verify.py, once layouts are assigned: one layout per loop-carried value (its initial
value, block argument, yielded value and result are one set of registers) and an elementwise
op's operands in its result's layout (it reads their registers as its own)."""
from __future__ import annotations

import pytest

from kgen.ir.core import Block, Kernel, Op, Value
from kgen.ir.verify import VerifyError, verify
from kgen.layout import blocked1d

WIDE, NARROW = blocked1d(64, lanes=64, warps=4), blocked1d(64, lanes=16, warps=4)  # 64 lanes, 16 lanes


def _tile(layout) -> Value:
    return Value((64,), "fp32", layout=layout)


def _int(v: int) -> tuple[Op, Value]:
    out = Value((), "int32")
    return Op("const", [], [out], {"value": v}), out


def _loop(arg_layout) -> Kernel:
    """x = full(1.0); for i in range(0, 4): x = x + x; the block argument in `arg_layout`."""
    ops, (start, stop, step) = [], (0, 4, 1)
    vals = []
    for v in (start, stop, step):
        op, val = _int(v)
        ops.append(op)
        vals.append(val)
    init = _tile(WIDE)
    ops.append(Op("full", [], [init], {"shape": (64,), "value": 1.0}))
    iv, arg, res = Value((), "int32"), _tile(arg_layout), _tile(WIDE)
    twice = _tile(arg_layout)
    body = Block(args=[iv, arg], ops=[Op("binary", [arg, arg], [twice], {"fn": "add"}), Op("yield", [twice], [], {})])
    ops.append(Op("for", [*vals, init], [res], {}, body=body))
    return Kernel(name="k", body=Block(ops=ops), tensors={}, sizes=[], scalars=[], num_warps=4, constants={})


def test_one_layout_per_loop_carried_value():
    verify(_loop(WIDE), "assign_layouts", frozenset({"assign_layouts"}))
    with pytest.raises(VerifyError, match="loop-carried .* other layouts"):
        verify(_loop(NARROW), "assign_layouts", frozenset({"assign_layouts"}))


def test_an_elementwise_operand_in_another_layout_fails():
    a, b, out = _tile(WIDE), _tile(NARROW), _tile(WIDE)
    k = Kernel(name="k", body=Block(ops=[Op("full", [], [a], {"shape": (64,), "value": 1.0}), Op("full", [], [b], {"shape": (64,), "value": 2.0}),
                                         Op("binary", [a, b], [out], {"fn": "add"})]),
               tensors={}, sizes=[], scalars=[], num_warps=4, constants={})
    with pytest.raises(VerifyError, match="not in its result's layout"):
        verify(k, "assign_layouts", frozenset({"assign_layouts"}))
