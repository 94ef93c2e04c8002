"""The Mamba-2 chunked scan in plain PyTorch: the benchmark's "torch" peer and the GPU tests'
float64 reference at lengths where a step-by-step recurrence would be too slow.

The chunked form of SSD (Dao and Gu, "Transformers are SSMs", 2024, section 6): within a chunk
the output is a masked quadratic form (C B^T weighted by exp of segment sums of dt*A, causal);
across chunks a state of (headdim, dstate) per head is carried and decayed by each chunk's total.
With seq_idx (several sequences packed in each row) every term between positions of different
sequences is dropped, and the state carried across a chunk only where no sequence starts in it.
Every tensor op here is differentiable, so autograd through it gives reference gradients.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def effective_dt(dt: torch.Tensor, dt_bias: torch.Tensor | None, softplus: bool,
                 limit: tuple[float, float]) -> torch.Tensor:
    """dt' = clamp(softplus?(dt + dt_bias), *limit); softplus only below 20, as mamba-ssm."""
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    if softplus:
        dt = torch.where(dt <= 20.0, F.softplus(dt), dt)
    return dt.clamp(min=limit[0], max=limit[1])


def ssd_chunked(x, dt, A, B, C, chunk_size: int, D=None, dt_bias=None, dt_softplus: bool = False,
                dt_limit: tuple[float, float] = (0.0, math.inf), dtype: torch.dtype | None = None,
                initial_states=None, seq_idx=None):
    """(y, final_states) of mamba_chunk_scan_combined, computed in `dtype` (default x's): y like x,
    final_states (batch, nheads, headdim, dstate). D is (nheads,), (nheads, headdim) or None;
    initial_states (batch, nheads, headdim, dstate) or None (zeros); seq_idx (batch, seqlen),
    non-decreasing, or None (one sequence)."""
    dtype = dtype or x.dtype
    x, dt, A, B, C = (t.to(dtype) for t in (x, dt, A, B, C))
    b, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    dt = effective_dt(dt, None if dt_bias is None else dt_bias.to(dtype), dt_softplus, dt_limit)
    pad = -seqlen % chunk_size  # padded positions: dt' = 0, so they neither decay nor add
    nc, L = (seqlen + pad) // chunk_size, chunk_size
    xc = F.pad(x, (0, 0, 0, 0, 0, pad)).reshape(b, nc, L, nheads, headdim)
    dtc = F.pad(dt, (0, 0, 0, pad)).reshape(b, nc, L, nheads)
    rep = nheads // ngroups
    Bc = F.pad(B, (0, 0, 0, 0, 0, pad)).reshape(b, nc, L, ngroups, dstate).repeat_interleave(rep, dim=3)
    Cc = F.pad(C, (0, 0, 0, 0, 0, pad)).reshape(b, nc, L, ngroups, dstate).repeat_interleave(rep, dim=3)
    if seq_idx is None:
        seq_idx = torch.zeros(b, seqlen, dtype=torch.long, device=x.device)
    # padded positions take the last sequence's index (they add nothing either way)
    sid = torch.cat([seq_idx.long(), seq_idx[:, -1:].long().expand(b, pad)], 1).reshape(b, nc, L)
    sid_prev = torch.cat([torch.zeros_like(sid[:, :1, 0]), sid[:, :-1, -1]], 1)  # (b, nc): before each chunk
    cs = torch.cumsum(dtc * A, dim=2)  # (b, nc, L, h): inclusive cumsum of dt*A within the chunk
    xdt = xc * dtc[..., None]
    # within the chunk: y_t = sum_{s <= t} (C_t . B_s) exp(cs_t - cs_s) dt_s x_s
    seg = cs[:, :, :, None, :] - cs[:, :, None, :, :]  # (b, nc, t, s, h)
    causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()[None, None, :, :, None]
    causal = causal & (sid[:, :, :, None] == sid[:, :, None, :])[..., None]
    decay = torch.exp(seg.masked_fill(~causal, -math.inf))
    scores = torch.einsum("bctgn,bcsgn->bctsg", Cc, Bc) * decay
    y = torch.einsum("bctsh,bcshp->bcthp", scores, xdt)
    # each chunk's own state, then the states entering each chunk, one chunk after another
    to_end = torch.exp(cs[:, :, -1:, :] - cs) * (sid == sid[:, :, -1:])[..., None]  # (b, nc, L, h)
    states = torch.einsum("bclhn,bclh,bclhp->bchpn", Bc, to_end, xdt)
    prev = [torch.zeros(b, nheads, headdim, dstate, dtype=dtype, device=x.device) if initial_states is None
            else initial_states.to(dtype)]
    for c in range(nc):
        carried = torch.exp(cs[:, c, -1, :]) * (sid[:, c, -1] == sid_prev[:, c])[:, None]
        prev.append(prev[-1] * carried[:, :, None, None] + states[:, c])
    entering = torch.stack(prev[:-1], dim=1)  # (b, nc, h, p, n)
    seen = torch.exp(cs) * (sid == sid_prev[:, :, None])[..., None]  # rows that see the entering state
    y = y + torch.einsum("bclhn,bchpn,bclh->bclhp", Cc, entering, seen)
    y = y.reshape(b, nc * L, nheads, headdim)[:, :seqlen]
    if D is not None:
        y = y + _skip(D.to(dtype)) * x
    return y, prev[-1]


def _skip(D: torch.Tensor) -> torch.Tensor:
    """D broadcast against (batch, seqlen, nheads, headdim): per head or per channel."""
    return D[None, None, :, None] if D.dim() == 1 else D[None, None]


def ssd_sequential(x, dt, A, B, C, D=None, dt_bias=None, dt_softplus: bool = False,
                   dt_limit: tuple[float, float] = (0.0, math.inf), initial_states=None, seq_idx=None):
    """The recurrence one position at a time, in float64: the definition the chunked form is
    checked against (tests/bench/test_ssd_torch.py)."""
    x, dt, A, B, C = (t.double() for t in (x, dt, A, B, C))
    b, seqlen, nheads, headdim = x.shape
    dt = effective_dt(dt, None if dt_bias is None else dt_bias.double(), dt_softplus, dt_limit)
    rep = nheads // B.shape[2]
    Bh, Ch = B.repeat_interleave(rep, dim=2), C.repeat_interleave(rep, dim=2)
    h = (torch.zeros(b, nheads, headdim, B.shape[3], dtype=torch.float64, device=x.device) if initial_states is None
         else initial_states.double())
    ys = []
    for t in range(seqlen):
        keep = torch.exp(dt[:, t] * A)
        if seq_idx is not None:  # a new sequence starts from zero (seq_idx is 0 before the first position)
            keep = keep * (seq_idx[:, t] == (seq_idx[:, t - 1] if t else 0)).double()[:, None]
        h = h * keep[..., None, None] + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        y = (h * Ch[:, t, :, None, :]).sum(-1)
        if D is not None:
            y = y + _skip(D.double())[:, 0] * x[:, t]
        ys.append(y)
    return torch.stack(ys, 1), h
