"""flash-attn's keywords together (kgen/ops/variants.py composes the variant files they ask for,
kgen.compose): flash_attn_func and flash_attn_varlen_func with windows, softcap, ALiBi and dropout
at once, forward and backward, against flash-attn's meaning written out here in float64 (each
packed sequence aligned to its own bottom-right; dropout's keep mask from kgen/ir/philox.py at the
offsets specs/variants/dropout.yaml documents), the tolerance set by the same computation in
bf16; on the interpreter, in the gfx942 emulation and on the GPU."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import helpers  # noqa: E402


D = 32


def _attend(q, k, v, scale, *, causal, window, softcap, slopes, p, seed, lowp, starts_q=None, starts_k=None):
    """flash-attn's attention of q (B, SQ, H, D) on k, v (B, SK, HKV, D), or of packed sequences
    (B = 1, starts_* their cu_seqlens) sequence by sequence: (o, lse (B, H, SQ)). `lowp`: as a bf16
    kernel rounds (scores from bf16 inputs in fp32, probabilities rounded to bf16 for p v)."""
    b, sq, h, _ = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    cast = (lambda t: t.float()) if lowp else (lambda t: t.double())
    qh, kh, vh = (cast(t.transpose(1, 2)) for t in (q, k, v))
    kh, vh = kh.repeat_interleave(h // hkv, 1), vh.repeat_interleave(h // hkv, 1)
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    if starts_q is None:
        same, diag = torch.ones(sq, sk, dtype=torch.bool), i + sk - sq
    else:
        dq = torch.bucketize(torch.arange(sq), torch.tensor(starts_q[1:-1]), right=True)[:, None]
        dk = torch.bucketize(torch.arange(sk), torch.tensor(starts_k[1:-1]), right=True)[None, :]
        same = dq == dk
        diag = i - torch.tensor(starts_q)[dq + 1] + torch.tensor(starts_k)[dq + 1]  # each sequence's bottom-right
    seen = same & ((j <= diag) if causal else True)
    if window is not None:
        left, right = window
        seen = seen & ((j >= diag - left) if left >= 0 else True) & ((j <= diag + right) if right >= 0 else True)
    s = qh @ kh.transpose(-1, -2) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        s = s - cast(slopes).view(-1, h, 1, 1) * (diag - j).abs()
    s = torch.where(seen, s, -math.inf)
    if lowp:
        s = s.to(torch.bfloat16).float()
    lse = torch.logsumexp(s, -1)
    prob = torch.softmax(s, -1).nan_to_num(0.0)
    if p:
        prob = prob * helpers.dropout_factors(b, h, sq, sk, p, seed).to(prob.dtype)
    if lowp:
        return (prob.to(torch.bfloat16) @ vh.to(torch.bfloat16)).transpose(1, 2), lse
    return (prob @ vh).transpose(1, 2), lse


def _check(call, q, k, v, do, **meaning):
    """`call` (the kgen function on leaves (B, S, H, D); a packed call takes row 0) against the
    meaning: out, lse and the three gradients."""
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o, lse = call(*leaves)
    got = [o, lse, *torch.autograd.grad(o, leaves, do.to(o.device))]
    out = []
    for lowp in (False, True):
        xs = [t.clone().requires_grad_() for t in (q, k, v)] if lowp else [t.double().requires_grad_() for t in (q, k, v)]
        ow, lw = _attend(*xs, lowp=lowp, **meaning)
        out.append([ow, lw, *torch.autograd.grad(ow, xs, do.to(ow.dtype))])
    for n, g, w, l in zip(("o", "lse", "dq", "dk", "dv"), got, *out):
        helpers.check_close(n, g.detach().cpu(), w.detach(), l.detach())


DENSE = [  # (causal, window_size, softcap, alibi, dropout_p)
    (False, (40, 7), 0.0, True, 0.0),
    (True, (-1, -1), 2.5, True, 0.0),
    (True, (30, -1), 2.5, True, 0.15),
    (False, (-1, -1), 0.0, True, 0.2),
]


def _dense(device: str, causal, window_size, softcap, alibi, p, **load):
    from kgen.ops import flash_attn_func
    from kgen.ops.attention import dropout_seed

    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 90, 4, D, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(2, 120, 2, D, generator=gen).to(torch.bfloat16) for _ in range(2))
    do = torch.randn(2, 90, 4, D, generator=gen).to(torch.bfloat16)
    slopes = torch.rand(4, generator=gen) if alibi else None
    torch.manual_seed(41)
    seed = dropout_seed()
    torch.manual_seed(41)

    def call(*qkv):
        o, lse, _ = flash_attn_func(*(t.to(device) for t in qkv), dropout_p=p, causal=causal, window_size=window_size,
                                    softcap=softcap, alibi_slopes=slopes.to(device) if alibi else None,
                                    return_attn_probs=True)
        return o, lse
    window = None if window_size == (-1, -1) else (window_size[0], 0 if causal else window_size[1])
    _check(call, q, k, v, do, scale=1 / math.sqrt(D), causal=causal, window=window, softcap=softcap,
           slopes=slopes, p=p, seed=seed)


@pytest.mark.parametrize("causal, window_size, softcap, alibi, p", DENSE)
def test_flash_attn_func_keywords_together(causal, window_size, softcap, alibi, p):
    _dense("cpu", causal, window_size, softcap, alibi, p)


STARTS_Q = [0, 37, 37, 100, 150]  # an empty sequence, ragged lengths
STARTS_K = [0, 50, 61, 90, 170]

PACKED = [  # (separate q/k packings, causal, window_size, softcap, alibi, dropout_p)
    (False, True, (20, -1), 3.0, True, 0.0),
    (True, True, (25, -1), 0.0, True, 0.0),
    (True, False, (-1, -1), 2.0, False, 0.1),
    (False, False, (10, 10), 0.0, False, 0.0),
]


def _packed(device: str, separate, causal, window_size, softcap, alibi, p):
    from kgen.ops import flash_attn_varlen_func
    from kgen.ops.attention import dropout_seed

    sq, sk = STARTS_Q[-1], STARTS_K[-1] if separate else STARTS_Q[-1]
    starts_k = STARTS_K if separate else STARTS_Q
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(sq, 4, D, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(sk, 2, D, generator=gen).to(torch.bfloat16) for _ in range(2))
    do = torch.randn(sq, 4, D, generator=gen).to(torch.bfloat16)
    slopes = torch.rand(4, generator=gen) if alibi else None
    cu_q = torch.tensor(STARTS_Q, dtype=torch.int32, device=device)
    cu_k = torch.tensor(starts_k, dtype=torch.int32, device=device) if separate else cu_q
    torch.manual_seed(43)
    seed = dropout_seed()
    torch.manual_seed(43)

    def call(*qkv):
        o, lse, _ = flash_attn_varlen_func(*(t[0].to(device) for t in qkv), cu_q, cu_k, 80, 80, dropout_p=p, causal=causal,
                                           window_size=window_size, softcap=softcap,
                                           alibi_slopes=slopes.to(device) if alibi else None, return_attn_probs=True)
        return o[None], lse[None]  # (total, H, D) and (H, total) as the meaning's one row
    window = None if window_size == (-1, -1) else (window_size[0], 0 if causal else window_size[1])
    _check(call, q[None], k[None], v[None], do[None], scale=1 / math.sqrt(D), causal=causal, window=window,
           softcap=softcap, slopes=slopes, p=p, seed=seed, starts_q=STARTS_Q, starts_k=starts_k)


@pytest.mark.parametrize("separate, causal, window_size, softcap, alibi, p", PACKED)
def test_flash_attn_varlen_func_keywords(separate, causal, window_size, softcap, alibi, p):
    _packed("cpu", separate, causal, window_size, softcap, alibi, p)


def test_packed_alibi_takes_one_slope_per_head():
    from kgen.errors import LaunchError
    from kgen.ops import flash_attn_varlen_func

    q = torch.randn(10, 2, D).to(torch.bfloat16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.raises(LaunchError) as e:
        flash_attn_varlen_func(q, q, q, cu, cu, 6, 6, alibi_slopes=torch.rand(2, 2))
    assert str(e.value) == ("flash_attn_varlen_func: alibi_slopes is torch.float32 (2, 2); accepted: a torch.float32 "
                            "tensor of shape (2,) (one slope per head for every sequence)")


def test_gfx942_emulation():
    from kgen.backends import available
    from kgen.knobs import knobs

    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    import kgen

    variants = ROOT / "specs" / "variants"
    op = kgen.compose(variants / "varlen.yaml", variants / "sliding_window.yaml", variants / "alibi.yaml",
                      target="gfx942", emulate=True)
    gen = torch.Generator().manual_seed(8)
    q = torch.randn(1, STARTS_Q[-1], 2, D, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(1, STARTS_K[-1], 1, D, generator=gen).to(torch.bfloat16) for _ in range(2))
    do = torch.randn(1, STARTS_Q[-1], 2, D, generator=gen).to(torch.bfloat16)
    slopes = torch.rand(1, 2, generator=gen)
    ids = {n: torch.bucketize(torch.arange(s[-1]), torch.tensor(s[1:-1]), right=True).to(torch.int32)[None].contiguous()
           for n, s in (("seq_q", STARTS_Q), ("seq_k", STARTS_K))}
    cus = {"cu_seqlens_q": torch.tensor([STARTS_Q], dtype=torch.int32), "cu_seqlens_k": torch.tensor([STARTS_K], dtype=torch.int32)}

    def call(*qkv):
        return op(*qkv, **ids, **cus, slopes=slopes, softmax_scale=1 / math.sqrt(D), window_left=15, window_right=0,
                  causal=False)
    _check(call, q, k, v, do, scale=1 / math.sqrt(D), causal=False, window=(15, 0), softcap=0.0, slopes=slopes,
           p=0.0, seed=0, starts_q=STARTS_Q, starts_k=STARTS_K)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("case", DENSE + PACKED)
def test_gpu(case, monkeypatch):
    monkeypatch.setenv("KGEN_POISON", "1")
    if len(case) == 5:
        _dense("cuda", *case)
    else:
        _packed("cuda", *case)
