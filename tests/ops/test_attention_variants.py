"""The attention variants of specs/variants (each a file that extends fa2_fwd.yaml and overrides
its hooks) on the CPU interpreter: the forward and the derived backward (fa2_bwd.yaml taking the
same hooks) against two references, the spec's own (the hooks run in torch) and each variant's
meaning written out here independently, in float64 with torch.autograd for the gradients. The
sizes are ragged and large enough that the interval analysis skips key and query blocks at both
ends and finds whole blocks between."""
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

VARIANTS = ROOT / "specs" / "variants"
B, SQ, SK, H, HKV, D = 1, 200, 264, 2, 1, 32


def _mask_and_bias(name: str, scalars: dict, causal: bool, slopes: torch.Tensor | None):
    """(visible (SQ, SK) or (B, H, SQ, SK), score -> score) for each variant, from its summary."""
    i, j = torch.arange(SQ)[:, None], torch.arange(SK)[None, :]
    diag = i + SK - SQ
    seen = (j <= diag) if causal else torch.ones(SQ, SK, dtype=torch.bool)
    mod = lambda s: s  # noqa: E731
    if name == "sliding_window":
        seen = (j >= diag - scalars["window_left"]) & (j <= diag + scalars["window_right"])
    elif name == "window_softcap":
        seen = (j >= diag - scalars["window_left"]) & (j <= diag + scalars["window_right"])
        mod = lambda s: scalars["softcap"] * torch.tanh(s / scalars["softcap"])  # noqa: E731
    elif name == "prefix_lm":
        seen = (j < scalars["prefix"]) | (j <= diag)
    elif name == "softcap":
        mod = lambda s: scalars["softcap"] * torch.tanh(s / scalars["softcap"])  # noqa: E731
    elif name == "document":
        doc = torch.bucketize(torch.arange(SK), torch.tensor(DOC_STARTS[1:-1]), right=True)
        seen = doc[(i + SK - SQ).clamp(0, SK - 1)] == doc[j]
        seen = seen & (j <= diag) if causal else seen
    elif name == "varlen":  # sequence d: queries from Q_STARTS[d], keys from DOC_STARTS[d]
        dq = torch.bucketize(torch.arange(SQ), torch.tensor(Q_STARTS[1:-1]), right=True)[:, None]
        dk = torch.bucketize(torch.arange(SK), torch.tensor(DOC_STARTS[1:-1]), right=True)[None, :]
        seen = dq == dk
        if causal:  # bottom-right within each sequence
            seen = seen & (j - torch.tensor(DOC_STARTS)[dq + 1] <= i - torch.tensor(Q_STARTS)[dq + 1])
    elif name == "alibi":
        dist = (diag - j).abs().double()
        mod = lambda s: s - slopes.double()[:, :, None, None] * dist  # noqa: E731
    return seen, mod


def _attention(q, k, v, scale, seen, mod):
    qh, kh, vh = (t.transpose(1, 2).double() for t in (q, k, v))
    kh, vh = kh.repeat_interleave(H // HKV, 1), vh.repeat_interleave(H // HKV, 1)
    s = torch.where(seen, mod(qh @ kh.transpose(-1, -2) * scale), -math.inf)
    return (torch.softmax(s, -1).nan_to_num(0.0) @ vh).transpose(1, 2), torch.logsumexp(s, -1)


DOC_STARTS = [0, 40, 41, 150, 200, SK]  # packed documents over the SK positions (one of length 1)
Q_STARTS = [0, 30, 30, 120, 170, SQ]  # varlen: the same sequences' queries (one with none, one with a key)


def _varlen_inputs() -> dict:
    ids = {n: torch.bucketize(torch.arange(total), torch.tensor(starts[1:-1]), right=True).to(torch.int32)[None].contiguous()
           for n, total, starts in (("seq_q", SQ, Q_STARTS), ("seq_k", SK, DOC_STARTS))}
    return {**ids, "cu_seqlens_q": torch.tensor([Q_STARTS], dtype=torch.int32),
            "cu_seqlens_k": torch.tensor([DOC_STARTS], dtype=torch.int32)}


def _extra_inputs(name: str) -> dict:
    return _document_inputs() if name == "document" else _varlen_inputs() if name == "varlen" else {}


def _document_inputs() -> dict:
    seg = torch.bucketize(torch.arange(SK), torch.tensor(DOC_STARTS[1:-1]), right=True).to(torch.int32)
    return {"seg": seg[None].expand(B, SK).contiguous(), "starts": torch.tensor([DOC_STARTS], dtype=torch.int32).expand(B, -1).contiguous()}


CASES = [("sliding_window", False, {"window_left": 70, "window_right": 9}),
         ("sliding_window", False, {"window_left": 0, "window_right": 0}),
         ("sliding_window", False, {"window_left": 1 << 20, "window_right": 30}),
         ("prefix_lm", False, {"prefix": 97}),
         ("window_softcap", False, {"window_left": 60, "window_right": 0, "softcap": 2.5}),
         ("softcap", False, {"softcap": 2.5}),
         ("softcap", True, {"softcap": 2.5}),
         ("alibi", False, {}),
         ("alibi", True, {}),
         ("document", False, {}),
         ("document", True, {}),
         ("varlen", False, {}),
         ("varlen", True, {})]


@pytest.mark.parametrize("name, causal, scalars", CASES)
def test_forward_and_backward_match_the_meaning(name, causal, scalars):
    ls = load_spec(VARIANTS / f"{name}.yaml")
    gen = torch.Generator().manual_seed(len(name) + causal)
    q, k, v = (torch.randn(B, n, h, D, generator=gen).to(torch.bfloat16) for n, h in ((SQ, H), (SK, HKV), (SK, HKV)))
    extra = {"slopes": torch.rand(B, H, generator=gen)} if name == "alibi" else _extra_inputs(name)
    scale = 1 / math.sqrt(D)
    every = {"softmax_scale": scale, **scalars}
    variant = {"dtype": "bf16", "head_dim": D, "causal": causal}
    sizes = {"B": B, "SQ": SQ, "SK": SK, "H": H, "HKV": HKV, **({"N1": len(DOC_STARTS)} if name in ("document", "varlen") else {})}
    got = helpers.run_spec_cpu(ls, variant, {"q": q, "k": k, "v": v, **extra}, sizes, every)
    helpers.check_outputs(ls, got, {"q": q, "k": k, "v": v, **extra}, every, variant)
    seen, mod = _mask_and_bias(name, scalars, causal, extra.get("slopes"))
    o_want, lse_want = _attention(q, k, v, scale, seen, mod)
    ref = helpers.reference(ls, {"q": q, "k": k, "v": v, **extra, **every}, variant=variant)
    torch.testing.assert_close(ref["o"], o_want, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(ref["lse"], lse_want.float().double(), rtol=1e-6, atol=1e-6)

    bwd = backward_spec(ls)
    assert bwd.spec.name == f"{ls.spec.name}_bwd" and bwd.spec.hooks == ls.spec.hooks
    do = torch.randn(B, SQ, H, D, generator=gen).to(torch.bfloat16)
    saved = {"q": q, "k": k, "v": v, "o": ref["o"].to(torch.bfloat16), "lse": ref["lse"].float(), "do": do, **extra}
    bvariant = {**variant, "deterministic": False}
    grads = helpers.run_spec_cpu(bwd, bvariant, dict(saved), sizes, every)
    helpers.check_outputs(bwd, grads, saved, every, bvariant)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    o, _ = _attention(*leaves, scale, seen, mod)
    want = torch.autograd.grad(o, leaves, do.double())
    bref = helpers.reference(bwd, {**saved, **every}, variant=bvariant)
    for n, w in zip(("dq", "dk", "dv"), want):
        torch.testing.assert_close(bref[n], w, rtol=1e-9, atol=1e-9)


def test_the_window_skips_blocks_and_finds_whole_ones():
    """The forward's program for the window has a masked phase before the whole key blocks, the
    whole ones, and a masked phase after: three loops over key blocks."""
    from kgen.build import build_variant
    from kgen.hw.descriptor import load_target

    blocks, k = build_variant(load_spec(VARIANTS / "sliding_window.yaml"), {"dtype": "bf16", "head_dim": 64, "causal": False},
                              load_target("sm_90"), compile=False).kernels
    assert blocks.empty  # the window is bounded by the analysis: no block table
    body = k.text.split("__global__")[-1]
    assert body.count("for (int pos") == 3 and "scalar_window_left" in k.text


def _through_the_op(name: str, causal: bool, scalars: dict, device: str, **load):
    """The variant as an op with autograd (kgen.load: forward and derived backward), its outputs
    and gradients against the meaning written out here."""
    import kgen

    op = kgen.load(VARIANTS / f"{name}.yaml", **load)
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(B, n, h, D, generator=gen).to(torch.bfloat16) for n, h in ((SQ, H), (SK, HKV), (SK, HKV)))
    slopes = torch.rand(B, H, generator=gen) if name == "alibi" else None
    do = torch.randn(B, SQ, H, D, generator=gen).to(torch.bfloat16)
    leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
    extra = ({"slopes": slopes.to(device)} if slopes is not None else
             {k: v.to(device) for k, v in _extra_inputs(name).items()})
    o, lse = op(*leaves, **extra, softmax_scale=1 / math.sqrt(D), causal=causal, **scalars)
    got = [o, lse, *torch.autograd.grad(o, leaves, do.to(device))]
    seen, mod = _mask_and_bias(name, scalars, causal, slopes)
    exact = [t.double().requires_grad_() for t in (q, k, v)]
    o_want, lse_want = _attention(*exact, 1 / math.sqrt(D), seen, mod)
    want = [o_want, lse_want, *torch.autograd.grad(o_want, exact, do.double())]
    lowp = [t.clone().requires_grad_() for t in (q, k, v)]  # PyTorch's own error in bf16 sets the bound
    seen_l, mod_l = _mask_and_bias(name, scalars, causal, slopes)
    qh, kh, vh = (t.transpose(1, 2) for t in lowp)
    kh, vh = kh.repeat_interleave(H // HKV, 1), vh.repeat_interleave(H // HKV, 1)
    s = torch.where(seen_l, mod_l(qh.float() @ kh.float().transpose(-1, -2) / math.sqrt(D)).to(torch.bfloat16), -math.inf)
    o_l = (torch.softmax(s.float(), -1).nan_to_num(0.0).to(torch.bfloat16) @ vh).transpose(1, 2)
    lse_l = torch.logsumexp(s.float(), -1)
    lowp_all = [o_l, lse_l, *torch.autograd.grad(o_l, lowp, do)]
    for n, g, w, l in zip(("o", "lse", "dq", "dk", "dv"), got, want, lowp_all):
        helpers.check_close(n, g.detach().cpu(), w.detach(), l.detach())


@pytest.mark.parametrize("name, causal", [("document", True), ("varlen", True), ("alibi", False)])
def test_the_op_on_the_cpu_matches_the_meaning(name, causal):
    """Through kgen.load (forward, derived backward, autograd, the pairing check) on the interpreter."""
    _through_the_op(name, causal, {}, "cpu")


EMULATED = [("sliding_window", False, {"window_left": 70, "window_right": 9}), ("softcap", True, {"softcap": 2.5})]


@pytest.mark.parametrize("name, causal, scalars", EMULATED)
def test_gfx942_emulation_matches_the_meaning(name, causal, scalars):
    from kgen.backends import available
    from kgen.knobs import knobs

    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    _through_the_op(name, causal, scalars, "cpu", target="gfx942", emulate=True)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("name, causal, scalars", CASES)
def test_gpu_matches_the_meaning(name, causal, scalars):
    _through_the_op(name, causal, scalars, "cuda")


# ---- flash_attn_func's keywords -------------------------------------------------------------------

def _flash_meaning(q, k, v, causal, window_size, softcap, slopes):
    """flash-attn's documented meaning of the keywords, in float64."""
    sq, sk = q.shape[1], k.shape[1]
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    diag = i + sk - sq
    left, right = window_size
    seen = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        seen &= j <= diag
    if left >= 0:
        seen &= j >= diag - left
    if right >= 0:
        seen &= j <= diag + right
    qh, kh, vh = (t.transpose(1, 2).double() for t in (q, k, v))
    g = q.shape[2] // k.shape[2]
    s = qh @ kh.repeat_interleave(g, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        s = s - slopes.double().view(1, -1, 1, 1) * (diag - j).abs()
    p = torch.softmax(torch.where(seen, s, -math.inf), -1).nan_to_num(0.0)
    return (p @ vh.repeat_interleave(g, 1)).transpose(1, 2)


@pytest.mark.parametrize("causal, kw", [(False, {"window_size": (6, 2)}), (True, {"window_size": (5, -1)}),
                                        (False, {"window_size": (-1, 0)}), (True, {"softcap": 3.0}),
                                        (True, {"window_size": (7, -1), "softcap": 2.0}),
                                        (False, {"alibi": True}), (True, {"alibi": True})])
def test_flash_attn_func_keywords_mean_what_flash_attn_says(causal, kw):
    from kgen.ops import flash_attn_func

    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, n, h, 32, generator=gen).to(torch.bfloat16) for n, h in ((37, 4), (45, 2), (45, 2)))
    slopes = torch.rand(4, generator=gen) if kw.pop("alibi", False) else None
    o = flash_attn_func(q, k, v, causal=causal, alibi_slopes=slopes, **kw)
    want = _flash_meaning(q, k, v, causal, kw.get("window_size", (-1, -1)), kw.get("softcap", 0.0), slopes)
    torch.testing.assert_close(o.double(), want, rtol=0.02, atol=0.02)


@pytest.mark.parametrize("kw, message", [
    ({"window_size": (3,)}, "flash_attn_func: window_size is (3,); accepted: (left, right), each -1 (no limit) or a number of keys >= 0"),
    ({"window_size": (-2, 4)}, "flash_attn_func: window_size is (-2, 4); accepted: (left, right), each -1 (no limit) or a number of keys >= 0"),
    ({"softcap": float("nan")}, "flash_attn_func: softcap is nan; accepted: 0 (none) or a positive finite number"),
    ({"alibi_slopes": torch.ones(3)}, "flash_attn_func: alibi_slopes is torch.float32 (3,); accepted: a torch.float32 tensor of shape (2,) or (1, 2)"),
    ({"alibi_slopes": torch.ones(2, dtype=torch.float64)}, "flash_attn_func: alibi_slopes is torch.float64 (2,); accepted: a torch.float32 tensor of shape (2,) or (1, 2)"),
])
def test_bad_keywords_are_named(kw, message):
    from kgen.errors import LaunchError
    from kgen.ops import flash_attn_func

    q, k, v = (torch.randn(1, 5, 2, 32).to(torch.bfloat16) for _ in range(3))
    with pytest.raises(LaunchError) as e:
        flash_attn_func(q, k, v, **kw)
    assert str(e.value) == message
