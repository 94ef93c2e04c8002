"""mamba_chunk_scan_combined's wider contract on the CPU interpreter: x/B/C in bf16, fp16 or
fp32 with dt in fp32, bf16 or fp16 (forward and gradients against float64), and the varlen
states (cu_seqlens with return_varlen_states) against each sequence's own float64 recurrence,
with mamba-ssm's test grid of ngroups (1, 2, every head) and chunk sizes. Bad cu_seqlens get
one sentence each."""
from __future__ import annotations

import math

import pytest
import torch

from kgen.errors import LaunchError
from kgen.ops import mamba_chunk_scan_combined

from .test_ssd_ops import _inputs, _recurrence

# the error a 16-bit operand leaves (bf16: 8 bits of mantissa, fp16: 11), as a share of the
# largest |reference|: bf16 as tests/ops/test_ssd_ops.py, fp16 an eighth of it
BOUND = {torch.bfloat16: 0.02, torch.float16: 0.0025, torch.float32: 0.02}  # fp32 runs the bf16 kernels
GRAD_BOUND = {torch.bfloat16: 0.01, torch.float16: 0.002, torch.float32: 0.01}


def _cast(tensors, xdt, dtdt):
    x, dt, A, B, C, D, dt_bias = tensors
    return x.to(xdt), dt.to(dtdt), A, B.to(xdt), C.to(xdt), D, dt_bias


def _close(name, got, ref, bound):
    err = float((got.double() - ref).abs().max())
    scale = float(ref.abs().max())
    assert err <= bound * scale, f"{name}: max error {err:.3g} over {bound:.2%} of max |ref| {scale:.3g}"


@pytest.mark.parametrize("xdt, dtdt", [(torch.bfloat16, torch.float32), (torch.float16, torch.float16),
                                       (torch.float16, torch.float32), (torch.float32, torch.float32),
                                       (torch.float32, torch.bfloat16)])
def test_dtypes_match_the_recurrence(xdt, dtdt):
    # dt drawn in float32 then rounded to its dtype; the reference reads the rounded values
    g = torch.Generator().manual_seed(7)
    x, dt, A, B, C, D, dt_bias = _cast(_inputs(seed=41, seqlen=90, nheads=4, ngroups=2), xdt, dtdt)
    dt = (torch.rand(dt.shape, generator=g) - 1.0).to(dtdt)
    y, final = mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, dt_bias=dt_bias, dt_softplus=True,
                                         return_final_states=True)
    assert y.dtype == xdt and final.dtype == torch.float32
    ref_y, ref_h = _recurrence(x, dt, A, B, C, D, dt_bias, True, (0.0, math.inf))
    _close("y", y, ref_y, BOUND[xdt])
    _close("final_states", final, ref_h, BOUND[xdt])


@pytest.mark.parametrize("xdt, dtdt, dstate", [(torch.float16, torch.float32, 64), (torch.bfloat16, torch.float16, 32),
                                               (torch.float32, torch.float32, 16)])
def test_dtypes_gradients_match_float64_autograd(xdt, dtdt, dstate):
    # dstate 16 and 32 (mamba-ssm's test grid takes 32) are open variants, as the dtypes
    tensors = _cast(_inputs(seed=43, seqlen=70, nheads=2, dstate=dstate), xdt, dtdt)
    names = ("x", "dt", "A", "B", "C", "D", "dt_bias")
    g = torch.Generator().manual_seed(5)
    dy = torch.randn(tensors[0].shape, generator=g).to(xdt)
    mine = [t.clone().requires_grad_() for t in tensors]
    y = mamba_chunk_scan_combined(*mine[:5], 64, D=mine[5], dt_bias=mine[6], dt_softplus=True)
    y.backward(dy)
    ref = [t.double().requires_grad_() for t in tensors]
    ref_y, _ = _recurrence(*ref, True, (0.0, math.inf))
    ref_y.backward(dy.double())
    for n, m, r, t in zip(names, mine, ref, tensors):
        assert m.grad is not None and m.grad.dtype == t.dtype, n
        _close(f"d{n}", m.grad, r.grad, GRAD_BOUND[xdt])


def _packed(lens, seed, xdt=torch.bfloat16, nheads=4, ngroups=1, dstate=64):
    total = sum(lens)
    tensors = _cast(_inputs(seed=seed, seqlen=total, nheads=nheads, ngroups=ngroups, dstate=dstate), xdt, torch.float32)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    seq_idx = torch.repeat_interleave(torch.arange(len(lens), dtype=torch.int32), torch.tensor(lens))[None].contiguous()
    return tensors, cu, seq_idx


@pytest.mark.parametrize("chunk", [64, 128])
@pytest.mark.parametrize("ngroups", [1, 2, "max"])
def test_varlen_states_are_each_sequences_final_state(chunk, ngroups):
    # sequences that end inside a chunk they started in, that span a chunk boundary, and that
    # start exactly on one (lengths 1 to 130, mamba-ssm's test draws 1 to 200)
    lens = [5, 123, 1, 64, 130, 7] if chunk == 64 else [130, 3, 125, 1, 70]
    nheads = 4
    tensors, cu, seq_idx = _packed(lens, seed=47 + chunk, nheads=nheads, ngroups=nheads if ngroups == "max" else ngroups,
                                   dstate=32 if ngroups == 2 else 64)
    x, dt, A, B, C, D, dt_bias = tensors
    y, final, states = mamba_chunk_scan_combined(x, dt, A, B, C, chunk, D=D, dt_bias=dt_bias, seq_idx=seq_idx,
                                                 cu_seqlens=cu, dt_softplus=True, return_final_states=True,
                                                 return_varlen_states=True)
    assert states.shape == (len(lens), nheads, x.shape[3], B.shape[3]) and states.dtype == x.dtype
    want = []
    for s in range(len(lens)):
        part = slice(int(cu[s]), int(cu[s + 1]))
        _, h = _recurrence(x[:, part], dt[:, part], A, B[:, part], C[:, part], D, dt_bias, True, (0.0, math.inf))
        want.append(h[0])
    want = torch.stack(want)
    _close("varlen_states", states, want, BOUND[x.dtype])
    # the last sequence's state is the final state
    _close("final_states", final[0], want[-1], BOUND[x.dtype])
    # y and final_states as without return_varlen_states; cu_seqlens alone is not read (mamba-ssm)
    y2, final2 = mamba_chunk_scan_combined(x, dt, A, B, C, chunk, D=D, dt_bias=dt_bias, seq_idx=seq_idx,
                                           cu_seqlens=torch.zeros(1), dt_softplus=True, return_final_states=True)
    assert torch.equal(y, y2) and torch.equal(final, final2)


def test_varlen_states_in_fp16_and_without_final_states():
    tensors, cu, seq_idx = _packed([30, 100, 20], seed=53, xdt=torch.float16)
    x, dt, A, B, C, D, dt_bias = tensors
    y, states = mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, seq_idx=seq_idx, cu_seqlens=cu,
                                          dt_softplus=True, return_varlen_states=True)
    assert y.shape == x.shape and states.dtype == torch.float16
    for s in range(3):
        part = slice(int(cu[s]), int(cu[s + 1]))
        _, h = _recurrence(x[:, part], dt[:, part], A, B[:, part], C[:, part], D, None, True, (0.0, math.inf))
        _close(f"varlen_states[{s}]", states[s], h[0], BOUND[torch.float16])


def test_gradients_flow_beside_the_varlen_states():
    # the states take no gradient (as in mamba-ssm); y's does not change for returning them
    tensors, cu, seq_idx = _packed([40, 60], seed=59)
    x = tensors[0].clone().requires_grad_()
    y, states = mamba_chunk_scan_combined(x, *tensors[1:5], 64, seq_idx=seq_idx, cu_seqlens=cu,
                                          return_varlen_states=True)
    assert not states.requires_grad
    (gx,) = torch.autograd.grad(y.float().sum(), x)
    x2 = tensors[0].clone().requires_grad_()
    (gx2,) = torch.autograd.grad(mamba_chunk_scan_combined(x2, *tensors[1:5], 64, seq_idx=seq_idx).float().sum(), x2)
    assert torch.equal(gx, gx2)


@pytest.mark.parametrize("change, words", [
    (lambda cu, si, x: (None, si, x), "return_varlen_states needs 'cu_seqlens', a torch.int32 tensor of shape "
                                      "(num_sequences + 1,) with at least 2 entries, got NoneType"),
    (lambda cu, si, x: (cu.long(), si, x), "got (4,) torch.int64"),
    (lambda cu, si, x: (cu, None, x), "needs seq_idx numbering the sequences cu_seqlens bounds"),
    (lambda cu, si, x: (cu, si.expand(2, -1).contiguous(), x.expand(2, -1, -1, -1)),
     "takes one packed row (batch 1, as mamba-ssm), got batch 2"),
    (lambda cu, si, x: (torch.tensor([0, 50, 40, 100], dtype=torch.int32), si, x),
     "'cu_seqlens' must start at 0, end at seqlen=100 and increase (no empty sequence), got [0, 50, 40, 100]"),
    (lambda cu, si, x: (torch.tensor([0, 50, 90], dtype=torch.int32), si, x), "end at seqlen=100"),
])
def test_bad_cu_seqlens_are_one_sentence(change, words):
    tensors, cu, seq_idx = _packed([30, 30, 40], seed=61)
    cu, seq_idx, x = change(cu, seq_idx, tensors[0])
    B, C = tensors[3], tensors[4]
    if x.shape[0] == 2:
        B, C = B.expand(2, -1, -1, -1), C.expand(2, -1, -1, -1)
    with pytest.raises(LaunchError, match="^mamba_chunk_scan_combined: ") as e:
        mamba_chunk_scan_combined(x, tensors[1].expand(x.shape[0], -1, -1), tensors[2], B, C, 64, seq_idx=seq_idx,
                                  cu_seqlens=cu, return_varlen_states=True)
    assert words in str(e.value) and "\n" not in str(e.value)
