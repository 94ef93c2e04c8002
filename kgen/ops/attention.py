"""`flash_attn_func`: attention with flash-attn's calling convention over the fa2_fwd spec and
the variants that extend it (specs/variants: window_size, softcap, alibi_slopes, dropout_p); the argument
checks that kgen/ops/varlen.py's `flash_attn_varlen_func` shares.

Checks the arguments (one sentence per mistake, before any launch), picks the spec from the
keywords and the variant from the head dim and the flags, and calls the spec's op; autograd
comes from the spec's pairing with fa2_bwd (a variant's backward is derived from it with the
same hooks), which receives `deterministic` through the forward (spec field autograd.options).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from ..errors import LaunchError
from .variants import SHIPPED, Part, attend

# every multiple of 8 in this range (specs/fa2_fwd.yaml open_variants: other than 32, 64 and
# 128 the tiles are the next power of two wide, built at the first call)
HEAD_DIM_RANGE = (16, 256)
DTYPES = (torch.bfloat16, torch.float16)


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fn: str = "flash_attn_func") -> None:
    """q, k, v as `fn` takes them: (batch, seqlen, heads, head_dim), or for the varlen entry
    point (total, heads, head_dim)."""
    dims, layout = (3, "(total, heads, head_dim)") if fn == "flash_attn_varlen_func" else (4, "(batch, seqlen, heads, head_dim)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{fn}: '{name}' must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != dims:
            raise LaunchError(f"{fn}: '{name}' has shape {tuple(t.shape)}; expected {dims} dims {layout}")
        if t.dtype not in DTYPES:
            raise LaunchError(f"{fn}: '{name}' has dtype {t.dtype}; accepted: torch.bfloat16, torch.float16")
        if t.numel() == 0:
            raise LaunchError(f"{fn}: '{name}' is empty (shape {tuple(t.shape)}); every dim must be at least 1")
        if t.stride(-1) != 1:
            raise LaunchError(f"{fn}: '{name}' must have a contiguous last dim (stride 1), got strides {t.stride()}")
    if not (q.dtype == k.dtype == v.dtype):
        raise LaunchError(f"{fn}: q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise LaunchError(f"{fn}: q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise LaunchError(f"{fn}: k has shape {tuple(k.shape)} and v {tuple(v.shape)}; they must match")
    h, d = q.shape[-2:]
    if (dims == 4 and k.shape[0] != q.shape[0]) or k.shape[-1] != d:
        what = "batch and head_dim" if dims == 4 else "head_dim"
        raise LaunchError(f"{fn}: q is {tuple(q.shape)} and k is {tuple(k.shape)}; {what} must match")
    lo, hi = HEAD_DIM_RANGE
    if d % 8 or not lo <= d <= hi:
        raise LaunchError(f"{fn}: head_dim {d} is not supported; accepted: a multiple of 8 from {lo} to {hi}")
    if h % k.shape[-2]:
        raise LaunchError(f"{fn}: q has {h} heads and k {k.shape[-2]}; the query heads must be a multiple of the key/value heads")


def check_scale(softmax_scale: Any, d: int, fn: str) -> float:
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(d)
    if not (scale > 0 and math.isfinite(scale)):  # the spec takes row maxima of unscaled scores
        raise LaunchError(f"{fn}: softmax_scale is {softmax_scale}; accepted: a positive finite number (default 1/sqrt(head_dim))")
    return scale


def dropout_rate(dropout_p: Any, fn: str) -> float:
    """flash-attn's dropout_p: a probability in [0, 1)."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0 <= dropout_p < 1:
        raise LaunchError(f"{fn}: dropout_p is {dropout_p!r}; accepted: a number with 0 <= dropout_p < 1")
    return float(dropout_p)


def dropout_seed() -> int:
    """The int64 seed of one call's dropout mask, drawn from torch's default (CPU) generator, so
    that torch.manual_seed makes a run repeat; the backward reuses it (specs/variants/dropout.yaml)."""
    return int(torch.randint(-2**63, 2**63 - 1, (), dtype=torch.int64))


def _window(window_size: Any, causal: bool, sq: int, sk: int, fn: str) -> tuple[int, int] | None:
    """flash-attn's window_size=(left, right) as the window spec's scalars (-1: no limit, which
    the mask bounds by every key; causal: right = 0), or None for no window."""
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or any(isinstance(w, bool) or not isinstance(w, int) or w < -1 for w in window_size)):
        raise LaunchError(f"{fn}: window_size is {window_size!r}; accepted: (left, right), each -1 (no limit) "
                          "or a number of keys >= 0")
    left, right = window_size
    if causal:
        right = 0 if right == -1 else min(right, 0)
    if left == -1 and right == -1:
        return None
    if causal and left == -1:
        return None  # the causal mask itself
    unlimited = sq + sk
    return (unlimited if left == -1 else left), (unlimited if right == -1 else right)


def _slopes(alibi_slopes: Any, q: torch.Tensor, fn: str) -> torch.Tensor:
    """alibi_slopes as the (B, H) fp32 tensor specs/variants/alibi.yaml loads: (H,) for every
    batch row, or (B, H) (flash_attn_func only: the packed call's one row holds every sequence)."""
    b, h = q.shape[0], q.shape[-2]
    shapes = ((h,), (b, h)) if q.dim() == 4 else ((h,),)
    if not isinstance(alibi_slopes, torch.Tensor) or alibi_slopes.dtype != torch.float32 or tuple(alibi_slopes.shape) not in shapes:
        got = f"{alibi_slopes.dtype} {tuple(alibi_slopes.shape)}" if isinstance(alibi_slopes, torch.Tensor) else type(alibi_slopes).__name__
        accepted = f"({h},) or ({b}, {h})" if q.dim() == 4 else f"({h},) (one slope per head for every sequence)"
        raise LaunchError(f"{fn}: alibi_slopes is {got}; accepted: a torch.float32 tensor of shape {accepted}")
    if alibi_slopes.device != q.device:
        raise LaunchError(f"{fn}: alibi_slopes is on {alibi_slopes.device} and q on {q.device}; they must be on one device")
    if q.dim() == 3:
        return alibi_slopes.view(1, h)
    return alibi_slopes.expand(b, h).contiguous()


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: float | None = None, causal: bool = False,
                    window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                    return_attn_probs: bool = False) -> Any:
    """softmax(q k^T * softmax_scale) v for q (B, SQ, H, D), k and v (B, SK, HKV, D); returns
    (B, SQ, H, D). The arguments in flash-attn's order. softmax_scale defaults to 1/sqrt(D);
    causal masks align to the bottom-right.
    As flash-attn: window_size=(left, right) lets query i see keys i + SK - SQ - left to
    i + SK - SQ + right (-1: no limit); softcap > 0 maps each scaled score s to
    softcap * tanh(s / softcap); alibi_slopes (H,) or (B, H) fp32 adds -slope * |i + SK - SQ - j|
    (to the capped score, as flash-attn); dropout_p > 0 drops each probability where a Philox
    byte is below 256 dropout_p (as flash-attn, the rate kept is 1 - ceil(256 dropout_p) / 256;
    the rest are scaled by its inverse), the mask drawn from a seed of torch's default generator
    (torch.manual_seed repeats it) and regenerated in the backward. Any of them together:
    one runs its spec in specs/variants, several their composition (kgen/ops/variants.py).
    return_attn_probs=True returns (out, softmax_lse (B, H, SQ) fp32, None): the natural-log
    logsumexp of each query row's scaled scores (-inf for a row that sees no key), without a
    gradient, as flash-attn's; the third, flash-attn's dropout mask, is None (not returned)."""
    fn = "flash_attn_func"
    check_qkv(q, k, v)
    rate = dropout_rate(dropout_p, fn)
    d = q.shape[-1]
    scale = check_scale(softmax_scale, d, fn)
    window = _window(window_size, bool(causal), q.shape[1], k.shape[1], fn)
    parts = keyword_parts(fn, window, softcap, _slopes(alibi_slopes, q, fn) if alibi_slopes is not None else None, rate)
    # the window's right edge is the causal mask
    o, lse = attend(parts, q, k, v, softmax_scale=scale, head_dim=d, causal=bool(causal) and window is None,
                    deterministic=bool(deterministic))
    return (o, lse, None) if return_attn_probs else o


def keyword_parts(fn: str, window: tuple[int, int] | None, softcap: Any, slopes: torch.Tensor | None,
                  rate: float) -> list[Part]:
    """The variant files (kgen/ops/variants.py) that flash-attn's keywords ask for, each with what
    it adds to the call; any of them together."""
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not (softcap >= 0 and math.isfinite(softcap)):
        raise LaunchError(f"{fn}: softcap is {softcap!r}; accepted: 0 (none) or a positive finite number")
    parts: list[Part] = []
    if window is not None:
        parts.append(("sliding_window", {"window_left": window[0], "window_right": window[1]}))
    if softcap > 0:
        parts.append(("softcap", {"softcap": float(softcap)}))
    if slopes is not None:
        parts.append(("alibi", {"slopes": slopes}))
    if rate > 0:
        parts.append(("dropout", {"dropout_p": rate, "seed": dropout_seed()}))
    return parts


def _register() -> None:
    """Define kgen::fa2_fwd (and its backward) now, outside any torch.compile trace: loading a
    spec reads files, which dynamo cannot trace."""
    from . import _op, _variant

    _op("fa2_fwd")
    for name in SHIPPED.values():
        if name != "fa2_fwd":
            _variant(name)
