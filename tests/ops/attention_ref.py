"""Attention computed by torch, for the tests of kgen.ops.flash_attn_func: in float64 (the
ground truth) or in the inputs' own dtype (the yardstick of the tolerance)."""
from __future__ import annotations

import math

import torch


def attention(q, k, v, causal: bool, scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v for (B, S, H, D) tensors, computed in q's dtype; GQA by repeating
    k and v; causal aligned to the bottom-right; rows that see no key give 0."""
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kk = k.repeat_interleave(h // hkv, dim=2).transpose(1, 2)
    vv = v.repeat_interleave(h // hkv, dim=2).transpose(1, 2)
    s = (q.transpose(1, 2) @ kk.transpose(-1, -2)) * scale
    if causal:
        seen = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        s = s.masked_fill(~seen, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (p @ vv).transpose(1, 2)


def with_grads(q, k, v, dout, causal: bool, dtype: torch.dtype | None):
    """(out, dq, dk, dv) of `attention` computed in `dtype` (None: the inputs' own dtype)."""
    xs = [t.detach().to(dtype or t.dtype).requires_grad_() for t in (q, k, v)]
    out = attention(*xs, causal)
    grads = torch.autograd.grad(out, xs, dout.to(out.dtype))
    return (out.detach(), *grads)
