"""`mamba_chunk_scan_combined`: Mamba-2's chunked scan with mamba-ssm's calling convention, over
the ssd_fwd spec.

The spec has no optional tensors, so this wrapper maps mamba-ssm's optional arguments onto what
it does take: D=None, dt_bias=None and initial_states=None become zeros (the spec adds D x and
dt_bias and starts from initial_states either way), and a D of shape (nheads,) becomes the
(nheads, headdim) the spec takes, by an expand whose gradient sums over headdim. z gates the
output as mamba-ssm does, inside the output kernel (the specs' `gated` variants): y * silu(z) in
float32 from the unrounded sum, the ungated y kept for the backward, whose first kernel writes dz
and the gated dy the others read (an ungated call passes a z with no positions). seq_idx
(several sequences packed in each row) selects the specs' packed variants; without it the
unpacked ones run, which never read seq_idx (an unfilled tensor is passed in its place). With
return_varlen_states, the ssd_varlen_states spec takes each sequence's state at its end from the
state entering its last chunk (forward only, as in mamba-ssm). dt's dtype and x's (bf16, fp16)
select the specs' open variants, built at their first call; float32 x, B and C run the bf16 ones.

Gradients come from ssd_bwd (paired in ssd_fwd's `autograd:`): y and final_states are
differentiable with respect to x, dt, A, B, C, D, dt_bias and initial_states (through the float32
copies made here; those passed as None get none). The forward saves, besides its inputs, the
state entering each chunk in x's dtype (dstate / chunk_size of x's size), which the backward
would otherwise recompute. Checked on the CPU interpreter
(tests/ops/test_ssd_ops.py, tests/ir/test_ssd_bwd.py) and on an H200 against float64
(tests/ops/test_ssd_gpu.py).
"""
from __future__ import annotations

import math

import torch

from ..errors import LaunchError
from ..runtime.op import call_op

FLOATS = (torch.bfloat16, torch.float16, torch.float32)
CHUNK_SIZES = (64, 128, 256)
HEADDIMS = (64, 128)
DSTATES = (16, 32, 64, 128, 256)  # 16 and 32 built at their first call (open_variants)
# dt_softplus=True applies softplus where dt + dt_bias <= 20 and passes larger values through,
# as mamba-ssm does (softplus(20) is 20 in fp32)
SOFTPLUS_BELOW = 20.0


def _check_seq_idx(seq_idx, x) -> None:
    """seq_idx as mamba-ssm takes it: int32 (batch, seqlen) on x's device, each row non-decreasing
    (sequences packed one after another). In eager mode the values are read here, once per call
    (one device synchronisation), so that a bad one is refused before any launch; under
    torch.compile they are not (reading them would break the graph), only shape, dtype and
    device."""
    b, seqlen = x.shape[:2]
    if not isinstance(seq_idx, torch.Tensor) or seq_idx.dtype != torch.int32 or tuple(seq_idx.shape) != (b, seqlen):
        got = f"{tuple(seq_idx.shape)} {seq_idx.dtype}" if isinstance(seq_idx, torch.Tensor) else type(seq_idx).__name__
        raise LaunchError(f"mamba_chunk_scan_combined: 'seq_idx' must be a torch.int32 tensor of shape ({b}, {seqlen}) "
                          f"(batch, seqlen) or None, got {got}")
    if seq_idx.device != x.device:
        raise LaunchError(f"mamba_chunk_scan_combined: 'seq_idx' is on {seq_idx.device} but x is on {x.device}; "
                          f"every tensor must be on x's device")
    if torch.compiler.is_compiling():
        return
    if bool((seq_idx[:, 1:] < seq_idx[:, :-1]).any()) or bool((seq_idx[:, :1] < 0).any()):
        raise LaunchError("mamba_chunk_scan_combined: 'seq_idx' must be non-negative and non-decreasing along each row "
                          "(the sequences packed one after another)")


def _check(x, dt, A, B, C, chunk_size, D, dt_bias, initial_states, z) -> None:
    for name, t in (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C)):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"mamba_chunk_scan_combined: '{name}' must be a torch.Tensor, got {type(t).__name__}")
        if t.numel() == 0:
            raise LaunchError(f"mamba_chunk_scan_combined: '{name}' is empty (shape {tuple(t.shape)}); every dim must be at least 1")
    if x.dim() != 4:
        raise LaunchError(f"mamba_chunk_scan_combined: 'x' has shape {tuple(x.shape)}; expected (batch, seqlen, nheads, headdim)")
    b, seqlen, nheads, headdim = x.shape
    for name, t, want in (("dt", dt, (b, seqlen, nheads)), ("A", A, (nheads,))):
        if tuple(t.shape) != want:
            raise LaunchError(f"mamba_chunk_scan_combined: '{name}' has shape {tuple(t.shape)}; expected {want}")
    for name, t in (("B", B), ("C", C)):
        if t.dim() != 4 or tuple(t.shape[:2]) != (b, seqlen):
            raise LaunchError(f"mamba_chunk_scan_combined: '{name}' has shape {tuple(t.shape)}; "
                              f"expected (batch={b}, seqlen={seqlen}, ngroups, dstate)")
    if B.shape != C.shape:
        raise LaunchError(f"mamba_chunk_scan_combined: B has shape {tuple(B.shape)} and C {tuple(C.shape)}; they must match")
    if nheads % B.shape[2]:
        raise LaunchError(f"mamba_chunk_scan_combined: nheads={nheads} is not a multiple of ngroups={B.shape[2]}")
    if x.dtype not in FLOATS or B.dtype != x.dtype or C.dtype != x.dtype:
        raise LaunchError(f"mamba_chunk_scan_combined: x, B and C must share one dtype of torch.bfloat16, torch.float16 "
                          f"or torch.float32 (got {x.dtype}, {B.dtype}, {C.dtype})")
    if dt.dtype not in FLOATS:
        raise LaunchError(f"mamba_chunk_scan_combined: 'dt' has dtype {dt.dtype}; accepted: torch.float32, torch.bfloat16 "
                          f"or torch.float16")
    if headdim not in HEADDIMS:
        raise LaunchError(f"mamba_chunk_scan_combined: headdim {headdim} is not supported; accepted: {', '.join(map(str, HEADDIMS))}")
    if B.shape[3] not in DSTATES:
        raise LaunchError(f"mamba_chunk_scan_combined: dstate {B.shape[3]} is not supported; accepted: {', '.join(map(str, DSTATES))}")
    if chunk_size not in CHUNK_SIZES:
        raise LaunchError(f"mamba_chunk_scan_combined: chunk_size={chunk_size!r} is not supported; "
                          f"accepted: {', '.join(map(str, CHUNK_SIZES))}")
    dstate = B.shape[3]
    for name, t, shapes, what in (
            ("D", D, [(nheads,), (nheads, headdim)], f"({nheads},) (one value per head) or ({nheads}, {headdim}) (per channel)"),
            ("dt_bias", dt_bias, [(nheads,)], f"({nheads},) (one value per head)"),
            ("initial_states", initial_states, [(b, nheads, headdim, dstate)], f"({b}, {nheads}, {headdim}, {dstate}) (batch, nheads, headdim, dstate)")):
        if t is not None and (not isinstance(t, torch.Tensor) or tuple(t.shape) not in shapes):
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise LaunchError(f"mamba_chunk_scan_combined: '{name}' must be a tensor of shape {what} or None, got {got}")
    for name, t in (("dt", dt), ("A", A), ("B", B), ("C", C), ("D", D), ("dt_bias", dt_bias),
                    ("initial_states", initial_states)):
        if t is not None and t.device != x.device:
            raise LaunchError(f"mamba_chunk_scan_combined: '{name}' is on {t.device} but x is on {x.device}; "
                              f"every tensor must be on x's device")
    if z is not None and not (isinstance(z, torch.Tensor) and z.shape == x.shape and z.dtype == x.dtype
                              and z.device == x.device):
        got = f"{tuple(z.shape)} {z.dtype} on {z.device}" if isinstance(z, torch.Tensor) else type(z).__name__
        raise LaunchError(f"mamba_chunk_scan_combined: 'z' must be a tensor like x ({tuple(x.shape)} {x.dtype} on "
                          f"{x.device}) or None, got {got}")
    for name, t in (("A", A), ("D", D), ("dt_bias", dt_bias), ("initial_states", initial_states)):
        if t is not None and not t.is_floating_point():
            raise LaunchError(f"mamba_chunk_scan_combined: '{name}' has dtype {t.dtype}; a floating-point tensor "
                              f"(float32, bfloat16 or float16) is accepted")


def mamba_chunk_scan_combined(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                              chunk_size: int, D: torch.Tensor | None = None, z: torch.Tensor | None = None,
                              dt_bias: torch.Tensor | None = None, initial_states: torch.Tensor | None = None,
                              seq_idx: torch.Tensor | None = None, cu_seqlens: torch.Tensor | None = None,
                              dt_softplus: bool = False, dt_limit: tuple[float, float] = (0.0, math.inf),
                              return_final_states: bool = False, return_varlen_states: bool = False):
    """y (batch, seqlen, nheads, headdim) of the Mamba-2 SSD scan: per head, with
    dt' = clamp(softplus?(dt + dt_bias), *dt_limit), h_t = exp(dt'_t A) h_{t-1} + dt'_t x_t B_t^T
    and y_t = h_t C_t + D x_t; B and C (batch, seqlen, ngroups, dstate) are shared by
    nheads / ngroups heads. With return_final_states, (y, h after the last position) with the
    state (batch, nheads, headdim, dstate) in float32. initial_states (same shape) is h before the
    first position; D may be (nheads,) or (nheads, headdim); with z (x's shape), y * silu(z).
    seq_idx (batch, seqlen), int32, non-decreasing: the index of the sequence each position
    belongs to; the state starts from zero where it changes (initial_states is sequence 0's).
    With return_varlen_states (batch 1, cu_seqlens the int32 bounds of the packed sequences,
    seq_idx numbering them), the state after each sequence's last position comes last,
    (num_sequences, nheads, headdim, dstate) in x's dtype, as mamba-ssm returns it; without it
    cu_seqlens is not read, as in mamba-ssm.
    x, B and C share one dtype: bfloat16 and float16 run as they are; float32 runs the bfloat16
    kernels (x, B, C and z rounded to bfloat16 once, every sum in float32, y returned in float32),
    where mamba-ssm's kernels take float32 products as tf32. dt may be float32, bfloat16 or
    float16 whatever x's dtype; its gradient comes back in its dtype."""
    _check(x, dt, A, B, C, chunk_size, D, dt_bias, initial_states, z)
    if seq_idx is not None:
        _check_seq_idx(seq_idx, x)
    if return_varlen_states:
        _check_cu_seqlens(cu_seqlens, x, seq_idx)
    if not (isinstance(dt_limit, (tuple, list)) and len(dt_limit) == 2):
        raise LaunchError(f"mamba_chunk_scan_combined: dt_limit must be a pair (min, max), got {dt_limit!r}")
    out_dtype = x.dtype
    if x.dtype == torch.float32:  # the bf16 kernels; autograd hands back float32 gradients
        x, B, C = x.to(torch.bfloat16), B.to(torch.bfloat16), C.to(torch.bfloat16)
    b, _, nheads, headdim = x.shape
    dstate = B.shape[3]
    if D is None:
        D32 = torch.zeros(nheads, headdim, dtype=torch.float32, device=x.device)
    else:  # per head: the expand's gradient is the sum over headdim
        D32 = D.float() if D.dim() == 2 else D.float()[:, None].expand(nheads, headdim).contiguous()
    bias32 = torch.zeros(nheads, dtype=torch.float32, device=x.device) if dt_bias is None else dt_bias.float()
    h0 = (torch.zeros(b, nheads, headdim, dstate, dtype=torch.float32, device=x.device) if initial_states is None
          else initial_states.float())
    packed = seq_idx is not None
    if not packed:  # the unpacked kernels never read it: no fill on every call
        seq_idx = torch.empty(x.shape[:2], dtype=torch.int32, device=x.device)
    limits = (float(dt_limit[0]), float(dt_limit[1]), SOFTPLUS_BELOW if dt_softplus else -math.inf)
    # the op's schema: inputs, scalars (dt_min, dt_max, softplus_below), then variant options;
    # through call_op: the op registered at import (_register), as torch.compile traces it
    # prev_states (the state entering each chunk) is saved for the backward and read by the
    # varlen states
    gated = z is not None
    if gated:  # mamba-ssm's gating y * silu(z), fused into the output kernel (the gated variants)
        z = z.to(x.dtype).contiguous()
    else:  # the ungated kernels read no z: a tensor with no positions
        z = x.new_empty((b, 0, nheads, headdim))
    y, _, final_states, prev_states = call_op("ssd_fwd", x, dt, A.float(), B, C, D32, bias32, h0, seq_idx.contiguous(),
                                              z, *limits, int(chunk_size), headdim, dstate, packed, gated)
    y = y.to(out_dtype)
    out = (y, final_states) if return_final_states else (y,)
    if return_varlen_states:
        # not differentiable, as in mamba-ssm; y and final_states still are
        states = call_op("ssd_varlen_states", x[0].detach(), dt[0].detach(), A.detach().float(), B[0].detach(),
                         bias32.detach(), prev_states[0], cu_seqlens.contiguous(), *limits,
                         int(chunk_size), headdim, dstate)
        out = (*out, states.to(out_dtype))
    return out[0] if len(out) == 1 else out


def _check_cu_seqlens(cu_seqlens, x, seq_idx) -> None:
    """cu_seqlens as mamba-ssm's varlen states take it: int32 (num_sequences + 1,) on x's device,
    0 first, seqlen last, increasing, for one packed row (batch 1) that seq_idx numbers. In eager
    mode the values are read here (one synchronisation); under torch.compile only shape, dtype
    and device are checked."""
    b, seqlen = x.shape[:2]
    where = "mamba_chunk_scan_combined: return_varlen_states"
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype != torch.int32 or cu_seqlens.dim() != 1 \
            or cu_seqlens.numel() < 2:
        got = (f"{tuple(cu_seqlens.shape)} {cu_seqlens.dtype}" if isinstance(cu_seqlens, torch.Tensor)
               else type(cu_seqlens).__name__)
        raise LaunchError(f"{where} needs 'cu_seqlens', a torch.int32 tensor of shape (num_sequences + 1,) with at least "
                          f"2 entries, got {got}")
    if cu_seqlens.device != x.device:
        raise LaunchError(f"{where}: 'cu_seqlens' is on {cu_seqlens.device} but x is on {x.device}; every tensor must "
                          f"be on x's device")
    if b != 1:
        raise LaunchError(f"{where} takes one packed row (batch 1, as mamba-ssm), got batch {b}")
    if seq_idx is None:
        raise LaunchError(f"{where} needs seq_idx numbering the sequences cu_seqlens bounds, so that no state crosses "
                          f"from one into the next; got seq_idx=None")
    if torch.compiler.is_compiling():
        return
    if int(cu_seqlens[0]) != 0 or int(cu_seqlens[-1]) != seqlen or bool((cu_seqlens[1:] <= cu_seqlens[:-1]).any()):
        raise LaunchError(f"{where}: 'cu_seqlens' must start at 0, end at seqlen={seqlen} and increase (no empty "
                          f"sequence), got {cu_seqlens.tolist()[:8]}{' ...' if cu_seqlens.numel() > 8 else ''}")


def _register() -> None:
    """Define kgen::ssd_fwd (and its backward) and kgen::ssd_varlen_states now, outside any
    torch.compile trace: loading a spec reads files, which dynamo cannot trace."""
    from . import _op

    _op("ssd_fwd")
    _op("ssd_varlen_states")
