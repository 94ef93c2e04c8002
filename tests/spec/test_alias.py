"""`alias: <input>` on an output (written over the input's storage): every misuse is one SpecError
at its place in the YAML, naming what is accepted; a well-formed alias loads."""
from __future__ import annotations

from pathlib import Path

import pytest

from kgen.errors import SpecError
from kgen.spec.load import load_spec

SPEC = """\
kgen: 1
name: demo
summary: a test spec
variants:
  dtype: [bf16, fp16]
sizes: [M, N]
tensors:
  x: {shape: [M, N], dtype: $dtype}
  w: {shape: [N], dtype: fp32}
  y: {shape: [M, N], dtype: $dtype, role: output, alias: x}
  part: {shape: [M], dtype: fp32, role: scratch}
kernels:
  - name: main
    grid: [M]
    program: |
      store(y[program_id(0), block(0, 64)], load(x[program_id(0), block(0, 64)]))
reference: |
  y = x
AUTOGRAD"""


def _at(text: str, needle: str, key: str) -> tuple[int, int]:
    """1-based (line, col) of the value of `key` on the line holding `needle`."""
    for n, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return n, line.index(f"{key}: ", line.index(needle)) + len(key) + 3
    raise AssertionError(needle)


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "demo.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    return str(e.value).removeprefix(f"{path}:")


def test_an_alias_loads(tmp_path):
    (tmp_path / "demo.yaml").write_text(SPEC.replace("AUTOGRAD", ""))
    assert load_spec(tmp_path / "demo.yaml").spec.aliases() == {"y": "x"}


@pytest.mark.parametrize("edit, needle, key, message", [
    (("alias: x}", "alias: z}"), "  y:", "alias",
     "tensors.y.alias: alias: 'z' is not a tensor of this spec; an output is written over an input: accepted: x, w"),
    (("alias: x}", "alias: part}"), "  y:", "alias",
     "tensors.y.alias: alias: 'part' is scratch; an output is written over an input: accepted: x, w"),
    (("alias: x}", "alias: w}"), "  y:", "alias",
     "tensors.y.alias: alias: 'w' has shape [N] and dtype fp32, 'y' [M, N] and $dtype; an output written over an "
     "input has its shape and dtype, written the same way"),
    (("role: scratch}", "role: scratch, alias: x}"), "  part:", "alias",
     "tensors.part.alias: only outputs take alias (an output written over an input's storage); 'part' is scratch"),
    (("role: output, alias: x}", "role: output, alias: x, init: zeros}"), "  y:", "init",
     "tensors.y.init: 'y' is written over input 'x' (alias) and starts as its contents; init: zeros would erase the "
     "input, so an aliased output takes no init"),
    (("  part:", "  z: {shape: [M, N], dtype: $dtype, role: output, alias: x}\n  part:"), "  z:", "alias",
     "tensors.z.alias: alias: 'x' is already written over by output 'y'; an input takes one aliased output at most"),
    (("  w: {shape: [N], dtype: fp32}", "  w: {shape: [M, N], dtype: $dtype}\n  v: {shape: [M, N], dtype: $dtype, "
      "role: output, alias: y}"), "  v:", "alias",
     "tensors.v.alias: alias: 'y' is an output; an output is written over an input: accepted: x, w"),
])
def test_misuse_is_one_error_at_its_place(tmp_path, edit, needle, key, message):
    text = SPEC.replace("AUTOGRAD", "").replace(*edit)
    line, col = _at(text, needle, key)
    assert _error(tmp_path, text) == f"{line}:{col}: {message}"


def test_a_dtype_that_differs_is_named(tmp_path):
    text = SPEC.replace("AUTOGRAD", "").replace("  y: {shape: [M, N], dtype: $dtype", "  y: {shape: [M, N], dtype: fp32")
    line, col = _at(text, "  y:", "alias")
    assert _error(tmp_path, text) == (f"{line}:{col}: tensors.y.alias: alias: 'x' has shape [M, N] and dtype $dtype, "
                                      "'y' [M, N] and fp32; an output written over an input has its shape and dtype, "
                                      "written the same way")


def test_an_input_overwritten_cannot_be_saved(tmp_path):
    text = SPEC.replace("AUTOGRAD", "autograd:\n  backward: demo_bwd.yaml\n  saves: [w, x]\n")
    n = text.splitlines().index("  saves: [w, x]") + 1
    assert _error(tmp_path, text) == (f"{n}:14: autograd.saves.1: 'x' is overwritten by output 'y' (alias: x), so the "
                                      "input as the forward read it cannot be saved; save 'y' or drop the alias")
