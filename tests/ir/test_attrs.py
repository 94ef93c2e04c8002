"""kgen/ir/attrs.py: the attribute schema the verifier holds every op to."""
from __future__ import annotations

from pathlib import Path

import pytest

from kgen.driver import compile_kernel
from kgen.hw.descriptor import load_target
from kgen.ir.attrs import SCHEMA, attr, problems
from kgen.ir.core import Block, Kernel, Op, Value, walk
from kgen.ir.verify import VerifyError, verify
from kgen.spec.load import load_spec

REPO = Path(__file__).resolve().parents[2]


def _kernel(*ops: Op) -> Kernel:
    return Kernel(name="k", body=Block(ops=list(ops)), tensors={}, sizes=[], scalars=[], num_warps=4, constants={})


def _const(value) -> Op:
    return Op("const", [], [Value((), "int32")], {"value": value})


def test_an_undeclared_attribute_fails_verification_naming_it():
    op = _const(1)
    op.attrs["swizle"] = True
    with pytest.raises(VerifyError, match="'swizle' is not one of const's"):
        verify(_kernel(op), "some_pass")


@pytest.mark.parametrize("attrs, message", [
    ({"fn": "add"}, None),
    ({"fn": 3}, "'fn' is 3 \\(int\\), expected str"),
    ({"fn": "plus"}, "'fn' is 'plus', expected one of"),
    ({}, "required attribute 'fn' is missing"),
])
def test_types_choices_and_required_attributes(attrs, message):
    a, b = Value((), "int32"), Value((), "int32")
    op = Op("binary", [a, b], [Value((), "int32")], attrs)
    k = _kernel(_const(1), _const(2), op)
    k.body.ops[0].results, k.body.ops[1].results = [a], [b]
    if message is None:
        verify(k, "some_pass")
    else:
        with pytest.raises(VerifyError, match=message):
            verify(k, "some_pass")


def test_a_bool_is_not_an_int_attribute_and_an_int_not_a_bool():
    assert problems(Op("expand", [], [], {"axis": True}))
    assert problems(Op("load", [], [], {"tensor": "x", "index": (), "pred": 1}))
    assert not problems(Op("const", [], [], {"value": True}))  # a literal of any dtype


def test_an_attribute_a_pass_decides_is_required_once_that_pass_ran():
    dot = Op("dot", [], [], {})
    assert problems(dot, frozenset()) == []  # as parsed
    missing = problems(dot, frozenset({"choose_dot_tiling"}))
    assert "required attribute 'instr' is missing after choose_dot_tiling" in missing
    assert not any("a_load" in p for p in missing)  # decided by place_dot_operands, not yet run
    stage = Op("stage", [], [], {"role": "a", "inner": 1, "rows": 64, "ld": 72, "bytes": 9216})
    assert problems(stage, frozenset({"place_dot_operands"})) == []
    assert problems(stage, frozenset({"plan_shared_memory"})) == ["a buffer without its shared-memory offset after plan_shared_memory"]


def test_defaults_are_read_from_the_schema():
    copy = Op("copy_async", [], [], {})
    assert attr(copy, "tma") is False and attr(copy, "sync_before") is True and attr(copy, "smem_layout") == "rows"
    with pytest.raises(KeyError):
        attr(copy, "instr")  # not a copy's attribute
    with pytest.raises(KeyError):
        attr(copy, "tensor")  # required and absent


def test_every_op_of_a_lowered_kernel_meets_the_schema():
    """The attention backward on both targets: every op kind it uses is declared, and the
    verifier (run after each pass) let every op through."""
    ls = load_spec(REPO / "specs" / "fa2_bwd.yaml")
    variant = ls.variants()[0]
    from kgen.build import tunable_candidates

    kinds = set()
    for target in ("sm_90", "gfx942"):
        for i in range(len(ls.spec.kernels)):
            k = compile_kernel(ls, i, variant, tunable_candidates(ls, variant)[0], load_target(target))
            kinds |= {op.kind for op in walk(k.body)}
            assert all(not problems(op, frozenset(["choose_dot_tiling", "place_dot_operands", "plan_shared_memory"]))
                       for op in walk(k.body))
    assert kinds <= set(SCHEMA) and {"dot", "stage", "load", "store", "for"} <= kinds


def test_codegen_choices_are_recorded_by_passes():
    """How copies step through their chunks follows CompileOptions.stepped_copies
    (passes/copy_addressing.py), and the warpgroup dots whose zero accumulator is never
    written are marked on both ops (passes/zero_starts.py): codegen decides neither."""
    from kgen.build import tunable_candidates
    from kgen.options import CompileOptions

    ls = load_spec(REPO / "specs" / "fa2_bwd.yaml")
    variant = ls.variants()[0]
    tunables = tunable_candidates(ls, variant)[0]
    hopper = load_target("sm_90")
    found = {}
    for stepped in (True, False):
        options = CompileOptions(swizzle=False, stepped_copies=stepped)  # plain layouts: cp.async copies, no tensor maps
        ops = [op for i in range(len(ls.spec.kernels))
               for op in walk(compile_kernel(ls, i, variant, tunables, hopper, options=options).body)]
        found[stepped] = [op.attrs["stepped"] for op in ops if op.kind == "copy_async" and not attr(op, "tma")]
        zero_dots = [op for op in ops if op.kind == "dot" and attr(op, "zero_start")]
        unwritten = [op for op in ops if op.kind == "full" and attr(op, "unwritten")]
        assert zero_dots and len(zero_dots) == len(unwritten)
    assert any(found[True]) and found[False] and not any(found[False])
