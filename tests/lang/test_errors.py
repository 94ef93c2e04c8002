"""Errors in the arguments of the tile language's calls (kgen.lang.calls): message and file:line:col.

In the spec below the program's first line is line 13 of the file, indented by 6 spaces, so a
program's (line, col) is the file's (12 + line, 6 + col). tests/spec/test_errors.py covers the
other errors of tile programs.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kgen.errors import SpecError
from kgen.lang import kernel_ir
from kgen.spec.load import load_spec

HEAD = """\
kgen: 1
name: demo
summary: a test spec
sizes: [M, N]
tensors:
  x: {shape: [M, N], dtype: fp32}
  y: {shape: [M, N], dtype: fp32, role: output}
tunables: {BLOCK_M: 4, BLOCK_N: 64}
kernels:
  - name: main
    grid: cdiv(M, BLOCK_M)
    program: |
"""
TAIL = """\
reference: |
  y = x
"""


def error_of(tmp_path: Path, program: str) -> tuple[Path, SpecError]:
    """The SpecError of building the kernel of a spec whose program is `program`."""
    path = tmp_path / "demo.yaml"
    path.write_text(HEAD + textwrap.indent(textwrap.dedent(program), "      ") + TAIL)
    ls = load_spec(path)
    with pytest.raises(SpecError) as info:
        kernel_ir(ls, 0, {}, dict(ls.spec.tunables))
    return path, info.value


@pytest.mark.parametrize("size, got", [
    ("N", "a runtime scalar int32 value"),
    ("64.0", "64.0"),
    ("fp32", "the dtype fp32"),
], ids=["runtime-size", "float", "dtype"])
def test_block_size_not_a_compile_time_integer(tmp_path, size, got):
    p, e = error_of(tmp_path, f"""\
        rows = block(program_id(0), BLOCK_M)
        t = load(x[rows, block(0, {size})])
    """)
    # points at the size argument itself
    assert str(e) == (f"{p}:14:33: the size of block(i, size) must be an integer known at compile time "
                      f"(a literal, tunable or variant value), got {got}")


@pytest.mark.parametrize("line, expected", [
    ("rows = block(program_id(0))", "13:14: block() takes 2 positional arguments, got 1"),
    ("rows = block(program_id(0), BLOCK_M, 1)", "13:14: block() takes 2 positional arguments, got 3"),
    ("t = exp(1.0, 2.0)", "13:11: exp() takes 1 positional argument, got 2"),
    ("t = zeros((BLOCK_M,), fp32).to()", "13:11: .to() takes 1 positional argument, got 0"),
    ("t = sum(zeros((BLOCK_M,), fp32), 0, 1)", "13:11: sum() takes 1 to 2 positional arguments, got 3"),
    ("store(y[block(0, BLOCK_M), block(0, BLOCK_N)])", "13:7: store() takes 2 positional arguments, got 1"),
], ids=["block-too-few", "block-too-many", "exp", "to", "sum", "store"])
def test_call_with_the_wrong_number_of_arguments(tmp_path, line, expected):
    p, e = error_of(tmp_path, line + "\n")
    assert str(e) == f"{p}:{expected}"



def test_dot_accumulator_must_be_a_tile(tmp_path):
    p, e = error_of(tmp_path, """\
        a = zeros((16, 16), bf16)
        c = dot(a, a, 0.0)
    """)
    assert str(e) == f"{p}:14:11: dot(a, b, acc): acc must be an fp32 tile of shape [16, 16], got 0.0"


def test_range_step_must_be_a_positive_constant(tmp_path):
    # the interpreter would run a negative step as Python does; generated loops test i < stop
    p, e = error_of(tmp_path, """\
        for i in range(4, 0, -1):
            pass
    """)
    assert str(e) == f"{p}:13:16: range()'s step must be a positive integer known at compile time, got -1"


@pytest.mark.parametrize("index, got", [
    ("0.5", "0.5"),
    ("arange(4)", "4 int32"),
], ids=["float", "tile"])
def test_block_index_must_be_an_integer_scalar(tmp_path, index, got):
    p, e = error_of(tmp_path, f"""\
        t = load(x[block({index}, BLOCK_M), block(0, BLOCK_N)])
    """)
    assert str(e) == f"{p}:13:24: the index of block(i, size) must be an integer scalar (which block along the dim), got {got}"


def test_store_into_an_input_is_refused(tmp_path):
    p, e = error_of(tmp_path, """\
        store(x[block(0, BLOCK_M), block(0, BLOCK_N)], zeros((BLOCK_M, BLOCK_N), fp32))
    """)
    assert str(e) == f"{p}:13:7: store() writes into 'x', an input of the op; write outputs and scratch tensors only"


def test_a_loop_over_a_tuple_needs_compile_time_values(tmp_path):
    p, e = error_of(tmp_path, """\
        n = cdiv(M, BLOCK_M)
        for i in (0, n):
            pass
    """)
    assert str(e) == (f"{p}:14:16: a loop over a tuple is unrolled when the spec is read: its values must be "
                      "known at compile time (numbers, booleans, variants, tunables)")


def test_a_loop_over_a_tuple_is_unrolled(tmp_path):
    """`for flag in (True, False)`: the body twice, `flag` a compile-time constant each time (so
    that a compile-time `if` on it selects), and no loop in the IR."""
    path = tmp_path / "demo.yaml"
    program = """\
        t = load(x[block(program_id(0), BLOCK_M), block(0, BLOCK_N)])
        for twice in (False, True):
            if twice:
                t = t * 2.0
            else:
                t = t + 1.0
        store(y[block(program_id(0), BLOCK_M), block(0, BLOCK_N)], t)
    """
    head = HEAD.replace("name: demo", "name: unrolled_demo")  # an op of its own in torch.ops.kgen
    path.write_text(head + textwrap.indent(textwrap.dedent(program), "      ") + TAIL.replace("y = x", "y = (x + 1) * 2"))
    k = kernel_ir(load_spec(path), 0, {}, {"BLOCK_M": 4, "BLOCK_N": 64})
    kinds = [op.kind for op in k.body.ops]
    assert "for" not in kinds
    assert [op.attrs["fn"] for op in k.body.ops if op.kind == "binary" and op.result.shape == (4, 64)] == ["add", "mul"]
    import torch

    from kgen.runtime.op import KgenOp

    x = torch.randn(8, 64)
    (y,) = KgenOp(load_spec(path)).run(x)  # the CPU interpreter
    torch.testing.assert_close(y, (x + 1) * 2)
