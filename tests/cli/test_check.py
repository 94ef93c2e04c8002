"""`kgen check SPEC --target gfx942 --emulate`: usage errors in one line (exit 2), a table of
every output's error against its tolerance, exit 0 when all pass and 1 on a mismatch, for a
user's spec outside specs/ as for the shipped ones."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cli import MATMUL, kgen, one_line_error  # noqa: E402

from kgen.backends import available  # noqa: E402

USAGE = [
    (["check"], "kgen check needs a spec file: kgen check SPEC --target gfx942 --emulate"),
    (["check", MATMUL], "kgen check needs --target; accepted: gfx942, gfx90a (with --emulate)"),
    (["check", MATMUL, "-t", "gfx942"],
     "kgen check runs kernels in emulation only: add --emulate (the GPU tests run them on hardware)"),
    (["check", MATMUL, "-t", "sm_90", "--emulate"], "no emulation for sm_90 (a cuda target); accepted: gfx90a, gfx942"),
    (["check", MATMUL, "-t", "gfx942", "--emulate", "-s", "Q=3"], "--size Q is not a size of matmul; accepted: M, N, K"),
    (["check", MATMUL, "-t", "gfx942", "--emulate", "-s", "M=abc"],
     "kgen check: argument --size/-s: takes NAME=VALUE with a positive whole number (e.g. seqlen=100), got 'M=abc' "
     "(see kgen check --help)"),
    (["check", MATMUL, "-t", "gfx942", "--emulate", "-v", "dtype=fp64"],
     "unknown value 'fp64' for variant axis 'dtype'; accepted: bf16, fp16"),
]


@pytest.mark.parametrize("argv, message", USAGE, ids=[" ".join(a[2:]) or "(none)" for a, _ in USAGE])
def test_check_usage_errors(capsys, argv, message):
    code = 1 if "no emulation" in message else 2
    assert one_line_error(capsys, argv, code) == message


# A user's spec: an int32 input whose domain says which values are valid (a gate of 0, 1 or 2
# per row), ragged in both dims at the check's sizes.
ROW_GATE = """\
kgen: 1
name: row_gate
summary: y = x * gate[row], gate an int32 per row in 0..2
variants:
  dtype: [bf16, fp32]
sizes: [M, N]
tensors:
  x: {shape: [M, N], dtype: $dtype}
  gate: {shape: [M], dtype: int32, domain: {range: [0, 3]}}
  y: {shape: [M, N], dtype: $dtype, role: output}
tunables: {BLOCK_M: 4, BLOCK_N: 128, WARPS: 4}
kernels:
  - name: fwd
    grid: cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)
    warps: WARPS
    program: |
      rows = block(program_id(0), BLOCK_M)
      cols = block(program_id(1), BLOCK_N)
      g = load(gate[rows]).to(fp32)
      t = load(x[rows, cols]).to(fp32)
      store(y[rows, cols], (t * g[:, None]).to(dtype))
reference: |
  y = x * REFERENCE
"""


@pytest.mark.skipif(not available("hip"), reason="no clang for HIP found")
def test_a_users_spec_passes_and_a_wrong_one_fails(capsys, tmp_path):
    good = tmp_path / "row_gate.yaml"
    good.write_text(ROW_GATE.replace("REFERENCE", "gate[:, None].to(x.dtype)"))
    code, out, err = kgen(capsys, "check", str(good), "-t", "gfx942", "--emulate", "-j", "1")
    assert code == 0, err
    assert out.count(" ok ") >= 2 and "mismatch" not in out, out
    assert "2 of 2 variants passed" in err

    bad = tmp_path / "bad" / "row_gate.yaml"
    bad.parent.mkdir()
    bad.write_text(ROW_GATE.replace("REFERENCE", "(gate[:, None] + 1).to(x.dtype)"))
    code, out, err = kgen(capsys, "check", str(bad), "-t", "gfx942", "--emulate", "-v", "dtype=fp32", "-s", "M=9")
    assert code == 1
    assert "mismatch" in out and "0 of 1 variants passed" in err and "y (torch.float32): max error" in err, (out, err)
