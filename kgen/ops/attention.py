"""`flash_attn_func`: attention with flash-attn's calling convention over the fa2_fwd spec.

Checks the arguments (one sentence per mistake, before any launch), picks the variant from the
head dim and the flags, and calls the spec's op; autograd comes from the spec's pairing with
fa2_bwd, which receives `deterministic` through the forward (spec field autograd.options).
"""
from __future__ import annotations

import math

import torch

from ..errors import LaunchError

HEAD_DIMS = (32, 64, 128)
DTYPES = (torch.bfloat16, torch.float16)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"flash_attn_func: '{name}' must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise LaunchError(f"flash_attn_func: '{name}' has shape {tuple(t.shape)}; expected 4 dims (batch, seqlen, heads, head_dim)")
        if t.dtype not in DTYPES:
            raise LaunchError(f"flash_attn_func: '{name}' has dtype {t.dtype}; accepted: torch.bfloat16, torch.float16")
        if t.numel() == 0:
            raise LaunchError(f"flash_attn_func: '{name}' is empty (shape {tuple(t.shape)}); every dim must be at least 1")
        if t.stride(-1) != 1:
            raise LaunchError(f"flash_attn_func: '{name}' must have a contiguous last dim (stride 1), got strides {t.stride()}")
    if not (q.dtype == k.dtype == v.dtype):
        raise LaunchError(f"flash_attn_func: q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise LaunchError(f"flash_attn_func: q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise LaunchError(f"flash_attn_func: k has shape {tuple(k.shape)} and v {tuple(v.shape)}; they must match")
    b, _, h, d = q.shape
    if k.shape[0] != b or k.shape[3] != d:
        raise LaunchError(f"flash_attn_func: q is {tuple(q.shape)} and k is {tuple(k.shape)}; batch and head_dim must match")
    if d not in HEAD_DIMS:
        raise LaunchError(f"flash_attn_func: head_dim {d} is not supported; accepted: {', '.join(map(str, HEAD_DIMS))}")
    if h % k.shape[2]:
        raise LaunchError(f"flash_attn_func: q has {h} heads and k {k.shape[2]}; the query heads must be a multiple of the key/value heads")


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    softmax_scale: float | None = None, deterministic: bool = False) -> torch.Tensor:
    """softmax(q k^T * softmax_scale) v for q (B, SQ, H, D), k and v (B, SK, HKV, D); returns
    (B, SQ, H, D). softmax_scale defaults to 1/sqrt(D); causal masks align to the bottom-right."""
    _check(q, k, v)
    d = q.shape[-1]
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(d)
    if not (scale > 0 and math.isfinite(scale)):  # the spec takes row maxima of unscaled scores
        raise LaunchError(f"flash_attn_func: softmax_scale is {softmax_scale}; accepted: a positive finite number (default 1/sqrt(head_dim))")
    # the op's schema: inputs, scalars, variant options, then what autograd hands the backward
    o, _lse = torch.ops.kgen.fa2_fwd(q, k, v, scale, d, bool(causal), bool(deterministic))
    return o


def _register() -> None:
    """Define kgen::fa2_fwd (and its backward) now, outside any torch.compile trace: loading a
    spec reads files, which dynamo cannot trace."""
    from . import _op

    _op("fa2_fwd")
