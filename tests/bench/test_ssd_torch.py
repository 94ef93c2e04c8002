"""kgen.bench.ssd_torch: the chunked form (the GPU tests' reference and the benchmark's torch peer)
equals the step-by-step recurrence, values and gradients, in float64."""
from __future__ import annotations

import pytest
import torch

from kgen.bench.ssd_torch import ssd_chunked, ssd_sequential


@pytest.mark.parametrize("seqlen, chunk, nheads, ngroups, softplus, limit, extras", [
    (70, 32, 2, 1, True, (0.0, float("inf")), False),  # two chunks and a partial one
    (1, 16, 4, 2, False, (0.1, 0.6), False),
    (48, 16, 4, 4, True, (0.0, 0.3), False),
    (70, 32, 2, 1, True, (0.0, float("inf")), True),  # per-channel D, initial states
    # packed sequences, starts inside chunks, on a chunk's first position (32) and its last (63)
    (70, 32, 2, 1, True, (0.0, float("inf")), "packed"),
])
def test_chunked_equals_the_recurrence(seqlen, chunk, nheads, ngroups, softplus, limit, extras):
    g = torch.Generator().manual_seed(seqlen * 7 + chunk)
    x = torch.randn(2, seqlen, nheads, 8, generator=g, dtype=torch.float64)
    dt = torch.rand(2, seqlen, nheads, generator=g, dtype=torch.float64) - 0.5
    A = -torch.exp(torch.randn(nheads, generator=g, dtype=torch.float64))
    B = torch.randn(2, seqlen, ngroups, 16, generator=g, dtype=torch.float64)
    C = torch.randn(2, seqlen, ngroups, 16, generator=g, dtype=torch.float64)
    D = torch.randn(nheads, *((8,) if extras else ()), generator=g, dtype=torch.float64)
    bias = 0.1 * torch.randn(nheads, generator=g, dtype=torch.float64)
    h0 = torch.randn(2, nheads, 8, 16, generator=g, dtype=torch.float64) if extras else None
    leaves = [t.requires_grad_() for t in (x, dt, A, B, C, D, bias) + ((h0,) if extras else ())]
    seq_idx = None
    if extras == "packed":  # rows: starts at 10, 32 and 63; at 45
        pos = torch.arange(seqlen)
        seq_idx = torch.stack([(pos >= 10).int() + (pos >= 32).int() + (pos >= 63).int(), (pos >= 45).int()]).to(torch.int32)
    kw = dict(D=D, dt_bias=bias, dt_softplus=softplus, dt_limit=limit, initial_states=h0, seq_idx=seq_idx)
    y1, h1 = ssd_chunked(x, dt, A, B, C, chunk, **kw)
    y2, h2 = ssd_sequential(x, dt, A, B, C, **kw)
    torch.testing.assert_close(y1, y2, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(h1, h2, rtol=1e-10, atol=1e-10)
    dy, dh = torch.randn_like(y1), torch.randn_like(h1)
    g1 = torch.autograd.grad((y1, h1), leaves, (dy, dh))
    g2 = torch.autograd.grad((y2, h2), leaves, (dy, dh))
    for name, a, b in zip("x dt A B C D dt_bias initial_states".split(), g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=lambda m, n=name: f"d{n}: {m}")
