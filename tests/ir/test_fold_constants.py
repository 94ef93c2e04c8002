"""kgen/ir/passes/fold_constants.py: known integer arithmetic folded, repeated launch reads
shared, unread pure ops dropped; nothing with an effect touched."""
from __future__ import annotations

from pathlib import Path

from kgen.build import tunable_candidates
from kgen.driver import compile_kernel
from kgen.hw.descriptor import load_target
from kgen.ir.analysis import producers
from kgen.ir.core import Block, Kernel, Op, Value, walk
from kgen.ir.passes.fold_constants import fold_constants
from kgen.options import DEFAULT
from kgen.spec.load import load_spec

REPO = Path(__file__).resolve().parents[2]


def _int() -> Value:
    return Value((), "int32")


def _const(v: int) -> tuple[Op, Value]:
    out = _int()
    return Op("const", [], [out], {"value": v}), out


def _bin(fn: str, a: Value, b: Value, dtype: str = "int32") -> tuple[Op, Value]:
    out = Value((), dtype)
    return Op("binary", [a, b], [out], {"fn": fn}), out


def _store(v: Value) -> Op:  # an op with an effect: what it reads stays
    return Op("store", [v], [], {"tensor": "y", "index": ()})


def _fold(*ops: Op) -> Kernel:
    k = Kernel(name="k", body=Block(ops=list(ops)), tensors={}, sizes=["n"], scalars=[], num_warps=4, constants={})
    return fold_constants(k, load_target("sm_90"), DEFAULT)


def test_identities_and_constant_arithmetic_fold_and_what_they_leave_unread_goes():
    n_op = Op("size", [], [_int()], {"name": "n"})
    n = n_op.result
    zero_op, zero = _const(0)
    one_op, one = _const(1)
    four_op, four = _const(4)
    add_op, plus_zero = _bin("add", n, zero)  # n
    div_op, by_one = _bin("floordiv", plus_zero, one)  # n
    mod_op, mod_one = _bin("mod", n, one)  # 0
    lt_op, lt = _bin("lt", zero, four, "bool")  # true
    mul_op, times = _bin("mul", four, four)  # 16
    k = _fold(n_op, zero_op, one_op, four_op, add_op, div_op, mod_op, lt_op, mul_op,
              _store(by_one), _store(mod_one), _store(lt), _store(times))
    made_by = producers(k.body)
    stores = [op for op in k.body.ops if op.kind == "store"]
    assert stores[0].operands[0] is n
    assert [made_by[id(s.operands[0])].attrs for s in stores[1:]] == [{"value": 0}, {"value": True}, {"value": 16}]
    kinds = [op.kind for op in k.body.ops]
    assert kinds.count("binary") == 0 and "size" in kinds
    assert not any(op.kind == "const" and op.results[0] in (zero, one, four) for op in k.body.ops)


def test_floor_division_and_modulo_of_negative_constants_round_down_as_kg_floordiv_does():
    a_op, a = _const(-7)
    b_op, b = _const(2)
    div_op, q = _bin("floordiv", a, b)
    mod_op, r = _bin("mod", a, b)
    k = _fold(a_op, b_op, div_op, mod_op, _store(q), _store(r))
    made_by = producers(k.body)
    assert [made_by[id(op.operands[0])].attrs["value"] for op in k.body.ops if op.kind == "store"] == [-4, 1]


def test_a_repeated_program_id_is_read_once_and_a_float_op_is_left_alone():
    p1 = Op("program_id", [], [_int()], {"axis": 0})
    p2 = Op("program_id", [], [_int()], {"axis": 0})
    x, y = Value((), "fp32"), Value((), "fp32")
    fx = Op("scalar_arg", [], [x], {"name": "s"})
    f0 = Op("const", [], [y], {"value": 0.0})
    fadd_op, fsum = _bin("add", x, y, "fp32")  # x + 0.0 is not x for x = -0.0: not folded
    k = _fold(p1, p2, fx, f0, fadd_op, _store(p1.result), _store(p2.result), _store(fsum))
    stores = [op for op in k.body.ops if op.kind == "store"]
    assert stores[0].operands[0] is stores[1].operands[0] is p1.result
    assert p2 not in k.body.ops and fadd_op in k.body.ops


def _foldable(op: Op, made_by: dict) -> bool:
    """An int32 scalar op the pass folds: both operands constant, or an identity."""
    if op.kind != "binary" or not op.result.is_scalar or any(v.dtype != "int32" for v in op.operands):
        return False
    x, y = (made_by[id(v)].attrs["value"] if id(v) in made_by and made_by[id(v)].kind == "const" else None
            for v in op.operands)
    fn = op.attrs["fn"]
    return ((x is not None and y is not None) or (fn in ("add", "sub") and y == 0) or (fn == "add" and x == 0)
            or (fn in ("mul", "floordiv", "mod") and y == 1) or (fn == "mul" and (x in (0, 1) or y == 0)))


def test_the_shipped_kernels_keep_no_foldable_integer_arithmetic():
    ls = load_spec(REPO / "specs" / "ssd_bwd.yaml")
    target = load_target("sm_90")
    variant = {"dtype": "bf16", "chunk_size": 256, "headdim": 64, "dstate": 256, "packed": True}
    for i in range(len(ls.spec.kernels)):
        k = compile_kernel(ls, i, variant, tunable_candidates(ls, variant)[0], target)
        made_by = producers(k.body)
        assert not [op for op in walk(k.body) if _foldable(op, made_by)], k.name
