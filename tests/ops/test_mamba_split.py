"""kgen.ops.mamba_split_conv1d_scan_combined (mamba-ssm's fused Mamba-2 layer over kgen's causal
convolution and chunked scan) against the layer written out here in float64: torch's conv1d per
packed sequence, the sequential recurrence of tests/ops/test_ssd_ops.py, mamba-ssm's gated
RMSNorm over groups, SwiGLU and the projection; outputs, final states and every gradient, on the
interpreter (and on the GPU); then the argument errors."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import helpers  # noqa: E402

from kgen.check.compare import compare  # noqa: E402
from kgen.errors import LaunchError  # noqa: E402

from .test_causal_conv1d import _meaning as _conv  # noqa: E402
from .test_ssd_ops import _recurrence  # noqa: E402

NHEADS, HEADDIM, DSTATE, WIDTH = 4, 64, 16, 4


def _layer(zxbcdt, conv_w, conv_b, dt_bias, A, D, *, seq_idx, h0, dt_limit, ngroups, d_nonssm, norm_w, norm_before_gate,
           out_w, out_b, eps=1e-6, lowp=False):
    """The layer in float64, as mamba-ssm's reference composes it; `lowp` rounds to bf16 where the
    layer's tensors are bf16 (the convolution's output, the scan's, the norm's), as any bf16
    implementation must, for the tolerance."""
    rnd = (lambda t: t.to(torch.bfloat16).double()) if lowp else (lambda t: t)
    dim, conv_dim = NHEADS * HEADDIM, NHEADS * HEADDIM + 2 * ngroups * DSTATE
    zx0, z, xBC, dt = torch.split(zxbcdt.double(), [2 * d_nonssm, dim, conv_dim, NHEADS], dim=-1)
    xBC = rnd(_conv(xBC.transpose(1, 2), conv_w, conv_b, seq_idx, True, torch.float64).transpose(1, 2))
    x, B, C = torch.split(xBC, [dim, ngroups * DSTATE, ngroups * DSTATE], dim=-1)
    b, s = x.shape[:2]
    y, h = _recurrence(x.reshape(b, s, NHEADS, HEADDIM), dt, A, B.reshape(b, s, ngroups, DSTATE),
                       C.reshape(b, s, ngroups, DSTATE), D, dt_bias, True, dt_limit, h0=h0,
                       z=z.reshape(b, s, NHEADS, HEADDIM) if norm_w is None else None, seq_idx=seq_idx)
    y = rnd(y.reshape(b, s, dim))
    if norm_w is not None:
        t = y if norm_before_gate else y * F.silu(z)
        g = t.unflatten(-1, (ngroups, -1))
        t = (g / torch.sqrt(g.square().mean(-1, keepdim=True) + eps)).flatten(-2) * norm_w.double()
        y = rnd(t * F.silu(z) if norm_before_gate else t)
    if d_nonssm:
        a, c = zx0.chunk(2, dim=-1)
        y = torch.cat([rnd(F.silu(a) * c), y], dim=-1)
    if out_w is not None:
        y = F.linear(y, out_w.double(), None if out_b is None else out_b.double())
    return y, h


def _inputs(seed, batch, seqlen, ngroups, d_nonssm, norm, proj, init, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    dim = NHEADS * HEADDIM
    conv_dim = dim + 2 * ngroups * DSTATE
    zxbcdt = torch.randn(batch, seqlen, 2 * d_nonssm + dim + conv_dim + NHEADS, generator=g)
    # raw dt from N(0, 1): softplus(dt + dt_bias) up to ~3, decays far faster than Mamba-2's
    # initialisation gives (its dt_bias puts softplus in [0.001, 0.1])
    zxbcdt[..., -NHEADS:] = torch.randn(batch, seqlen, NHEADS, generator=g)
    t = {"zxbcdt": zxbcdt.to(dtype),
         "conv_w": 0.5 * torch.randn(conv_dim, WIDTH, generator=g), "conv_b": 0.1 * torch.randn(conv_dim, generator=g),
         "dt_bias": 0.1 * torch.randn(NHEADS, generator=g), "A": -torch.exp(torch.randn(NHEADS, generator=g)),
         "D": torch.randn(NHEADS, generator=g)}
    if norm:
        t["norm_w"] = 1 + 0.1 * torch.randn(dim, generator=g)
    if proj:
        t["out_w"] = (torch.randn(48, dim + d_nonssm, generator=g) / math.sqrt(dim)).to(dtype)  # as autocast makes it
        t["out_b"] = torch.randn(48, generator=g).to(dtype)
    if init:
        t["h0"] = torch.randn(batch, NHEADS, HEADDIM, DSTATE, generator=g)
    return t


CASES = [  # (ngroups, d_nonssm, rmsnorm, norm_before_gate, outproj, packed, initial_states, dt_limit)
    (1, 0, True, True, True, False, False, (0.0, math.inf)),
    (2, 0, True, False, False, True, False, (0.0, math.inf)),
    (1, 0, False, True, False, False, True, (0.01, 0.5)),
    (2, 32, True, True, True, True, False, (0.0, math.inf)),
]


def _run(device, ngroups, d_nonssm, norm, before, proj, packed, init, dt_limit, batch=2, seqlen=100):
    from kgen.ops import mamba_split_conv1d_scan_combined

    t = _inputs(11 + ngroups + d_nonssm, batch, seqlen, ngroups, d_nonssm, norm, proj, init)
    seq_idx = None
    if packed:
        seq_idx = torch.zeros(batch, seqlen, dtype=torch.int32)
        seq_idx[:, seqlen // 3:] = 1
        seq_idx[1:, 2 * seqlen // 3:] = 2
    names = list(t)
    mine = {n: v.to(device).requires_grad_() for n, v in t.items()}
    out, final = mamba_split_conv1d_scan_combined(
        mine["zxbcdt"], mine["conv_w"], mine["conv_b"], mine["dt_bias"], mine["A"], mine["D"], 64,
        initial_states=mine.get("h0"), seq_idx=None if seq_idx is None else seq_idx.to(device), dt_limit=dt_limit,
        return_final_states=True, rmsnorm_weight=mine.get("norm_w"), outproj_weight=mine.get("out_w"),
        outproj_bias=mine.get("out_b"), headdim=HEADDIM, ngroups=ngroups, norm_before_gate=before)
    g = torch.Generator().manual_seed(1)
    dout = torch.randn(out.shape, generator=g).to(out.dtype)
    grads = torch.autograd.grad(out, [mine[n] for n in names], dout.to(device))
    both = []
    for lowp in (False, True):
        ref = {n: v.double().requires_grad_() for n, v in t.items()}
        want, h = _layer(ref["zxbcdt"], ref["conv_w"], ref["conv_b"], ref["dt_bias"], ref["A"], ref["D"], seq_idx=seq_idx,
                         h0=ref.get("h0"), dt_limit=dt_limit, ngroups=ngroups, d_nonssm=d_nonssm,
                         norm_w=ref.get("norm_w"), norm_before_gate=before, out_w=ref.get("out_w"), out_b=ref.get("out_b"),
                         lowp=lowp)
        both.append([want, h, *torch.autograd.grad(want, [ref[n] for n in names], dout.double())])
    assert out.dtype == torch.bfloat16 and final.dtype == torch.float32
    # 2x the error of the layer rounded where its tensors are bf16, or 2% of the largest value:
    # the scan's bf16 products round inside it too (the bound tests/ops/test_ssd_contract.py holds
    # the scan alone to)
    for name, got, exact, low in zip(["out", "final_states", *(f"d{n}" for n in names)], [out, final, *grads], *both):
        verdict = compare(name, got.detach().cpu(), exact.detach(), low.detach(), scale_tolerance=0.02)
        assert verdict.ok, verdict.detail


@pytest.mark.parametrize("ngroups, d_nonssm, norm, before, proj, packed, init, dt_limit", CASES)
def test_matches_the_layer_in_float64(ngroups, d_nonssm, norm, before, proj, packed, init, dt_limit):
    _run("cpu", ngroups, d_nonssm, norm, before, proj, packed, init, dt_limit)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("ngroups, d_nonssm, norm, before, proj, packed, init, dt_limit", CASES)
def test_gpu(ngroups, d_nonssm, norm, before, proj, packed, init, dt_limit, monkeypatch):
    monkeypatch.setenv("KGEN_POISON", "1")
    _run("cuda", ngroups, d_nonssm, norm, before, proj, packed, init, dt_limit, batch=2, seqlen=1000)


@pytest.mark.parametrize("change, message", [
    ({"D": torch.ones(4)}, "mamba_split_conv1d_scan_combined: D has shape (4,) (one value per head), so headdim must be "
                           "given as an int, got None"),
    ({"ngroups": 3}, "mamba_split_conv1d_scan_combined: ngroups=3 must be a positive int dividing nheads=4"),
    ({"zxbcdt": torch.ones(1, 5, 7)}, "mamba_split_conv1d_scan_combined: zxbcdt has 7 channels; expected 2 * d_nonssm + "
                                      "dim + conv_dim + nheads = 2 * d_nonssm + 256 + 288 + 4"),
    ({"activation": "gelu"}, "mamba_split_conv1d_scan_combined: activation is 'gelu'; accepted: None, 'silu' or 'swish'"),
    ({"rmsnorm_weight": torch.ones(5)}, "mamba_split_conv1d_scan_combined: 'rmsnorm_weight' must be a tensor of shape "
                                        "(256,) or None, got (5,)"),
])
def test_bad_arguments_are_one_sentence(change, message):
    from kgen.ops import mamba_split_conv1d_scan_combined

    args = {"zxbcdt": torch.ones(1, 5, 256 + 288 + 4), "conv1d_weight": torch.ones(288, 4), "conv1d_bias": None,
            "dt_bias": torch.zeros(4), "A": -torch.ones(4), "D": torch.ones(4, 64), "chunk_size": 64}
    if "D" in change:
        args["headdim"] = None
    args.update(change)
    with pytest.raises(LaunchError) as e:
        mamba_split_conv1d_scan_combined(**args)
    assert str(e.value) == message
