"""`flash_attn_varlen_func`: flash-attn's packed-sequence attention over specs/variants.

q (total_q, H, D), k and v (total_k, HKV, D) hold sequences one after another; cu_seqlens_q and
cu_seqlens_k (int32, nseq + 1) their first positions and the totals. They run as one row of the
variant specs (B = 1, views of the caller's tensors, no copy): fa2_document where the query and
key sequences are the same (one cu_seqlens tensor passed for both, the usual self-attention of
packed training, or two of equal values), its mask bounded by the sequence ids alone; fa2_varlen otherwise, where the
per-sequence bottom-right causal term is measured (docs/SPEC_LANGUAGE.md, "Block phases").
window_size, softcap, alibi_slopes and dropout_p compose their variant files with that one
(kgen/ops/variants.py); varlen.yaml's `diagonal` hook aligns the window and ALiBi's distance to
each sequence's bottom-right.

The sequence ids the masks read are made from cu_seqlens on the device, once per cu_seqlens
tensor: kept while the caller passes the same tensor object at the same version (every layer of
a step), so that the checks below, which read cu_seqlens on the host, run once per step and
the block tables that the ids' runtime measurement fills (kgen/runtime/plan.py Kept) are
reused by every layer.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch

from ..errors import LaunchError
from .attention import _slopes, _window, check_qkv, check_scale, dropout_rate, keyword_parts
from .variants import attend

FN = "flash_attn_varlen_func"


class _Ids:
    """Per cu_seqlens tensor: its sequence ids over `total` positions (int32, (1, total)), the
    tensor as one row (1, nseq + 1), the longest sequence, and its values on the host. The row is kept too: a new view
    each call would be a new input object, and the block table measured from it would be
    measured again on every call."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[weakref.ref, int, int, tuple[torch.Tensor, torch.Tensor, int]]] = {}

    def get(self, cu: torch.Tensor, total: int, name: str) -> tuple[torch.Tensor, torch.Tensor, int, tuple[int, ...]]:
        hit = self._kept.get(id(cu))
        if hit is not None and hit[0]() is cu and hit[1] == cu._version and hit[2] == total:
            return hit[3]
        host = _check_cu(cu, total, name)
        positions = torch.arange(total, device=cu.device, dtype=torch.int32)
        ids = (torch.searchsorted(cu, positions, right=True) - 1).to(torch.int32).view(1, total)
        self._kept = {k: e for k, e in self._kept.items() if e[0]() is not None}  # forget freed tensors
        longest = max(b - a for a, b in zip(host, host[1:]))
        self._kept[id(cu)] = (weakref.ref(cu), cu._version, total, (ids, cu.view(1, -1), longest, host))
        return self._kept[id(cu)][3]


_ids = _Ids()


def _check_cu(cu: Any, total: int, name: str) -> tuple[int, ...]:
    """cu_seqlens as flash-attn takes it (int32, 1-D, 0 first, non-decreasing, the total last);
    returns its values, read on the host."""
    if not isinstance(cu, torch.Tensor):
        raise LaunchError(f"{FN}: '{name}' must be a torch.Tensor, got {type(cu).__name__}")
    if cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() < 2:
        raise LaunchError(f"{FN}: '{name}' is {cu.dtype} {tuple(cu.shape)}; accepted: a torch.int32 tensor of shape "
                          "(number of sequences + 1,)")
    host = cu.tolist()
    if host[0] != 0 or host[-1] != total or any(b < a for a, b in zip(host, host[1:])):
        shown = host if len(host) <= 8 else [*host[:4], "...", *host[-3:]]
        raise LaunchError(f"{FN}: '{name}' is {shown}; accepted: offsets starting at 0, non-decreasing, ending at the "
                          f"packed length {total}")
    return tuple(host)


def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: float | None = None, causal: bool = False,
                           window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                           alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                           return_attn_probs: bool = False) -> Any:
    """Attention within each packed sequence, as flash-attn's: sequence d's queries
    q[cu_seqlens_q[d]:cu_seqlens_q[d + 1]] attend to its keys k[cu_seqlens_k[d]:cu_seqlens_k[d + 1]];
    causal aligns each sequence's mask to its bottom-right. Returns (total_q, H, D), or with
    return_attn_probs=True (out, softmax_lse (H, total_q) fp32, None). max_seqlen_q/k must be
    at least the longest sequence (they are checked, not needed: the kernels walk the packed
    rows). window_size, softcap, alibi_slopes ((H,): one slope per head) and dropout_p as
    flash_attn_func's, each sequence's window and ALiBi distance aligned to its own bottom-right."""
    check_qkv(q, k, v, FN)
    rate = dropout_rate(dropout_p, FN)
    scale = check_scale(softmax_scale, q.shape[-1], FN)
    window = _window(window_size, bool(causal), q.shape[0], k.shape[0], FN)
    parts = keyword_parts(FN, window, softcap, _slopes(alibi_slopes, q, FN) if alibi_slopes is not None else None, rate)
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if isinstance(cu, torch.Tensor) and cu.device != q.device:
            raise LaunchError(f"{FN}: {name} is on {cu.device} and q on {q.device}; they must be on one device")
    seq_q, row_q, longest_q, host_q = _ids.get(cu_seqlens_q, q.shape[0], "cu_seqlens_q")
    seq_k, row_k, longest_k, host_k = ((seq_q, row_q, longest_q, host_q) if cu_seqlens_k is cu_seqlens_q
                                       else _ids.get(cu_seqlens_k, k.shape[0], "cu_seqlens_k"))
    # one packing for queries and keys (one tensor, or two of equal values): every sequence is as
    # long in keys as in queries, so bottom-right causal is fa2_document's top-left one
    same = host_k == host_q
    if cu_seqlens_k.shape != cu_seqlens_q.shape:
        raise LaunchError(f"{FN}: cu_seqlens_q has {cu_seqlens_q.numel() - 1} sequences and cu_seqlens_k "
                          f"{cu_seqlens_k.numel() - 1}; they must match")
    for name, given, longest in (("max_seqlen_q", max_seqlen_q, longest_q), ("max_seqlen_k", max_seqlen_k, longest_k)):
        if isinstance(given, bool) or not isinstance(given, int) or given < longest:
            raise LaunchError(f"{FN}: {name} is {given!r} but the longest sequence has {longest}; accepted: an int >= {longest}")
    if same:
        parts.append(("document", {"seg": seq_k, "starts": row_q}))
    else:
        parts.append(("varlen", {"seq_q": seq_q, "seq_k": seq_k, "cu_seqlens_q": row_q, "cu_seqlens_k": row_k}))
    o, lse = attend(parts, q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), softmax_scale=scale, head_dim=q.shape[-1],
                    causal=bool(causal) and window is None, deterministic=bool(deterministic))
    return (o[0], lse[0], None) if return_attn_probs else o[0]
