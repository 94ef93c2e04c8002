"""`causal_conv1d_fn`: causal-conv1d's depthwise causal convolution over the causal_conv1d spec.

causal-conv1d takes x as (batch, dim, seqlen); Mamba-2 keeps its xBC channel-last, (batch,
seqlen, dim) in memory, and passes the (batch, dim, seqlen) transpose. The spec works on (batch,
seqlen, dim), so a channel-last x is read in place (its transpose is the spec's layout) and the
result comes back as the same transposed view; a channel-first x is copied channel-last first.
weight (dim, width) and bias take fp32 copies (gradients come back in their dtypes); bias=None is
zeros without a gradient. seq_idx selects the spec's packed variants (an unfilled tensor is
passed to the others, which never read it). initial_states and final states (causal-conv1d's
chunked inference) are not built.
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import LaunchError
from ..runtime.op import call_op

FN = "causal_conv1d_fn"
FLOATS = (torch.bfloat16, torch.float16, torch.float32)
WIDTHS = (2, 3, 4)
ACTIVATIONS = (None, "silu", "swish")


def conv_channel_last(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      seq_idx: torch.Tensor | None, silu: bool, fn: str = FN) -> torch.Tensor:
    """The convolution of x (batch, seqlen, dim) over seqlen: (batch, seqlen, dim) in x's dtype."""
    _check(x, weight, bias, seq_idx, fn)
    dim = x.shape[2]
    w32 = weight.reshape(dim, -1).float()
    b32 = torch.zeros(dim, dtype=torch.float32, device=x.device) if bias is None else bias.float()
    if x.stride(-1) != 1:  # a channel-first x: the spec reads channels contiguously
        x = x.contiguous()
    packed = seq_idx is not None
    if not packed:  # the unpacked kernels never read it
        seq_idx = torch.empty(x.shape[:2], dtype=torch.int32, device=x.device)
    # the op's schema: inputs, then the variant axes the tensors do not give (width, silu, packed)
    return call_op("causal_conv1d", x, w32, b32, seq_idx, w32.shape[1], bool(silu), packed)


def causal_conv1d_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     seq_idx: torch.Tensor | None = None, initial_states: torch.Tensor | None = None,
                     return_final_states: bool = False, final_states_out: torch.Tensor | None = None,
                     activation: str | None = None) -> Any:
    """out[b, c, t] = act(bias[c] + sum_w weight[c, w] x[b, c, t - (width - 1) + w]) for x
    (batch, dim, seqlen) in bf16, fp16 or fp32, weight (dim, width) with width 2 to 4, bias (dim,)
    or None, activation None, "silu" or "swish"; seq_idx (batch, seqlen) int32, non-decreasing,
    keeps each packed sequence's convolution to itself. Returns (batch, dim, seqlen)."""
    if initial_states is not None or return_final_states or final_states_out is not None:
        raise LaunchError(f"{FN}: initial_states, return_final_states and final_states_out (chunked inference) are not "
                          "built; accepted: their defaults (None, False, None)")
    if activation not in ACTIVATIONS:
        raise LaunchError(f"{FN}: activation is {activation!r}; accepted: None, 'silu' or 'swish'")
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise LaunchError(f"{FN}: 'x' must be a tensor of shape (batch, dim, seqlen), got {got}")
    out = conv_channel_last(x.transpose(1, 2), weight, bias, seq_idx, activation is not None)
    return out.transpose(1, 2)


def _check(x, weight, bias, seq_idx, fn) -> None:
    """x (batch, seqlen, dim) as the spec takes it; the messages name causal-conv1d's layout."""
    batch, seqlen, dim = x.shape
    if x.dtype not in FLOATS:
        raise LaunchError(f"{fn}: 'x' has dtype {x.dtype}; accepted: torch.bfloat16, torch.float16, torch.float32")
    if x.numel() == 0:
        raise LaunchError(f"{fn}: 'x' is empty; every dim must be at least 1")
    w = weight.squeeze(1) if isinstance(weight, torch.Tensor) and weight.dim() == 3 else weight
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or w.shape[0] != dim or w.shape[1] not in WIDTHS:
        got = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise LaunchError(f"{fn}: 'weight' must be a tensor of shape ({dim}, width) with width 2, 3 or 4, got {got}")
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (dim,)):
        got = tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise LaunchError(f"{fn}: 'bias' must be a tensor of shape ({dim},) or None, got {got}")
    for name, t in (("weight", w), ("bias", bias)):
        if t is not None and (not t.is_floating_point() or t.device != x.device):
            raise LaunchError(f"{fn}: '{name}' must be a floating-point tensor on x's device ({x.device}), got "
                              f"{t.dtype} on {t.device}")
    if seq_idx is not None:
        if (not isinstance(seq_idx, torch.Tensor) or seq_idx.dtype != torch.int32
                or tuple(seq_idx.shape) != (batch, seqlen) or seq_idx.device != x.device):
            got = (f"{tuple(seq_idx.shape)} {seq_idx.dtype} on {seq_idx.device}" if isinstance(seq_idx, torch.Tensor)
                   else type(seq_idx).__name__)
            raise LaunchError(f"{fn}: 'seq_idx' must be a torch.int32 tensor of shape ({batch}, {seqlen}) on x's "
                              f"device, got {got}")


def _register() -> None:
    """Define kgen::causal_conv1d (and its backward) outside any torch.compile trace."""
    from . import _op

    _op("causal_conv1d")
