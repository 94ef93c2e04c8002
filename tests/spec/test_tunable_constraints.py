"""Constraints that name tunables pick the tunable choices of each variant (kgen.build
.tunable_candidates); the call-time check skips them (it knows sizes, not tunables)."""
from pathlib import Path

import pytest
import torch

import kgen
from kgen.build import tunable_candidates
from kgen.errors import SpecError
from kgen.spec.load import load_spec

SPEC = """\
kgen: 1
name: chunked
summary: constraints on tunables
variants:
  chunk: [32, 64, 128]
sizes: [N]
tensors:
  x: {shape: [N], dtype: fp32}
  y: {shape: [N], dtype: fp32, role: output}
constraints: ["chunk % BLOCK == 0", "N > 0"]
tunables: {BLOCK: [128, 64], WARPS: 4}
kernels:
  - name: main
    grid: cdiv(N, BLOCK)
    warps: WARPS
    program: |
      r = block(program_id(0), BLOCK)
      store(y[r], load(x[r]) * 2.0)
reference: |
  y = x * 2
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "chunked.yaml"
    path.write_text(SPEC)
    return path


def test_each_variant_gets_the_tunables_its_constraints_allow(spec_file):
    ls = load_spec(spec_file)
    assert tunable_candidates(ls, {"chunk": 128}) == [{"BLOCK": 128, "WARPS": 4}, {"BLOCK": 64, "WARPS": 4}]
    assert tunable_candidates(ls, {"chunk": 64}) == [{"BLOCK": 64, "WARPS": 4}]
    with pytest.raises(SpecError, match=r"no tunable choice of variant \{'chunk': 32\} meets the constraints chunk % BLOCK == 0"):
        tunable_candidates(ls, {"chunk": 32})


def test_the_call_checks_only_the_size_constraints(spec_file):
    op = kgen.load(spec_file)
    x = torch.randn(100)
    torch.testing.assert_close(op(x, chunk=64), x * 2)
