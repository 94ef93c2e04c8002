"""mamba_chunk_scan_combined's dtypes and varlen states on a GPU, against float64.

Dtypes: x/B/C in bf16, fp16 or fp32 with dt in fp32, bf16 or fp16 (and dstate 16 and 32); y, final_states and every
gradient against autograd through the chunked form in float64 (kgen.bench.ssd_torch), within
twice the error of PyTorch computing it in x's dtype (bf16 for fp32 x, which runs the bf16
kernels) and at most 2% of the largest |reference| (test_ssd_gpu._close). Varlen states:
mamba-ssm's test grid (packed sequences of 1 to 199 positions, ngroups 1, 2, 8 and one per head,
chunk 64 and 128, fp32, fp16 and bf16, dstate 32), each sequence's state against its own float64
scan. Outputs are NaN-poisoned; inputs fresh random tensors.
"""
from __future__ import annotations

import sys
import zlib
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
import helpers  # noqa: E402

from kgen.bench.ssd_torch import ssd_chunked  # noqa: E402

_NO_GPU = helpers.no_gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_NO_GPU is not None, reason=str(_NO_GPU))]

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
# what PyTorch computes the low-precision reference in: x's dtype, bf16 for fp32 (the kernels')
LOWP = {F32: BF16, F16: F16, BF16: BF16}


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setenv("KGEN_POISON", "1")


def _close(name, got, ref, lowp):
    helpers.check_close(name, got, ref, lowp)
    err, scale, floor = helpers.max_err(got, ref), float(ref.abs().max()), helpers.FLOOR.get(got.dtype, 0.0)
    assert err <= 0.02 * scale + floor, f"{name}: max error {err:.3g} is over 2% of max |reference| {scale:.3g} + {floor:g}"


def _inputs(batch, seqlen, nheads, ngroups, headdim, dstate, xdt, dtdt, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    x = torch.randn(batch, seqlen, nheads, headdim, device=dev, generator=g).to(xdt)
    dt = (torch.rand(batch, seqlen, nheads, device=dev, generator=g) * 2 - 3).to(dtdt)
    A = -torch.exp(torch.rand(nheads, device=dev, generator=g) * 2)
    B = (torch.randn(batch, seqlen, ngroups, dstate, device=dev, generator=g) / 5).to(xdt)
    C = torch.randn(batch, seqlen, ngroups, dstate, device=dev, generator=g).to(xdt)
    D = torch.randn(nheads, device=dev, generator=g)
    bias = 0.5 * torch.randn(nheads, device=dev, generator=g)
    return x, dt, A, B, C, D, bias


DTYPE_CASES = [  # (batch, seqlen, nheads, ngroups, headdim, dstate, chunk, x dtype, dt dtype)
    (2, 1000, 8, 2, 64, 128, 256, F16, F32),
    (1, 4097, 8, 1, 64, 64, 64, F16, F16),
    (2, 1000, 4, 4, 128, 128, 128, BF16, F32),
    (1, 777, 8, 2, 64, 128, 256, F32, F32),
    (2, 300, 4, 1, 128, 256, 64, F32, BF16),
    (1, 2000, 8, 8, 64, 64, 128, BF16, F16),
    (2, 1000, 8, 1, 64, 16, 256, BF16, BF16),
    (1, 555, 4, 2, 128, 32, 64, F16, F32),
]


@pytest.mark.parametrize("batch, seqlen, nheads, ngroups, headdim, dstate, chunk, xdt, dtdt", DTYPE_CASES,
                         ids=[f"b{c[0]}-l{c[1]}-h{c[2]}-g{c[3]}-p{c[4]}-n{c[5]}-chunk{c[6]}-x{str(c[7])[6:]}-dt{str(c[8])[6:]}"
                              for c in DTYPE_CASES])
def test_dtypes_match_float64(batch, seqlen, nheads, ngroups, headdim, dstate, chunk, xdt, dtdt):
    from kgen.ops import mamba_chunk_scan_combined

    seed = zlib.crc32(f"{batch}{seqlen}{nheads}{ngroups}{headdim}{dstate}{chunk}{xdt}{dtdt}".encode())
    names = ("x", "dt", "A", "B", "C", "D", "dt_bias")
    leaves = dict(zip(names, _inputs(batch, seqlen, nheads, ngroups, headdim, dstate, xdt, dtdt, seed)))
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    dy = torch.randn(leaves["x"].shape, device="cuda", generator=g).to(xdt)
    dh = torch.randn(batch, nheads, headdim, dstate, device="cuda", generator=g)
    mine = {n: t.clone().requires_grad_() for n, t in leaves.items()}
    y, final = mamba_chunk_scan_combined(*(mine[n] for n in names[:5]), chunk, D=mine["D"], dt_bias=mine["dt_bias"],
                                         dt_softplus=True, return_final_states=True)
    assert y.dtype == xdt and final.dtype == F32
    torch.autograd.backward([y, final], [dy, dh])
    outs = {}
    for label, dtype in (("ref", torch.float64), ("lowp", LOWP[xdt])):
        ts = {n: t.detach().to(dtype).requires_grad_() for n, t in leaves.items()}
        ry, rh = ssd_chunked(*(ts[n] for n in names[:5]), chunk, D=ts["D"], dt_bias=ts["dt_bias"], dt_softplus=True,
                             dtype=dtype)
        torch.autograd.backward([ry, rh], [dy.to(dtype), dh.to(dtype)])
        outs[label] = {"y": ry, "final_states": rh, **{f"d{n}": t.grad for n, t in ts.items()}}
    _close("y", y, outs["ref"]["y"], outs["lowp"]["y"])
    _close("final_states", final, outs["ref"]["final_states"], outs["lowp"]["final_states"])
    for n, t in mine.items():
        assert t.grad is not None and t.grad.dtype == leaves[n].dtype, f"d{n}: {t.grad}"
        _close(f"d{n}", t.grad, outs["ref"][f"d{n}"], outs["lowp"][f"d{n}"])


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("ngroups", [1, 2, 8, "max"])
@pytest.mark.parametrize("chunk", [64, 128])
def test_varlen_states_match_each_sequence(chunk, ngroups, dtype):
    from kgen.ops import mamba_chunk_scan_combined

    seed = chunk + (ngroups if ngroups != "max" else 64)
    g = torch.Generator(device="cuda").manual_seed(seed)
    nseq, nheads, headdim, dstate = 60, 16, 64, 32
    ngroups = nheads if ngroups == "max" else ngroups
    lens = torch.randint(1, 200, (nseq,), device="cuda", generator=g)
    cu = torch.nn.functional.pad(lens.cumsum(0), (1, 0)).to(torch.int32)
    total = int(cu[-1])
    seq_idx = torch.repeat_interleave(torch.arange(nseq, device="cuda", dtype=torch.int32), lens)[None].contiguous()
    x, _, A, B, C, D, bias = _inputs(1, total, nheads, ngroups, headdim, dstate, dtype, F32, seed)
    dt = torch.nn.functional.softplus(torch.randn(1, total, nheads, device="cuda", generator=g) - 4)  # mamba-ssm's draw
    A = -0.1 * torch.rand(nheads, device="cuda", generator=g)
    y, states = mamba_chunk_scan_combined(x, dt, A, B, C, chunk, D=D, seq_idx=seq_idx, cu_seqlens=cu,
                                          return_varlen_states=True)
    assert states.shape == (nseq, nheads, headdim, dstate) and states.dtype == dtype
    ref, lowp = [], []
    bounds = cu.tolist()
    for s in range(nseq):
        part = slice(bounds[s], bounds[s + 1])
        for out, dt_ in ((ref, torch.float64), (lowp, LOWP[dtype])):
            out.append(ssd_chunked(x[:, part], dt[:, part], A, B[:, part], C[:, part], chunk, dtype=dt_)[1][0])
    _close("varlen_states", states, torch.stack(ref), torch.stack(lowp))
