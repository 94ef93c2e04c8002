"""Ring (context-parallel) attention over kgen's FlashAttention kernels and their logsumexp.

Each rank of a torch.distributed group holds a slice of the sequence (q, k and v of shape (B,
S_local, H, D)). The key/value slices travel around the ring, one step per rank: each step runs
fa2_fwd on the local queries and the visiting keys and merges the result into the running output
by the two logsumexps (o = o_a e^(lse_a - lse) + o_b e^(lse_b - lse), lse = logaddexp(lse_a,
lse_b)). The backward walks the ring again: fa2_bwd on each visiting block with the final o and
lse (so its probabilities are the global ones), dq kept locally, dk and dv travelling with their
keys and values and handed back to their owner after the last step (Liu et al., "Ring Attention
with Blockwise Transformers", 2023).

Causal: the sequence is cut into 2 x world chunks and rank r holds chunks r and 2 world - 1 - r
(`zigzag_shard`), so that every rank does the same work at every step (the load balancing of the
published zigzag ring attention): at the first step its own keys under the causal mask; from a
rank before it, all its queries against that rank's first chunk; from a rank after it, its
second chunk of queries against both of that rank's chunks, without masks.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from ..errors import LaunchError
from ..runtime.op import call_op
from .attention import check_qkv, check_scale

FN = "ring_flash_attn_func"


def zigzag_shard(t: torch.Tensor, dim: int = 1, group: Any = None) -> torch.Tensor:
    """This rank's slice of a whole sequence for causal ring attention: chunks r and 2 world - 1
    - r of 2 x world along `dim`."""
    w, r = dist.get_world_size(group), dist.get_rank(group)
    if t.shape[dim] % (2 * w):
        raise LaunchError(f"zigzag_shard: the sequence ({t.shape[dim]} along dim {dim}) must split into 2 x world = "
                          f"{2 * w} equal chunks")
    chunks = t.chunk(2 * w, dim)
    return torch.cat([chunks[r], chunks[2 * w - 1 - r]], dim)


def zigzag_unshard(t: torch.Tensor, dim: int = 1, group: Any = None) -> torch.Tensor:
    """The whole sequence from every rank's zigzag slice (an all_gather)."""
    w = dist.get_world_size(group)
    parts = [torch.empty_like(t) for _ in range(w)]
    dist.all_gather(parts, t.contiguous(), group=group)
    chunks: list[torch.Tensor | None] = [None] * (2 * w)
    for r, p in enumerate(parts):
        chunks[r], chunks[2 * w - 1 - r] = p.chunk(2, dim)
    return torch.cat(chunks, dim)


def ring_flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float | None = None,
                         causal: bool = False, group: Any = None) -> torch.Tensor:
    """softmax(q k^T * softmax_scale) v over the whole sequence the group's ranks hold in slices
    (q (B, S_local, H, D), k and v (B, S_local, HKV, D)); causal needs the zigzag slices
    (`zigzag_shard`) and an even S_local. Returns this rank's slice of the output, with autograd."""
    check_qkv(q, k, v, FN)
    if q.shape[1] != k.shape[1]:
        raise LaunchError(f"{FN}: q holds {q.shape[1]} positions and k {k.shape[1]}; each rank holds one slice of "
                          "one sequence for both")
    if causal and q.shape[1] % 2:
        raise LaunchError(f"{FN}: causal attention takes the zigzag slices (zigzag_shard), two equal chunks per rank; "
                          f"this rank holds {q.shape[1]} positions")
    if not dist.is_initialized():
        raise LaunchError(f"{FN}: torch.distributed is not initialized; call torch.distributed.init_process_group first")
    scale = check_scale(softmax_scale, q.shape[-1], FN)
    return _Ring.apply(q, k, v, scale, bool(causal), group)


def _blocks(step: int, src: int, rank: int, s: int, causal: bool) -> list[tuple[slice, slice, bool]]:
    """(query rows, key rows, causal mask) that this rank's queries run against the slice of rank
    `src` at `step` (module docstring)."""
    whole, first, second = slice(0, s), slice(0, s // 2), slice(s // 2, s)
    if not causal:
        return [(whole, whole, False)]
    if step == 0:
        return [(whole, whole, True)]
    return [(whole, first, False)] if src < rank else [(second, whole, False)]


class _Exchange:
    """Each tensor sent to the next rank and the previous rank's received, started now (so that
    the step's kernels run meanwhile) and waited for by `done()`."""

    def __init__(self, sends: list[torch.Tensor], group: Any):
        w, r = dist.get_world_size(group), dist.get_rank(group)
        nxt, prv = (r + 1) % w, (r - 1) % w
        if group is not None:
            nxt, prv = dist.get_global_rank(group, nxt), dist.get_global_rank(group, prv)
        self.recvs = [torch.empty_like(t) for t in sends]
        ops = ([dist.P2POp(dist.isend, t, nxt, group) for t in sends]
               + [dist.P2POp(dist.irecv, t, prv, group) for t in self.recvs])
        self.reqs = dist.batch_isend_irecv(ops)

    def done(self) -> list[torch.Tensor]:
        for req in self.reqs:
            req.wait()
        return self.recvs


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, group):
        w, r = dist.get_world_size(group), dist.get_rank(group)
        b, s, h, d = q.shape
        out = torch.zeros(b, s, h, d, dtype=torch.float32, device=q.device)
        lse = torch.full((b, h, s), -math.inf, dtype=torch.float32, device=q.device)
        kv = torch.stack([k, v]).contiguous()
        for step in range(w):
            ahead = _Exchange([kv], group) if step < w - 1 else None  # the next slice arrives meanwhile
            for rows, keys, masked in _blocks(step, (r - step) % w, r, s, causal):
                o_i, lse_i = call_op("fa2_fwd", q[:, rows], kv[0][:, keys], kv[1][:, keys], scale, d, masked, False)
                _merge(out, lse, rows, o_i, lse_i)
            if ahead is not None:
                kv = ahead.done()[0]
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.causal, ctx.group = scale, causal, group
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        group = ctx.group
        w, r = dist.get_world_size(group), dist.get_rank(group)
        s, d = q.shape[1], q.shape[-1]
        dout = dout.contiguous()
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        kv = torch.stack([k, v]).contiguous()
        dkv = torch.zeros(kv.shape, dtype=torch.float32, device=q.device)
        for step in range(w):
            # the slice goes on while its gradient is formed here; the gradient follows it after
            ahead = _Exchange([kv], group) if step < w - 1 else None
            for rows, keys, masked in _blocks(step, (r - step) % w, r, s, ctx.causal):
                dq_i, dk_i, dv_i = call_op("fa2_bwd", q[:, rows], kv[0][:, keys], kv[1][:, keys], out[:, rows],
                                           lse[:, :, rows].contiguous(), dout[:, rows], ctx.scale, d, masked, False)
                dq[:, rows] += dq_i.float()
                dkv[0][:, keys] += dk_i.float()
                dkv[1][:, keys] += dv_i.float()
            # the keys' gradient travels one step behind them; after the last step it reaches their owner
            dkv = _Exchange([dkv], group).done()[0]
            if ahead is not None:
                kv = ahead.done()[0]
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None, None, None


def _merge(out: torch.Tensor, lse: torch.Tensor, rows: slice, o_i: torch.Tensor, lse_i: torch.Tensor) -> None:
    """out[:, rows] and lse[:, :, rows] (fp32, in place) joined with a block's (o_i, lse_i) by
    their logsumexps; a row no block has shown a key keeps lse = -inf and o = 0."""
    old = lse[:, :, rows]
    new = torch.logaddexp(old, lse_i)
    seen = new > -math.inf
    a = torch.where(seen, torch.exp(old - new), 0.0).transpose(1, 2)[..., None]
    c = torch.where(seen, torch.exp(lse_i - new), 0.0).transpose(1, 2)[..., None]
    out[:, rows] = out[:, rows] * a + o_i.float() * c
    lse[:, :, rows] = new
