"""kgen/ir/passes/dead_code.py: repeated launch reads shared, unread pure ops dropped, nothing
with an effect touched."""
from __future__ import annotations

from kgen.hw.descriptor import load_target
from kgen.ir.core import Block, Kernel, Op, Value
from kgen.ir.passes.dead_code import drop_dead_code
from kgen.options import DEFAULT


def _int() -> Value:
    return Value((), "int32")


def _store(v: Value) -> Op:  # an op with an effect: what it reads stays
    return Op("store", [v], [], {"tensor": "y", "index": ()})


def _run(*ops: Op) -> Kernel:
    k = Kernel(name="k", body=Block(ops=list(ops)), tensors={}, sizes=["n"], scalars=[], num_warps=4, constants={})
    return drop_dead_code(k, load_target("sm_90"), DEFAULT)


def test_a_repeated_program_id_is_read_once():
    p1 = Op("program_id", [], [_int()], {"axis": 0})
    p2 = Op("program_id", [], [_int()], {"axis": 0})
    p3 = Op("program_id", [], [_int()], {"axis": 1})
    k = _run(p1, p2, p3, _store(p1.result), _store(p2.result), _store(p3.result))
    stores = [op for op in k.body.ops if op.kind == "store"]
    assert stores[0].operands[0] is stores[1].operands[0] is p1.result
    assert stores[2].operands[0] is p3.result  # another axis is another value
    assert p2 not in k.body.ops and p1 in k.body.ops


def test_unread_pure_ops_go_in_chains_and_effects_stay():
    n = Op("size", [], [_int()], {"name": "n"})
    one = Op("const", [], [_int()], {"value": 1})
    plus = Op("binary", [n.result, one.result], [_int()], {"fn": "add"})  # read by nothing
    times = Op("binary", [plus.result, one.result], [_int()], {"fn": "mul"})  # read by nothing
    kept = Op("binary", [n.result, one.result], [_int()], {"fn": "sub"})
    store = _store(kept.result)
    k = _run(n, one, plus, times, kept, store)
    assert k.body.ops == [n, one, kept, store]


def test_a_store_with_no_results_is_never_dropped():
    x = Op("size", [], [_int()], {"name": "n"})
    k = _run(x, _store(x.result))
    assert [op.kind for op in k.body.ops] == ["size", "store"]
