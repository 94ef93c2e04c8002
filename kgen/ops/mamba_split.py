"""`mamba_split_conv1d_scan_combined`: mamba-ssm's fused Mamba-2 layer, from in_proj's output to
out_proj's, over kgen's ops.

zxbcdt (batch, seqlen, 2 d_nonssm + dim + conv_dim + nheads) splits into an optional SwiGLU part
(zx0), the gate z, xBC and dt; xBC runs the causal_conv1d spec (silu) in place of causal-conv1d,
its x, B and C (views, no copy) the ssd_fwd spec through mamba_chunk_scan_combined (dt_softplus,
dt_bias, dt_limit, D, initial_states, seq_idx for packed sequences, which the convolution honours
too), then either the gate y * silu(z) (rmsnorm_weight None) or mamba-ssm's gated RMSNorm over
groups of dim / ngroups channels (norm_before_gate: rmsnorm(y) * w * silu(z), else rmsnorm(y *
silu(z)) * w), the SwiGLU part silu(zx0[:d]) * zx0[d:] before it, and F.linear with outproj_weight.
The gated RMSNorm, the SwiGLU part and the projection are PyTorch here (fp32 arithmetic for the
norm, as mamba-ssm's kernel); the convolution and the scan are kgen's kernels, forward and
backward through their specs' autograd.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ..errors import LaunchError
from .conv import ACTIVATIONS, conv_channel_last
from .ssd import mamba_chunk_scan_combined

FN = "mamba_split_conv1d_scan_combined"


def mamba_split_conv1d_scan_combined(zxbcdt: torch.Tensor, conv1d_weight: torch.Tensor, conv1d_bias: torch.Tensor | None,
                                     dt_bias: torch.Tensor, A: torch.Tensor, D: torch.Tensor, chunk_size: int,
                                     initial_states: torch.Tensor | None = None, seq_idx: torch.Tensor | None = None,
                                     dt_limit: tuple[float, float] = (0.0, math.inf), return_final_states: bool = False,
                                     activation: str | None = "silu", rmsnorm_weight: torch.Tensor | None = None,
                                     rmsnorm_eps: float = 1e-6, outproj_weight: torch.Tensor | None = None,
                                     outproj_bias: torch.Tensor | None = None, headdim: int | None = None,
                                     ngroups: int = 1, norm_before_gate: bool = True) -> Any:
    """mamba-ssm's arguments and result: out (batch, seqlen, dim, or out_dim with outproj_weight),
    with return_final_states (out, final_states (batch, nheads, headdim, dstate) fp32). D is
    (nheads, headdim), or (nheads,) with headdim given; conv1d_weight (conv_dim, width) or
    (conv_dim, 1, width) with conv_dim = dim + 2 ngroups dstate."""
    nheads, headdim = _heads(D, headdim)
    if not isinstance(zxbcdt, torch.Tensor) or zxbcdt.dim() != 3:
        got = tuple(zxbcdt.shape) if isinstance(zxbcdt, torch.Tensor) else type(zxbcdt).__name__
        raise LaunchError(f"{FN}: 'zxbcdt' must be a tensor of shape (batch, seqlen, channels), got {got}")
    if not isinstance(conv1d_weight, torch.Tensor) or conv1d_weight.dim() not in (2, 3):
        got = tuple(conv1d_weight.shape) if isinstance(conv1d_weight, torch.Tensor) else type(conv1d_weight).__name__
        raise LaunchError(f"{FN}: 'conv1d_weight' must be a tensor of shape (conv_dim, width), got {got}")
    if isinstance(ngroups, bool) or not isinstance(ngroups, int) or ngroups < 1 or nheads % ngroups:
        raise LaunchError(f"{FN}: ngroups={ngroups!r} must be a positive int dividing nheads={nheads}")
    if activation not in ACTIVATIONS:
        raise LaunchError(f"{FN}: activation is {activation!r}; accepted: None, 'silu' or 'swish'")
    dim = nheads * headdim
    conv_dim = conv1d_weight.shape[0]
    dstate = (conv_dim - dim) // ngroups // 2
    if dstate < 1 or conv_dim != dim + 2 * ngroups * dstate:
        raise LaunchError(f"{FN}: conv1d_weight has {conv_dim} channels; expected dim + 2 * ngroups * dstate with "
                          f"dim = nheads * headdim = {dim} and ngroups = {ngroups}")
    rest = zxbcdt.shape[-1] - dim - conv_dim - nheads
    if rest < 0 or rest % 2:
        raise LaunchError(f"{FN}: zxbcdt has {zxbcdt.shape[-1]} channels; expected 2 * d_nonssm + dim + conv_dim + "
                          f"nheads = 2 * d_nonssm + {dim} + {conv_dim} + {nheads}")
    if rmsnorm_weight is not None and (not isinstance(rmsnorm_weight, torch.Tensor) or tuple(rmsnorm_weight.shape) != (dim,)):
        got = tuple(rmsnorm_weight.shape) if isinstance(rmsnorm_weight, torch.Tensor) else type(rmsnorm_weight).__name__
        raise LaunchError(f"{FN}: 'rmsnorm_weight' must be a tensor of shape ({dim},) or None, got {got}")
    if outproj_bias is not None and outproj_weight is None:
        raise LaunchError(f"{FN}: outproj_bias is given without outproj_weight")
    d_nonssm = rest // 2
    batch, seqlen, _ = zxbcdt.shape
    zx0, z, xBC, dt = torch.split(zxbcdt, [2 * d_nonssm, dim, conv_dim, nheads], dim=-1)
    xBC = conv_channel_last(xBC, conv1d_weight, conv1d_bias, seq_idx, activation is not None, FN)
    x, B, C = torch.split(xBC, [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    x = x.unflatten(-1, (nheads, headdim))
    B, C = B.unflatten(-1, (ngroups, dstate)), C.unflatten(-1, (ngroups, dstate))
    z = z.unflatten(-1, (nheads, headdim))
    scanned = mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=D, z=z if rmsnorm_weight is None else None,
                                        dt_bias=dt_bias, initial_states=initial_states, seq_idx=seq_idx,
                                        dt_softplus=True, dt_limit=dt_limit, return_final_states=return_final_states)
    y, final_states = scanned if return_final_states else (scanned, None)
    y = y.flatten(-2)
    if rmsnorm_weight is not None:
        y = gated_rmsnorm(y, z.flatten(-2), rmsnorm_weight, rmsnorm_eps, dim // ngroups, norm_before_gate)
    if d_nonssm:
        a, b = zx0.chunk(2, dim=-1)
        y = torch.cat([F.silu(a.float()) * b.float(), y.float()], dim=-1).to(y.dtype)
    if outproj_weight is not None:
        y = F.linear(y, outproj_weight, outproj_bias)
    return (y, final_states) if return_final_states else y


def gated_rmsnorm(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int,
                  norm_before_gate: bool) -> torch.Tensor:
    """mamba-ssm's RMSNorm with a gate, over groups of `group_size` channels, in fp32, rounded to
    y's dtype: norm_before_gate rmsnorm(y) * weight * silu(z), else rmsnorm(y * silu(z)) * weight."""
    t = y.float()
    gate = F.silu(z.float())
    if not norm_before_gate:
        t = t * gate
    g = t.unflatten(-1, (-1, group_size))
    t = (g * torch.rsqrt(g.square().mean(-1, keepdim=True) + eps)).flatten(-2) * weight.float()
    if norm_before_gate:
        t = t * gate
    return t.to(y.dtype)


def _heads(D: Any, headdim: Any) -> tuple[int, int]:
    if not isinstance(D, torch.Tensor) or D.dim() not in (1, 2):
        got = tuple(D.shape) if isinstance(D, torch.Tensor) else type(D).__name__
        raise LaunchError(f"{FN}: 'D' must be a tensor of shape (nheads,) or (nheads, headdim), got {got}")
    if D.dim() == 2:
        return D.shape[0], D.shape[1]
    if isinstance(headdim, bool) or not isinstance(headdim, int) or headdim < 1:
        raise LaunchError(f"{FN}: D has shape {tuple(D.shape)} (one value per head), so headdim must be given as an int, "
                          f"got {headdim!r}")
    return D.shape[0], headdim
