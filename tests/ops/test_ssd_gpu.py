"""kgen.ops.mamba_chunk_scan_combined on a GPU: y, final_states and every gradient against float64.

The reference is autograd through the chunked form in float64 (kgen.bench.ssd_torch, itself
checked against the step-by-step recurrence in tests/bench/test_ssd_torch.py). Tolerance: twice
the error of the same chunked computation done by PyTorch in bfloat16 plus a floor
(helpers.check_close), and in any case at most 2% of the largest |reference| plus the same floor (PyTorch's bf16
cumsum of dt*A is loose, so the first bound alone could be wide). Outputs are NaN-poisoned
(KGEN_POISON); inputs are fresh random tensors; lengths include 1, 63, 1000 and 4097.
"""
from __future__ import annotations

import math
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

# (batch, seqlen, nheads, ngroups, dstate, chunk, D, dt_bias, softplus, dt_limit); D: None, "head"
# (nheads,) or "channel" (nheads, headdim); "+h0" adds initial states, "+z" the gate z, "+p128"
# makes headdim 128 (64 otherwise), "+packed" packs sequences into each row (seq_idx: starts at
# seqlen/7, a chunk's first position, a chunk's last, and 3 seqlen/4)
CASES = [
    (2, 1, 4, 1, 64, 64, "head+h0", True, True, (0.0, math.inf)),
    (2, 63, 4, 2, 128, 64, None, False, False, (0.001, 0.1)),
    (1, 1000, 8, 1, 128, 256, "head", True, True, (0.0, math.inf)),
    (2, 1000, 8, 8, 64, 128, "channel+h0", False, True, (0.0, 0.5)),
    (1, 4097, 4, 1, 128, 256, "channel", True, True, (0.0, math.inf)),
    (1, 4097, 8, 2, 64, 64, "head+h0", True, True, (0.0, math.inf)),
    (3, 512, 8, 4, 128, 128, "head", True, False, (0.0, math.inf)),
    (2, 1000, 4, 1, 128, 256, "head+z", True, True, (0.0, math.inf)),
    (1, 63, 8, 2, 64, 64, "channel+h0+z", False, True, (0.0, math.inf)),
    (2, 1000, 4, 1, 128, 256, "channel+h0+p128", True, True, (0.0, math.inf)),
    (1, 4097, 8, 2, 64, 64, "head+p128", True, True, (0.0, math.inf)),
    (2, 1000, 8, 1, 128, 256, "head+h0+packed", True, True, (0.0, math.inf)),
    (1, 4097, 8, 2, 64, 64, "channel+packed+p128", True, True, (0.0, math.inf)),
    (3, 512, 8, 4, 128, 128, "head+packed", True, False, (0.0, math.inf)),
    (2, 1000, 4, 1, 256, 256, "channel+h0", True, True, (0.0, math.inf)),
    (1, 4097, 8, 2, 256, 128, "head+h0+p128", True, True, (0.0, math.inf)),
    (2, 1000, 8, 1, 256, 64, "head+packed", True, True, (0.0, math.inf)),
]


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setenv("KGEN_POISON", "1")


def _inputs(batch, seqlen, nheads, ngroups, dstate, seed, d_kind):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    p = 128 if "p128" in d_kind else 64
    x = torch.randn(batch, seqlen, nheads, p, device=dev, generator=g).bfloat16()
    dt = (torch.rand(batch, seqlen, nheads, device=dev, generator=g) * 2 - 3).bfloat16()  # softplus ~0.05-0.13
    A = -torch.exp(torch.rand(nheads, device=dev, generator=g) * 2)
    B = torch.randn(batch, seqlen, ngroups, dstate, device=dev, generator=g).bfloat16()
    C = torch.randn(batch, seqlen, ngroups, dstate, device=dev, generator=g).bfloat16()
    D = torch.randn(nheads, *((p,) if "channel" in d_kind else ()), device=dev, generator=g)
    bias = 0.5 * torch.randn(nheads, device=dev, generator=g)
    h0 = torch.randn(batch, nheads, p, dstate, device=dev, generator=g) if "h0" in d_kind else None
    z = torch.randn(x.shape, device=dev, generator=g).bfloat16() if "z" in d_kind else None
    return x, dt, A, B, C, D, bias, h0, z


def _seq_idx(batch, seqlen, chunk):
    """Sequences packed into each row: starts at seqlen/7, on a chunk's first position, on a
    chunk's last and at 3 seqlen/4 (those inside the row); the second row one chunk later."""
    pos = torch.arange(seqlen, device="cuda")
    rows = []
    for r in range(batch):
        starts = {seqlen // 7, chunk * (1 + r), chunk * (2 + r) - 1, 3 * seqlen // 4}
        rows.append(sum((pos >= s).int() for s in starts if 0 < s < seqlen))
    return torch.stack(rows).to(torch.int32)


def _close(name, got, ref, lowp):
    helpers.check_close(name, got, ref, lowp)
    # plus check_close's floor: a gradient that is 0 exactly (dA at length 1) is met by rounding noise
    err, scale, floor = helpers.max_err(got, ref), float(ref.abs().max()), helpers.FLOOR.get(got.dtype, 0.0)
    assert err <= 0.02 * scale + floor, f"{name}: max error {err:.3g} is over 2% of max |reference| {scale:.3g} + {floor:g}"


@pytest.mark.parametrize("batch, seqlen, nheads, ngroups, dstate, chunk, d_kind, with_bias, softplus, limit", CASES,
                         ids=[f"b{c[0]}-l{c[1]}-h{c[2]}-g{c[3]}-n{c[4]}-chunk{c[5]}-D{c[6]}" for c in CASES])
def test_matches_float64(batch, seqlen, nheads, ngroups, dstate, chunk, d_kind, with_bias, softplus, limit):
    from kgen.ops import mamba_chunk_scan_combined

    seed = zlib.crc32(f"{batch}{seqlen}{nheads}{ngroups}{dstate}{chunk}".encode())
    x, dt, A, B, C, D, bias, h0, z = _inputs(batch, seqlen, nheads, ngroups, dstate, seed, d_kind or "")
    D, bias = (D if d_kind else None), (bias if with_bias else None)
    seq_idx = _seq_idx(batch, seqlen, chunk) if "packed" in (d_kind or "") else None
    names = ("x", "dt", "A", "B", "C", "D", "dt_bias", "initial_states", "z")
    leaves = {n: t for n, t in zip(names, (x, dt, A, B, C, D, bias, h0, z)) if t is not None}
    kw = dict(dt_softplus=softplus, dt_limit=limit, seq_idx=seq_idx)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    dy = torch.randn(x.shape, device="cuda", generator=g).bfloat16()
    dh = torch.randn(batch, nheads, x.shape[3], dstate, device="cuda", generator=g)

    mine = {n: t.clone().requires_grad_() for n, t in leaves.items()}
    y, final = mamba_chunk_scan_combined(mine["x"], mine["dt"], mine["A"], mine["B"], mine["C"], chunk,
                                         D=mine.get("D"), dt_bias=mine.get("dt_bias"),
                                         initial_states=mine.get("initial_states"), z=mine.get("z"),
                                         return_final_states=True, **kw)
    torch.autograd.backward([y, final], [dy, dh])

    outs = {}
    for label, dtype in (("ref", torch.float64), ("lowp", torch.bfloat16)):
        # the float64 ground truth, and PyTorch computing the same chunked form in bfloat16
        ts = {n: (t.double() if dtype == torch.float64 else t).detach().requires_grad_() for n, t in leaves.items()}
        ry, rh = ssd_chunked(ts["x"], ts["dt"], ts["A"], ts["B"], ts["C"], chunk, D=ts.get("D"),
                             dt_bias=ts.get("dt_bias"), initial_states=ts.get("initial_states"), dtype=dtype, **kw)
        if "z" in ts:  # mamba-ssm's gate, in the same dtype
            ry = ry * torch.nn.functional.silu(ts["z"].to(ry.dtype))
        torch.autograd.backward([ry, rh], [dy.to(dtype), dh.to(dtype)])
        outs[label] = {"y": ry, "final_states": rh, **{f"d{n}": t.grad for n, t in ts.items()}}
    _close("y", y, outs["ref"]["y"], outs["lowp"]["y"])
    _close("final_states", final, outs["ref"]["final_states"], outs["lowp"]["final_states"])
    for n, t in mine.items():
        assert t.grad is not None and t.grad.dtype == t.dtype, f"d{n}: {t.grad}"
        _close(f"d{n}", t.grad, outs["ref"][f"d{n}"], outs["lowp"][f"d{n}"])
