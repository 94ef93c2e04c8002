"""Attention under a mask the interval analysis cannot bound (segment ids compared, in any order:
kgen/bench/specs/segment_eq.yaml, which kgen.bench.variants also times), whose programs measure their blocks at run time, forward and
backward (fa2_bwd's 64- and 128-key forms measure the transposed question), against the meaning
written out in float64 with torch.autograd: on the CPU interpreter through the op's autograd, in
the gfx942 emulation and on the GPU."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import helpers  # noqa: E402

SPEC = ROOT / "kgen" / "bench" / "specs" / "segment_eq.yaml"
B, SQ, SK, H, HKV = 2, 70, 150, 2, 1


def _inputs(gen: torch.Generator, D: int) -> dict[str, torch.Tensor]:
    q, k, v = (torch.randn(B, n, h, D, generator=gen).to(torch.bfloat16) for n, h in ((SQ, H), (SK, HKV), (SK, HKV)))
    seg = torch.empty(B, SK, dtype=torch.int32)
    for b in range(B):  # runs of 1 to 40 positions, ids 0 to 7 drawn again for each run
        pos = 0
        while pos < SK:
            n = int(torch.randint(1, 41, (1,), generator=gen))
            seg[b, pos:pos + n] = int(torch.randint(0, 8, (1,), generator=gen))
            pos += n
    return {"q": q, "k": k, "v": v, "seg": seg}


def _meaning(t: dict[str, torch.Tensor], causal: bool, scale: float):
    leaves = {n: t[n].double().requires_grad_() for n in "qkv"}
    at = torch.arange(SQ)[:, None] + SK - SQ
    j = torch.arange(SK)[None, :]
    seen = t["seg"][:, at.clamp(0, SK - 1)] == t["seg"][:, None, :]  # (B, SQ, SK)
    if causal:
        seen = seen & (j <= at)
    qh, kh, vh = (leaves[n].transpose(1, 2) for n in "qkv")
    kh, vh = kh.repeat_interleave(H // HKV, 1), vh.repeat_interleave(H // HKV, 1)
    s = torch.where(seen[:, None], qh @ kh.transpose(-1, -2) * scale, -math.inf)
    return (torch.softmax(s, -1) @ vh).transpose(1, 2), leaves


def _through_the_op(causal: bool, D: int, device: str, **load):
    import kgen

    op = kgen.load(SPEC, **load)
    gen = torch.Generator().manual_seed(3 + D + causal)
    t = _inputs(gen, D)
    do = torch.randn(B, SQ, H, D, generator=gen).to(torch.bfloat16)
    leaves = {n: t[n].to(device).requires_grad_() for n in "qkv"}
    o, _ = op(**leaves, seg=t["seg"].to(device), softmax_scale=1 / math.sqrt(D), causal=causal)
    grads = torch.autograd.grad(o, list(leaves.values()), do.to(device))
    want_o, exact = _meaning(t, causal, 1 / math.sqrt(D))
    want = torch.autograd.grad(want_o, list(exact.values()), do.double())
    for n, got, w in zip(["o", *leaves], [o, *grads], [want_o, *want]):
        err = (got.double().cpu() - w.detach()).abs().max() / w.detach().abs().max()
        assert err < 2e-2, f"{n}: max error {err:.2e} of its largest value"


# head_dim 128 takes fa2_bwd's transposed form (128-key blocks), 32 and 64 the other
@pytest.mark.parametrize("causal, D", [(False, 32), (True, 64), (False, 128)])
def test_the_op_matches_the_meaning_on_the_cpu(causal, D):
    _through_the_op(causal, D, "cpu")


def test_gfx942_emulation_matches_the_meaning():
    _through_the_op(True, 32, "cpu", target="gfx942", emulate=True)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("causal, D", [(False, 64), (True, 128), (False, 128), (True, 32)])
def test_gpu_matches_the_meaning(causal, D):
    _through_the_op(causal, D, "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
def test_gpu_block_table_is_kept_while_the_ids_are_unchanged():
    """The blocks kernel's table (kgen/runtime/plan.py, kept launches) is reused by a call with
    the same seg object at the same version, and measured again after seg is written in place or
    replaced: shown by spoiling the kept table, which the next call with the same seg then reads
    (its output changes), and which a call after seg.copy_() does not (its output is right)."""
    import kgen

    op = kgen.load(SPEC)
    D, scale = 64, 1 / math.sqrt(64)
    gen = torch.Generator().manual_seed(11)
    t, other = _inputs(gen, D), _inputs(gen, D)
    qkv = [t[n].cuda() for n in "qkv"]
    seg = t["seg"].cuda()
    first, _ = op(*qkv, seg, softmax_scale=scale, causal=True)
    (plan,) = [p for p in op._plans.values() if p.kept]
    (kept,) = plan.kept
    tables = plan.memo[kept.launch][-1]
    again, _ = op(*qkv, seg, softmax_scale=scale, causal=True)
    assert torch.equal(first, again)
    for table in tables:  # every list empty: no key is walked, so every output row is 0
        table.zero_()
    spoiled, _ = op(*qkv, seg, softmax_scale=scale, causal=True)
    assert not torch.equal(spoiled, first), "a call with the same seg did not reuse the kept table"
    seg.copy_(other["seg"].cuda())  # in place: torch counts a new version
    o, _ = op(*qkv, seg, softmax_scale=scale, causal=True)
    want, _ = _meaning({**{n: t[n] for n in "qkv"}, "seg": other["seg"]}, True, scale)
    err = (o.double().cpu() - want.detach()).abs().max() / want.detach().abs().max()
    assert err < 2e-2, f"after seg.copy_(): max error {err:.2e} of its largest value"
