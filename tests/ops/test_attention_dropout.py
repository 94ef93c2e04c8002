"""Dropout in attention (specs/variants/dropout.yaml: fa2_fwd's prob_mod hook with rand8(), the
backward derived with the same hook): forward and backward on the CPU interpreter against the
spec's reference and against the meaning written out from kgen/ir/philox.py's numbers
(helpers.dropout_factors: p * keep / kept, the lse of the undropped scores); the keep rate and
independence across heads, rows and seeds, read off the kernel's own output; flash_attn_func's
dropout_p (repeatable under torch.manual_seed, its errors); the gfx942 emulation; the GPU."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import helpers  # noqa: E402

from kgen.spec.load import backward_spec, load_spec  # noqa: E402

SPEC = ROOT / "specs" / "variants" / "dropout.yaml"
B, SQ, SK, H, HKV, D = 2, 150, 200, 2, 1, 32
SEED = -(2**62) + 977  # both key words in use


def _meaning(q, k, v, scale, causal, p, seed):
    b, sq, h, _ = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    qh, kh, vh = (t.transpose(1, 2).double() for t in (q, k, v))
    kh, vh = kh.repeat_interleave(h // hkv, 1), vh.repeat_interleave(h // hkv, 1)
    s = qh @ kh.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.arange(sk)[None, :] > torch.arange(sq)[:, None] + sk - sq, -math.inf)
    prob = torch.softmax(s, -1).nan_to_num(0.0)
    return ((prob * helpers.dropout_factors(b, h, sq, sk, p, seed)) @ vh).transpose(1, 2), torch.logsumexp(s, -1)


def _qkv(gen, b=B, sq=SQ, sk=SK, h=H, hkv=HKV):
    return [torch.randn(b, n, g, D, generator=gen).to(torch.bfloat16) for n, g in ((sq, h), (sk, hkv), (sk, hkv))]


@pytest.mark.parametrize("causal, p", [(False, 0.2), (True, 0.5)])
def test_interpreter_forward_and_backward(causal, p):
    ls = load_spec(SPEC)
    gen = torch.Generator().manual_seed(11 + causal)
    q, k, v = _qkv(gen)
    scalars = {"softmax_scale": 1 / math.sqrt(D), "dropout_p": p, "seed": SEED}
    variant = {"dtype": "bf16", "head_dim": D, "causal": causal}
    sizes = {"B": B, "SQ": SQ, "SK": SK, "H": H, "HKV": HKV}
    got = helpers.run_spec_cpu(ls, variant, {"q": q, "k": k, "v": v}, sizes, scalars)
    helpers.check_outputs(ls, got, {"q": q, "k": k, "v": v}, scalars, variant)
    o_want, lse_want = _meaning(q, k, v, scalars["softmax_scale"], causal, p, SEED)
    ref = helpers.reference(ls, {"q": q, "k": k, "v": v, **scalars}, variant=variant)
    torch.testing.assert_close(ref["o"], o_want, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(ref["lse"], lse_want, rtol=1e-6, atol=1e-6)

    bwd = backward_spec(ls)
    do = torch.randn(B, SQ, H, D, generator=gen).to(torch.bfloat16)
    saved = {"q": q, "k": k, "v": v, "o": ref["o"].to(torch.bfloat16), "lse": ref["lse"].float(), "do": do}
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(_meaning(*leaves, scalars["softmax_scale"], causal, p, SEED)[0], leaves, do.double())
    for deterministic in (False, True):
        bvariant = {**variant, "deterministic": deterministic}
        grads = helpers.run_spec_cpu(bwd, bvariant, dict(saved), sizes, scalars)
        helpers.check_outputs(bwd, grads, saved, scalars, bvariant)
        for n, w in zip(("dq", "dk", "dv"), want):
            err = (grads[n].double() - w).abs().max() / w.abs().max()
            assert err < 0.02, (n, deterministic, float(err))


def test_keep_rate_and_independence():
    """With v the identity (SK = D keys, each its own one-hot value), o[b, i, h, :] is row i's
    dropped probabilities: the mask read off the kernel's output."""
    import kgen

    b, sq, h, p = 2, 512, 4, 0.3
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(b, sq, h, D, generator=gen).to(torch.bfloat16)
    k = (0.1 * torch.randn(b, D, h, D, generator=gen)).to(torch.bfloat16)  # flat scores: no probability underflows
    v = torch.eye(D).view(1, D, 1, D).expand(b, D, h, D).to(torch.bfloat16).contiguous()
    op = kgen.load(SPEC)
    o, _ = op(q, k, v, softmax_scale=1.0, dropout_p=p, seed=SEED, causal=False)
    kept = (o != 0).transpose(1, 2).float()  # (b, h, sq, D)
    n = kept.numel()
    rate = 1 - math.ceil(256 * p) / 256  # rand8 >= p: bytes k >= 256 p
    assert abs(float(kept.mean()) - rate) < 4 * (rate * (1 - rate) / n) ** 0.5
    assert torch.equal(kept.bool(), helpers.dropout_factors(b, h, sq, D, p, SEED) > 0)
    other = (op(q, k, v, softmax_scale=1.0, dropout_p=p, seed=SEED + 1, causal=False)[0] != 0).transpose(1, 2).float()
    for x, y in ((kept[:, 0], kept[:, 1]), (kept[0], kept[1]), (kept[:, :, 1:], kept[:, :, :-1]), (kept, other)):
        r = float(torch.corrcoef(torch.stack([x.flatten(), y.flatten()]))[0, 1])
        assert abs(r) < 4 / x.numel() ** 0.5, r  # heads, batch rows, neighbouring query rows, seeds


def test_flash_attn_func_dropout_repeats_under_manual_seed():
    from kgen.ops import flash_attn_func
    from kgen.ops.attention import dropout_seed

    gen = torch.Generator().manual_seed(2)
    q, k, v = _qkv(gen, b=1, sq=70, sk=90, h=4, hkv=2)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(123)
    o1 = flash_attn_func(*leaves, dropout_p=0.25, causal=True)
    g1 = torch.autograd.grad(o1, leaves, torch.ones_like(o1))
    torch.manual_seed(123)
    seed = dropout_seed()
    torch.manual_seed(123)
    o2 = flash_attn_func(*leaves, dropout_p=0.25, causal=True)
    assert torch.equal(o1, o2) and not torch.equal(o1, flash_attn_func(*leaves, dropout_p=0.25, causal=True))
    want, _ = _meaning(q, k, v, 1 / math.sqrt(D), True, 0.25, seed)
    torch.testing.assert_close(o1.double(), want, rtol=0.02, atol=0.02)
    exact = [t.double().requires_grad_() for t in (q, k, v)]
    gw = torch.autograd.grad(_meaning(*exact, 1 / math.sqrt(D), True, 0.25, seed)[0], exact, torch.ones_like(want))
    for g, w in zip(g1, gw):
        assert float((g.double() - w).abs().max() / w.abs().max()) < 0.02
    assert torch.equal(flash_attn_func(q, k, v, dropout_p=0.0), flash_attn_func(q, k, v))


@pytest.mark.parametrize("kw, message", [
    ({"dropout_p": 1.0}, "flash_attn_func: dropout_p is 1.0; accepted: a number with 0 <= dropout_p < 1"),
    ({"dropout_p": -0.1}, "flash_attn_func: dropout_p is -0.1; accepted: a number with 0 <= dropout_p < 1"),
    ({"dropout_p": "0.1"}, "flash_attn_func: dropout_p is '0.1'; accepted: a number with 0 <= dropout_p < 1"),
])
def test_bad_dropout_is_named(kw, message):
    from kgen.errors import LaunchError
    from kgen.ops import flash_attn_func

    q, k, v = (torch.randn(1, 5, 2, 32).to(torch.bfloat16) for _ in range(3))
    with pytest.raises(LaunchError) as e:
        flash_attn_func(q, k, v, **kw)
    assert str(e.value) == message


def _through_the_op(device: str, **load):
    import kgen

    op = kgen.load(SPEC, **load)
    gen = torch.Generator().manual_seed(9)
    q, k, v = _qkv(gen)
    do = torch.randn(B, SQ, H, D, generator=gen).to(torch.bfloat16)
    leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
    o, lse = op(*leaves, softmax_scale=1 / math.sqrt(D), dropout_p=0.2, seed=SEED, causal=True)
    got = [o, lse, *torch.autograd.grad(o, leaves, do.to(device))]
    exact = [t.double().requires_grad_() for t in (q, k, v)]
    o_want, lse_want = _meaning(*exact, 1 / math.sqrt(D), True, 0.2, SEED)
    want = [o_want, lse_want, *torch.autograd.grad(o_want, exact, do.double())]
    for n, g, w in zip(("o", "lse", "dq", "dk", "dv"), got, want):
        err = float((g.detach().cpu().double() - w.detach()).abs().max() / w.detach().abs().max())
        assert err < 0.02, (n, err)


def test_gfx942_emulation():
    from kgen.backends import available
    from kgen.knobs import knobs

    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    _through_the_op("cpu", target="gfx942", emulate=True)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
def test_gpu(monkeypatch):
    monkeypatch.setenv("KGEN_POISON", "1")
    _through_the_op("cuda")
