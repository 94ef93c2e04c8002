"""block_phases() over a mask true everywhere (kgen/lang/phases.py), on the CPU interpreter: only
N masks, so the blocks below N are walked in the unmasked phase and only the partial last one in
a masked phase; with bounded=False (a program that handles N itself) every block is unmasked.
Each program counts the masked and the whole blocks it walks and each row's visible columns."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
import helpers  # noqa: E402

from kgen.spec.load import load_spec  # noqa: E402

SPEC = """\
kgen: 1
name: everywhere
summary: the phases of a mask true everywhere, counted
variants:
  bounded: [true, false]
sizes: [B, S]
tensors:
  x: {shape: [B, S], dtype: fp32}
  count: {shape: [B, S], dtype: fp32, role: output}
  walked: {shape: [B, "cdiv(S, 8)", 2], dtype: int32, role: output}
hooks:
  mask_mod:
    args: [b, q_idx, kv_idx]
    body: "True"
tunables: {BLOCK_M: 8, BLOCK_N: 16, WARPS: 4}
kernels:
  - name: count
    grid: cdiv(S, BLOCK_M), B
    warps: WARPS
    program: |
      b = program_id(1)
      qb = program_id(0)
      c = zeros((BLOCK_M,), fp32)
      n_masked = 0
      n_whole = 0
      for masked, start, stop in block_phases(mask_mod(b, span(qb * BLOCK_M, minimum(qb * BLOCK_M + BLOCK_M, S) - 1), ...), BLOCK_N, S, bounded=bounded):
          for j in range(start, stop):
              cols = j * BLOCK_N + arange(BLOCK_N)
              if masked:
                  c = c + sum(where(cols[None, :] < S, 1.0, 0.0) + zeros((BLOCK_M, BLOCK_N), fp32), axis=1)
                  n_masked = n_masked + 1
              else:
                  c = c + sum(where(cols[None, :] < S or not bounded, 1.0, 0.0) + zeros((BLOCK_M, BLOCK_N), fp32), axis=1)
                  n_whole = n_whole + 1
      store(count[b, block(qb, BLOCK_M)], c)
      store(walked[b, qb, 0], n_masked)
      store(walked[b, qb, 1], n_whole)
reference: |
  count = torch.full((B, S), float(S) if bounded else float(-(-S // 16) * 16))
  walked = torch.zeros(B, -(-S // 8), 2, dtype=torch.int32)
  if bounded:
      walked[..., 0] = 1 if S % 16 else 0
      walked[..., 1] = S // 16
  else:
      walked[..., 1] = -(-S // 16)
"""


@pytest.mark.parametrize("bounded", [True, False])
@pytest.mark.parametrize("s", [16, 37, 128, 203])
def test_a_mask_true_everywhere_masks_only_the_last_partial_block(tmp_path, bounded, s):
    path = tmp_path / "everywhere.yaml"
    path.write_text(SPEC)
    ls = load_spec(path)
    ins = {"x": torch.randn(2, s)}
    got = helpers.run_spec_cpu(ls, {"bounded": bounded}, dict(ins), {"B": 2, "S": s}, {})
    helpers.check_outputs(ls, got, ins, {}, {"bounded": bounded})
