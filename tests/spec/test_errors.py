"""User errors in a spec: the exact message and the file:line:col it points at.

Every test writes a bad spec into tmp_path and asserts the complete text of the error, position
included, so that a change of wording or of position shows up here. Programs are checked by
building every kernel's IR (kgen.lang.kernel_ir), as `kgen build` does.

In BASE, the tile program's first line is line 15 of the file and is indented by 6 spaces, so a
program's (line, col) is the file's (14 + line, 6 + col).
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
variants:
  dtype: [bf16, fp16]
sizes: [M, N]
tensors:
  x: {shape: [M, N], dtype: $dtype}
  y: {shape: [M, N], dtype: $dtype, role: output}
tunables: {BLOCK_M: 4, BLOCK_N: 64}
kernels:
  - name: main
    grid: ["cdiv(M, BLOCK_M)"]
    program: |
"""
PROGRAM = """\
rows = block(program_id(0), BLOCK_M)
t = load(x[rows, block(0, BLOCK_N)]).to(fp32)
store(y[rows, block(0, BLOCK_N)], t.to(dtype))
"""
TAIL = """\
reference: |
  y = x
"""
BASE = HEAD + textwrap.indent(PROGRAM, "      ") + TAIL


def spec_with_program(program: str) -> str:
    return HEAD + textwrap.indent(textwrap.dedent(program), "      ") + TAIL


def error_of(tmp_path: Path, text: str) -> tuple[Path, SpecError]:
    """Write `text` as a spec, load it and build every kernel of every variant; the SpecError."""
    path = tmp_path / "demo.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        ls = load_spec(path)
        for variant in ls.variants():
            for i in range(len(ls.spec.kernels)):
                kernel_ir(ls, i, variant, dict(ls.spec.tunables))
    return path, info.value


def test_base_spec_is_valid(tmp_path):
    path = tmp_path / "demo.yaml"
    path.write_text(BASE)
    ls = load_spec(path)
    assert kernel_ir(ls, 0, {"dtype": "bf16"}, dict(ls.spec.tunables)).name == "demo_main"


# --- the YAML and the schema -------------------------------------------------------------------

def test_bad_yaml(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("sizes: [M, N]", "sizes: [M, N"))
    assert str(e) == f"{p}:7:8: this is not valid YAML: expected ',' or ']', but got ':'"


def test_tab_in_yaml(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("name: demo", "name: demo\n\tfoo: 1"))
    assert str(e) == f"{p}:3:1: this is not valid YAML: found character '\\t' that cannot start any token"


def test_unknown_field_lists_the_accepted_ones(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("dtype: $dtype}", "dtype: $dtype, layout: row}", 1))
    assert str(e) == f"{p}:8:37: unknown field 'layout'; accepted: shape, dtype, role, alias, grad, init, domain, scale_tolerance"


def test_unknown_top_level_field(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("sizes: [M, N]\n", "sizes: [M, N]\nsize: [K]\n"))
    assert str(e) == (f"{p}:7:1: unknown field 'size'; accepted: kgen, name, summary, variants, open_variants, exclude, sizes, "
                      "scalars, tensors, constraints, tunables, prefer, kernels, reference, autograd, buckets, hooks, extends")


def test_missing_field(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("summary: a test spec\n", ""))
    assert str(e) == f"{p}:1:1: missing field 'summary'"


def test_missing_field_of_a_kernel(tmp_path):
    p, e = error_of(tmp_path, HEAD.replace("    program: |\n", "") + TAIL)
    assert str(e) == f"{p}:12:5: missing field 'program'"


def test_unknown_dtype(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("dtype: $dtype}", "dtype: f32}", 1))
    assert str(e) == f"{p}:8:29: tensors.x.dtype: unknown dtype 'f32'; accepted: bf16, fp16, fp32, int32, int64 or $axis"


def test_dtype_naming_no_variant_axis(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("dtype: $dtype}", "dtype: $nosuchaxis}", 1))
    assert str(e) == f"{p}:8:29: tensors.x.dtype: $nosuchaxis names no variant axis; accepted: bf16, fp16, fp32, int32, int64, $dtype"


def test_dtype_naming_an_axis_of_non_dtypes(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("  dtype: [bf16, fp16]\n", "  dtype: [bf16, fp16]\n  split: [1, 2]\n")
                    .replace("dtype: $dtype}", "dtype: $split}", 1))
    assert str(e) == (f"{p}:9:29: tensors.x.dtype: variant axis 'split' has values that are not dtypes (1, 2); "
                      "accepted: bf16, fp16, fp32, int32, int64")


def test_shape_naming_an_undeclared_size(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("x: {shape: [M, N]", "x: {shape: [M, K]"))
    assert str(e) == (f"{p}:8:18: tensors.x.shape.1: 'K' is not a size, tunable or integer variant axis; "
                      "accepted: M, N, BLOCK_M, BLOCK_N or an integer")


@pytest.mark.parametrize("old, new, line_col", [
    ("x: {shape: [M, N], dtype: $dtype}", "x: {shape: [M, N], dtype: $type}", (8, 29)),
    ("x: {shape: [M, N], dtype: $dtype}", "x: {shape: [M, K], dtype: $dtype}", (8, 18)),
], ids=["dtype", "shape"])
def test_cross_field_errors_point_at_the_field(tmp_path, old, new, line_col):
    _, e = error_of(tmp_path, BASE.replace(old, new))
    assert (e.where.line, e.where.col) == line_col


def test_variant_axis_without_values(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("dtype: [bf16, fp16]", "dtype: []"))
    assert str(e) == f"{p}:5:3: variants: variant axis 'dtype' has no values"


def test_warps_not_a_power_of_two(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("    program: |\n", "    warps: 3\n    program: |\n"))
    assert str(e) == f"{p}:14:12: kernels.0.warps: 3 is not a power of two; accepted: a power of two or one of BLOCK_M, BLOCK_N"


# --- names that one field uses and another declares (checked when the spec is loaded) -----------

@pytest.mark.parametrize("grid, line_col, message", [
    ('["cdiv(M, BLOCK_Q)"]', "13:12", "'cdiv(M, BLOCK_Q)' uses 'BLOCK_Q', which is not a size, tunable or integer "
     "variant axis; accepted: M, N, BLOCK_M, BLOCK_N"),
    ('["cdiv(M, "]', "13:12", "'cdiv(M, ' is not an expression ('(' was never closed); write one like cdiv(M, BLOCK_M)"),
    ('["ceil(M / BLOCK_M)"]', "13:12", "'ceil(M / BLOCK_M)' calls 'ceil', which is not a function of size "
     "expressions; accepted: cdiv, min, max, pow2"),
    ('["M / BLOCK_M"]', "13:12", "'M / BLOCK_M' is not a size expression; accepted: integers, names, + - * // % **, "
     "comparisons, and/or/not, cdiv, min, max and pow2"),
    ('["cdiv(M)"]', "13:12", "'cdiv(M)': cdiv() takes 2 arguments, got 1"),
    # a grid written as one string has no position per entry: the error points at the string
    ("cdiv(M, BLOCK_M), max(N)", "13:11", "'max(N)': max() takes at least 2 arguments, got 1"),
], ids=["unknown-name", "syntax", "unknown-function", "true-division", "arity", "string-grid"])
def test_grid_entry_is_checked_at_load(tmp_path, grid, line_col, message):
    p, e = error_of(tmp_path, BASE.replace('grid: ["cdiv(M, BLOCK_M)"]', f"grid: {grid}"))
    entry = 1 if grid.startswith("cdiv(M, BLOCK_M),") else 0
    assert str(e) == f"{p}:{line_col}: kernels.0.grid.{entry}: {message}"


def test_a_flow_list_grid_that_yaml_split_inside_a_call_is_joined_again(tmp_path):
    """`grid: [M, cdiv(N, BLOCK_N)]` is three YAML items (YAML splits at every comma); the items
    parse as two expressions when joined, which the user meant. An item that stays unbalanced
    keeps its own error (test_grid_entry_is_checked_at_load's syntax case)."""
    path = tmp_path / "demo.yaml"
    path.write_text(BASE.replace('grid: ["cdiv(M, BLOCK_M)"]', "grid: [cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)]"))
    assert load_spec(path).spec.kernels[0].grid == ["cdiv(M, BLOCK_M)", "cdiv(N, BLOCK_N)"]


def test_output_shape_expression_is_checked_at_load(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("y: {shape: [M, N]", 'y: {shape: ["cdiv(M, BLOCK)", N]'))
    assert str(e) == (f"{p}:9:15: tensors.y.shape.0: 'cdiv(M, BLOCK)' uses 'BLOCK', which is not a size, tunable "
                      "or integer variant axis; accepted: M, N, BLOCK_M, BLOCK_N")


def test_input_shape_expression_takes_no_tunable(tmp_path):
    # sizes and variant axes are known when the inputs are checked; tunables are chosen after
    p, e = error_of(tmp_path, BASE.replace("x: {shape: [M, N]", 'x: {shape: [M, "N * BLOCK_N"]'))
    assert str(e) == (f"{p}:8:18: tensors.x.shape.1: 'N * BLOCK_N' names the tunables BLOCK_N, which an input's "
                      "shape may not use (they are chosen after the inputs are checked); accepted: sizes, integer "
                      "variant axes and integers")


def test_input_shape_expression_is_checked_at_load(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("x: {shape: [M, N]", 'x: {shape: [M, "cdiv(N, K)"]'))
    assert str(e) == (f"{p}:8:18: tensors.x.shape.1: 'cdiv(N, K)' uses 'K', which is not a size, tunable or "
                      "integer variant axis; accepted: M, N, BLOCK_M, BLOCK_N")


def test_warps_naming_no_tunable(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("    program: |\n", "    warps: WARPS\n    program: |\n"))
    assert str(e) == (f"{p}:14:12: kernels.0.warps: 'WARPS' is not a tunable or integer variant axis; "
                      "accepted: a power of two or one of BLOCK_M, BLOCK_N")


def test_warps_tunable_with_a_candidate_not_a_power_of_two(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("BLOCK_N: 64}", "BLOCK_N: 64, WARPS: [4, 6]}")
                    .replace("    program: |\n", "    warps: WARPS\n    program: |\n"))
    assert str(e) == (f"{p}:14:12: kernels.0.warps: 'WARPS' can be 6, which is not a power of two; "
                      "accepted: a power of two or one of BLOCK_M, BLOCK_N, WARPS")


def test_autograd_saves_an_unknown_tensor(tmp_path):
    p, e = error_of(tmp_path, BASE + "autograd:\n  backward: demo_bwd.yaml\n  saves: [x, z]\n")
    assert str(e) == f"{p}:22:14: autograd.saves.1: 'z' is not an input or output of this spec; accepted: x, y"


def test_autograd_saves_a_scratch_tensor(tmp_path):
    # scratch is allocated per call and not kept for the backward
    spec = BASE.replace("  y: ", "  tmp: {shape: [M], dtype: fp32, role: scratch}\n  y: ", 1)
    assert "role: scratch" in spec and "tmp" not in BASE
    p, e = error_of(tmp_path, spec + "autograd:\n  backward: demo_bwd.yaml\n  saves: [tmp]\n")
    assert str(e).endswith("autograd.saves.0: 'tmp' is not an input or output of this spec; accepted: x, y")


def test_constraint_naming_an_unknown_size(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("tunables:", 'constraints: ["N % BLOCK == 0"]\ntunables:'))
    assert str(e) == (f"{p}:10:15: constraints.0: 'N % BLOCK == 0' uses 'BLOCK', which is not a size, tunable or "
                      "integer variant axis; accepted: M, N, BLOCK_M, BLOCK_N")


def test_constraint_naming_sizes_and_tunables(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("tunables:", 'constraints: ["N % BLOCK_N == 0"]\ntunables:'))
    assert str(e) == (f"{p}:10:15: constraints.0: 'N % BLOCK_N == 0' names sizes (N) and tunables (BLOCK_N); a "
                      "constraint relates sizes and variant axes (checked at each call) or variant axes and tunables "
                      "(which tunable choices a variant may take), not both")


@pytest.mark.parametrize("exclude, message", [
    ("[{dtyp: bf16}]", "exclude.0.dtyp: 'dtyp' is not a variant axis; accepted: dtype"),
    ("[{dtype: bf17}]", "exclude.0.dtype: 'bf17' is not a value of variant axis 'dtype'; accepted: bf16, fp16"),
], ids=["axis", "value"])
def test_exclude_naming_no_variant(tmp_path, exclude, message):
    p, e = error_of(tmp_path, BASE.replace("sizes:", f"exclude: {exclude}\nsizes:"))
    col = 12 if "dtyp:" in exclude else 19
    assert str(e) == f"{p}:6:{col}: {message}"


def test_size_declared_twice(tmp_path):
    p, e = error_of(tmp_path, BASE.replace("sizes: [M, N]", "sizes: [M, N, BLOCK_M]"))
    assert str(e) == f"{p}:6:15: sizes.2: 'BLOCK_M' is also a tunable; a name may be declared only once"


def test_spec_without_an_output(tmp_path):
    p, e = error_of(tmp_path, BASE.replace(", role: output}", "}"))
    assert str(e) == f"{p}:8:3: tensors: a spec needs at least one tensor with role: output"


# --- the tile program ----------------------------------------------------------------------------

def test_syntax_error_in_program(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        t = load(x[rows, block(0, BLOCK_N)].to(fp32)
        store(y[rows, block(0, BLOCK_N)], t.to(dtype))
    """))
    assert str(e) == f"{p}:16:15: tile program: '(' was never closed"


def test_unknown_function(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        t = load(x[rows, block(0, BLOCK_N)]).to(fp32)
        store(y[rows, block(0, BLOCK_N)], softmax(t).to(dtype))
    """))
    assert str(e) == (f"{p}:17:41: unknown function 'softmax'; the tile language has: abs, arange, atomic_add, "
                      "block, cdiv, ceil, cos, cumsum, dot, erf, exp, exp2, floor, full, load, log, log2, max, maximum, min, "
                      "minimum, pow2, program_id, rand, rand8, rsqrt, sigmoid, sin, sqrt, store, sum, tanh, where, zeros")


def test_unknown_name(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_MM)
    """))
    assert str(e) == f"{p}:15:35: unknown name 'BLOCK_MM'"


def test_loop_carried_value_changes_shape(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        s = 0.0
        for j in range(cdiv(N, BLOCK_N)):
            s = s + load(x[rows, block(j, BLOCK_N)]).to(fp32)
        store(y[rows, block(0, BLOCK_N)], s.to(dtype))
    """))
    assert str(e) == (f"{p}:17:7: 's' changes type inside the loop, from scalar fp32 to 4x64 fp32; "
                      "give it its final type before the loop")


def test_loop_carried_value_changes_dtype(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        acc = zeros((BLOCK_M, BLOCK_N), dtype)
        for j in range(cdiv(N, BLOCK_N)):
            acc = acc + load(x[rows, block(j, BLOCK_N)]).to(fp32)
        store(y[rows, block(0, BLOCK_N)], acc)
    """))
    assert str(e) == (f"{p}:17:7: 'acc' changes type inside the loop, from 4x64 bf16 to 4x64 fp32; "
                      "give it its final type before the loop")


def test_dot_with_mismatched_inner_sizes(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        a = load(x[rows, block(0, BLOCK_N)])
        c = dot(a, a)
    """))
    assert str(e) == f"{p}:17:11: dot(a, b): inner sizes differ, [4, 64] @ [4, 64]"


def test_dot_of_fp32_tiles(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        a = load(x[rows, block(0, BLOCK_N)]).to(fp32)
        c = dot(a, a.T)
    """))
    assert str(e) == f"{p}:17:11: dot(a, b) takes two bf16 or two fp16 tiles, got fp32 and fp32"


def test_load_of_a_non_tensor(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        t = zeros((BLOCK_M, BLOCK_N), fp32)
        u = load(t[rows, block(0, BLOCK_N)])
    """))
    assert str(e) == f"{p}:17:16: load() needs a tensor of the spec, got 't'"


def test_tensor_with_the_wrong_number_of_indices(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        t = load(x[rows])
    """))
    assert str(e) == f"{p}:16:16: tensor 'x' has 2 dims, the index has 1"


def test_tensor_indexed_outside_load(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        t = x[rows, block(0, BLOCK_N)]
    """))
    assert str(e) == f"{p}:16:11: tensor 'x' can only be indexed inside load(), store() or atomic_add()"


def test_whole_dim_of_a_runtime_size(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        t = load(x[rows, :])
    """))
    assert str(e) == f"{p}:16:24: dim 1 of 'x' is a runtime size; take it in blocks with block(i, size)"


def test_if_on_runtime_data(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        t = load(x[rows, block(0, BLOCK_N)]).to(fp32)
        if N > 64:
            t = t * 2.0
        store(y[rows, block(0, BLOCK_N)], t.to(dtype))
    """))
    assert str(e) == (f"{p}:17:7: 'if' needs a condition known at compile time (a variant or tunable); "
                      "use where() for data")


def test_tile_size_not_a_power_of_two(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        t = zeros((BLOCK_M, 48), fp32)
    """))
    assert str(e) == f"{p}:16:11: tile sizes must be powers of two known at compile time; got [4, 48]"


def test_store_of_the_wrong_shape(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        t = load(x[rows, block(0, BLOCK_N)])
        store(y[rows, block(0, 32)], t)
    """))
    assert str(e) == f"{p}:17:7: store(): the value has shape [4, 64], the indexed block has [4, 32]"


def test_atomic_add_into_a_16_bit_tensor(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        atomic_add(y[rows, block(0, BLOCK_N)], 1.0)
    """))
    assert str(e) == f"{p}:16:7: atomic_add() needs an fp32 tensor; 'y' is bf16"


def test_cumsum_needs_an_axis_and_a_number_tile(tmp_path):
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        t = load(x[rows, block(0, BLOCK_N)]).to(fp32)
        store(y[rows, block(0, BLOCK_N)], cumsum(t).to(dtype))
    """))
    assert str(e) == f"{p}:17:41: cumsum(x, axis) needs the axis to sum along"
    p, e = error_of(tmp_path, spec_with_program("""\
        rows = block(program_id(0), BLOCK_M)
        t = load(x[rows, block(0, BLOCK_N)]).to(fp32)
        store(y[rows, block(0, BLOCK_N)], cumsum(t > 0.0, axis=1).to(dtype))
    """))
    assert str(e) == f"{p}:17:41: cumsum() takes a float or integer tile, got bool; cast it with .to(int32) first"


@pytest.mark.parametrize("value", [0, 65])
def test_prefetch_budget_out_of_range(tmp_path, value):
    p, e = error_of(tmp_path, BASE.replace("    program: |\n", f"    prefetch_loads: {value}\n    program: |\n"))
    assert str(e) == (f"{p}:14:21: kernels.0.prefetch_loads: prefetch_loads {value} is out of range; accepted: true, "
                      "false or an integer from 1 to 64 (elements per thread one loop may prefetch)")


@pytest.mark.parametrize("tensor, message", [
    ("x: {shape: [M, N], dtype: $dtype, domain: positive}", None),
    ("x: {shape: [M, N], dtype: $dtype, domain: {range: [0, 3]}}",
     "tensors.x.domain: a $dtype input takes normal, positive or negative; {range: ...}, {offsets: ...} and {segments: ...} "
     "are for int32 and int64 inputs"),
    ("x: {shape: [M, N], dtype: int32, domain: negative}",
     "tensors.x.domain: 'negative' is for float inputs; an int32 input takes {range: [low, high]} (optionally with "
     "sorted: true), {offsets: total} or {segments: <offsets input>}"),
    ("x: {shape: [M, N], dtype: int32, domain: {range: [0, V]}}", "tensors.x.domain.range.1: "),
    ("x: {shape: [M, N], dtype: int64, domain: positive}",
     "tensors.x.domain: 'positive' is for float inputs; an int64 input takes {range: [low, high]}"),
    ("x: {shape: [M, N], dtype: int64, domain: {range: [0, N]}}", None),
    ("x: {shape: [M, N], dtype: $dtype, scale_tolerance: 0.01}", "tensors.x.scale_tolerance: only outputs take scale_tolerance"),
])
def test_domains_suit_the_tensor(tmp_path, tensor, message):
    text = BASE.replace(BASE[BASE.index("  x: {"):BASE.index("\n", BASE.index("  x: {"))], "  " + tensor, 1)
    if message is None:
        (tmp_path / "demo.yaml").write_text(text)
        load_spec(tmp_path / "demo.yaml")
        return
    p, e = error_of(tmp_path, text)
    assert message in str(e), str(e)


@pytest.mark.parametrize("tensors, message", [
    ("  s: {shape: [M, N], dtype: int32, domain: {segments: st}}\n"
     "  st: {shape: [M, 5], dtype: int32, domain: {offsets: N}}\n", None),
    ("  s: {shape: [M, N], dtype: int32, domain: {segments: x}}\n",
     "tensors.s.domain.segments: 'x' is not an input with an offsets domain; accepted: none (declare the starts "
     "as {offsets: total})"),
    ("  s: {shape: [M, N], dtype: int32, domain: {segments: st}}\n"
     "  st: {shape: [N, 5], dtype: int32, domain: {offsets: M}}\n",
     "tensors.s.domain.segments: the ids of 's' ['M', 'N'] run along its last dim, so 'st' must have its outer dims "
     "['M'] and offsets up to N; it has shape ['N', 5] and offsets up to M"),
])
def test_segments_name_their_starts(tmp_path, tensors, message):
    """A segments domain names an offsets input over the ids' last dim with the same outer dims."""
    at = BASE.index("  y: {")
    text = BASE[:at] + tensors + BASE[at:]
    if message is None:
        (tmp_path / "demo.yaml").write_text(text)
        load_spec(tmp_path / "demo.yaml")
        return
    p, e = error_of(tmp_path, text)
    assert str(e).startswith(str(p) + ":9:"), str(e)
    assert message in str(e), str(e)


def test_open_variants_names_a_variant_axis(tmp_path):
    p, e = error_of(tmp_path, BASE + "open_variants: {width: \"width % 8 == 0\"}\n")
    assert str(e) == f"{p}:20:17: open_variants.width: 'width' is not a variant axis; axes: dtype"


def test_open_variants_condition_names_only_its_axis(tmp_path):
    text = BASE.replace("  dtype: [bf16, fp16]\n", "  dtype: [bf16, fp16]\n  W: [64]\n") + "open_variants: {W: \"W % N == 0\"}\n"
    p, e = error_of(tmp_path, text)
    assert str(e) == (f"{p}:21:20: open_variants.W: 'W % N == 0' uses 'N', which is not a size, tunable or integer "
                      "variant axis; accepted: W")


def test_an_open_axis_takes_a_value_that_meets_its_condition_from_the_command_line(tmp_path):
    from kgen.errors import UsageError

    path = tmp_path / "demo.yaml"
    path.write_text(BASE.replace("  dtype: [bf16, fp16]\n", "  dtype: [bf16, fp16]\n  W: [64]\n") + "open_variants: {W: \"W % 8 == 0\"}\n")
    ls = load_spec(path)
    assert ls.select_variant({"W": "40", "dtype": "bf16"}) == [{"dtype": "bf16", "W": 40}]
    assert ls.select_variant({"W": "64"}) == [{"dtype": "bf16", "W": 64}, {"dtype": "fp16", "W": 64}]
    with pytest.raises(UsageError) as e:
        ls.select_variant({"W": "41"})
    assert str(e.value) == "unknown value '41' for variant axis 'W'; accepted: 64, or an integer with W % 8 == 0"
