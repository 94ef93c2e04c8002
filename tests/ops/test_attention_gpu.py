"""kgen.ops.flash_attn_func on a GPU: output and gradients against float64 torch over the grid of
the FlashAttention issue, and bitwise-deterministic gradients with deterministic=True.

Outputs are NaN-poisoned (KGEN_POISON) so that an element no kernel writes fails; inputs are
fresh torch.randn. Tolerance (tests/helpers.py check_close): 2x the error of torch computing the
same attention in the input dtype, plus a floor. Code objects come from the user's kernel cache
(KGEN_CACHE_DIR; `kgen warm specs/fa2_fwd.yaml specs/fa2_bwd.yaml` fills it in parallel).
"""
from __future__ import annotations

import sys
import zlib
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ops
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
import attention_ref  # noqa: E402
import helpers  # noqa: E402



_NO_GPU = helpers.no_gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_NO_GPU is not None, reason=str(_NO_GPU))]

SEQLENS = [1, 17, 97, 128, 255, 1024, 1025, 2048]
PAIRS = [(1, 97), (97, 1), (17, 255), (255, 17), (128, 1025), (1025, 128), (2048, 1024), (1024, 2048)]
RATIOS = [(8, 1), (8, 2), (8, 8)]  # (H, HKV): MQA, GQA (4 query heads per key head), MHA


def _cases():
    i = 0
    for sq, sk in [(s, s) for s in SEQLENS] + PAIRS:
        for d in (32, 64, 128):
            for causal in (False, True):
                h, hkv = RATIOS[i % len(RATIOS)]
                b = 1 + i % 4 if sq * sk <= 1025 * 1025 else 1 + i % 2
                dtype = (torch.bfloat16, torch.float16)[i % 2]
                i += 1
                yield pytest.param(b, sq, sk, h, hkv, d, causal, dtype,
                                   id=f"b{b}-sq{sq}-sk{sk}-h{h}:{hkv}-d{d}-{'causal' if causal else 'full'}-{str(dtype)[6:]}")


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setenv("KGEN_POISON", "1")


@pytest.mark.parametrize("b, sq, sk, h, hkv, d, causal, dtype", list(_cases()))
def test_flash_attn_matches_float64(b, sq, sk, h, hkv, d, causal, dtype):
    from kgen.ops import flash_attn_func

    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{b}{sq}{sk}{h}{hkv}{d}{causal}".encode()))
    q = torch.randn(b, sq, h, d, device="cuda", generator=gen).to(dtype).requires_grad_()
    k = torch.randn(b, sk, hkv, d, device="cuda", generator=gen).to(dtype).requires_grad_()
    v = torch.randn(b, sk, hkv, d, device="cuda", generator=gen).to(dtype).requires_grad_()
    dout = torch.randn(b, sq, h, d, device="cuda", generator=gen).to(dtype)
    out = flash_attn_func(q, k, v, causal=causal)
    got = (out, *torch.autograd.grad(out, (q, k, v), dout))
    ref = attention_ref.with_grads(q, k, v, dout, causal, torch.float64)
    low = attention_ref.with_grads(q, k, v, dout, causal, None)
    for name, g, r, lo in zip(("out", "dq", "dk", "dv"), got, ref, low):
        helpers.check_close(name, g, r, lo)


@pytest.mark.parametrize("d", [128, 96, 256])  # 96: a padded tile; 256: dk and dv whole over 64 keys
@pytest.mark.parametrize("causal", [False, True])
def test_deterministic_gradients_are_bitwise_equal(causal, d):
    from kgen.ops import flash_attn_func

    gen = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(2, 1025, 8, d, device="cuda", generator=gen).bfloat16().requires_grad_()
    k = torch.randn(2, 1025, 2, d, device="cuda", generator=gen).bfloat16().requires_grad_()
    v = torch.randn(2, 1025, 2, d, device="cuda", generator=gen).bfloat16().requires_grad_()
    dout = torch.randn(2, 1025, 8, d, device="cuda", generator=gen).bfloat16()
    first = None
    for _ in range(20):
        out = flash_attn_func(q, k, v, causal=causal, deterministic=True)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        if first is None:
            first = grads
            ref = attention_ref.with_grads(q, k, v, dout, causal, torch.float64)
            low = attention_ref.with_grads(q, k, v, dout, causal, None)
            for name, g, r, lo in zip(("dq", "dk", "dv"), grads, ref[1:], low[1:]):
                helpers.check_close(name, g, r, lo)
        else:
            for name, a, b in zip(("dq", "dk", "dv"), first, grads):
                assert torch.equal(a, b), f"{name} differs between deterministic runs"


def _padded_cases():
    # head_dims built at their first call, in tiles of the next power of two: ragged lengths,
    # both masks, both dtypes, GQA and MHA
    shapes = [(2, 97, 255, 8, 2), (1, 1025, 1025, 8, 8), (3, 255, 17, 8, 1)]
    for i, d in enumerate((16, 24, 40, 72, 80, 96, 120, 136, 192, 200, 256)):
        for j, causal in enumerate((False, True)):
            b, sq, sk, h, hkv = shapes[(i + j) % len(shapes)]
            dtype = (torch.bfloat16, torch.float16)[(i + j) % 2]
            yield pytest.param(b, sq, sk, h, hkv, d, causal, dtype,
                               id=f"b{b}-sq{sq}-sk{sk}-h{h}:{hkv}-d{d}-{'causal' if causal else 'full'}-{str(dtype)[6:]}")


@pytest.mark.parametrize("b, sq, sk, h, hkv, d, causal, dtype", list(_padded_cases()))
def test_padded_head_dims_match_float64(b, sq, sk, h, hkv, d, causal, dtype):
    test_flash_attn_matches_float64(b, sq, sk, h, hkv, d, causal, dtype)
