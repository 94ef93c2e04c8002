"""kgen.check.reference: a spec's reference code that raises is a SpecError at its line in the
spec file, with the sizes it ran at, not a traceback."""
from __future__ import annotations

import pytest
import torch

from kgen.check.reference import reference
from kgen.cli import main
from kgen.errors import SpecError
from kgen.spec.load import load_spec

SPEC = """\
kgen: 1
name: twice
summary: y = 2 x over a vector
sizes: [L]
tensors: {v: {shape: [L], dtype: fp32}, out: {shape: [L], dtype: fp32, role: output}}
tunables: {CHUNK: 128}
kernels:
  - name: scale
    grid: cdiv(L, CHUNK)
    program: |
      c = block(program_id(0), CHUNK)
      store(out[c], load(v[c]) * 2.0)
reference: |
  z = v * 2
  out = z.reshape(3, -1, 7)
"""


def test_a_reference_that_raises_names_its_line_and_sizes(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text(SPEC)
    ls = load_spec(path)
    with pytest.raises(SpecError) as info:
        reference(ls, {"v": torch.randn(55)})
    e = info.value
    assert str(e.where) == f"{path}:15:3"  # the reshape, the second line of the block
    assert e.message.startswith("the reference raised RuntimeError at sizes L=55: shape '[3, -1, 7]' is invalid")


def test_kgen_check_reports_it_in_one_line(tmp_path, capsys):
    path = tmp_path / "twice.yaml"
    path.write_text(SPEC)
    with pytest.raises(SystemExit) as code:
        main(["check", str(path), "--target", "gfx942", "--emulate"])
    assert code.value.code == 1
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert err.startswith(f"error: {path}:15:3: the reference raised RuntimeError at sizes L=")
