"""Gradients of the tensors an attention hook loads (docs/SPEC_LANGUAGE.md, "Gradients of a hook's
tensors"): tests/ops/specs/alibi_grad.yaml (ALiBi whose slopes take a gradient: one number per
batch and head, summed over every score), learned_bias.yaml (a bias per head and score in the
input dtype: a scatter-add over the batch) and rel_bias.yaml (a bias per head and distance: a
scatter-add of many scores into each entry). The derived backward writes d<tensor> through
fa2_bwd's `tensor_grads` statements; here it is checked against the meaning written out in
float64 with torch.autograd, on the CPU interpreter, through the op's autograd, in the gfx942
emulation and on the GPU."""
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

SPECS = Path(__file__).resolve().parent / "specs"
B, SQ, SK, H, HKV = 2, 70, 90, 2, 1


def _inputs(name: str, gen: torch.Generator, D: int, dtype=torch.bfloat16) -> dict[str, torch.Tensor]:
    q, k, v = (torch.randn(B, n, h, D, generator=gen).to(dtype) for n, h in ((SQ, H), (SK, HKV), (SK, HKV)))
    extra = ({"slopes": torch.rand(B, H, generator=gen)} if name == "alibi_grad"
             else {"rel": torch.randn(H, SQ + SK - 1, generator=gen)} if name == "rel_bias"
             else {"bias": torch.randn(H, SQ, SK, generator=gen).to(dtype)})
    return {"q": q, "k": k, "v": v, **extra}


def _meaning(name: str, t: dict[str, torch.Tensor], causal: bool, scale: float):
    """The output and every gradient, in float64, written out independently of the specs."""
    leaves = {n: x.double().requires_grad_() for n, x in t.items()}
    i, j = torch.arange(SQ)[:, None], torch.arange(SK)[None, :]
    diag = i + SK - SQ
    qh, kh, vh = (leaves[n].transpose(1, 2) for n in "qkv")
    kh, vh = kh.repeat_interleave(H // HKV, 1), vh.repeat_interleave(H // HKV, 1)
    s = qh @ kh.transpose(-1, -2) * scale
    if name == "alibi_grad":
        s = s - leaves["slopes"][:, :, None, None] * (diag - j).abs().double()
    elif name == "rel_bias":
        s = s + leaves["rel"][:, j - i + SQ - 1][None]
    else:
        s = s + leaves["bias"][None]
    s = torch.where(j <= diag, s, -math.inf) if causal else s
    return (torch.softmax(s, -1) @ vh).transpose(1, 2), leaves


# head_dim 128 takes fa2_bwd's transposed form (128-key blocks), 32 the other
CASES = [("alibi_grad", False, 32), ("alibi_grad", True, 128), ("learned_bias", False, 128), ("learned_bias", True, 32),
         ("rel_bias", True, 64)]


@pytest.mark.parametrize("name, causal, D", CASES)
def test_the_derived_backward_writes_the_hook_tensors_gradient(name, causal, D):
    ls = load_spec(SPECS / f"{name}.yaml")
    bwd = backward_spec(ls)
    extra = {"alibi_grad": "slopes", "rel_bias": "rel"}.get(name, "bias")
    assert bwd.spec.tensors[f"d{extra}"].dtype == "fp32" and bwd.spec.tensors[f"d{extra}"].role == "output"
    gen = torch.Generator().manual_seed(11 + causal)
    t = _inputs(name, gen, D)
    scale = 1 / math.sqrt(D)
    variant = {"dtype": "bf16", "head_dim": D, "causal": causal}
    sizes = {"B": B, "SQ": SQ, "SK": SK, "H": H, "HKV": HKV, **({"R": SQ + SK - 1} if name == "rel_bias" else {})}
    fwd = helpers.run_spec_cpu(ls, variant, dict(t), sizes, {"softmax_scale": scale})
    do = torch.randn(B, SQ, H, D, generator=gen).to(torch.bfloat16)
    saved = {**t, "o": fwd["o"], "lse": fwd["lse"], "do": do}
    bvariant = {**variant, "deterministic": False}
    got = helpers.run_spec_cpu(bwd, bvariant, dict(saved), sizes, {"softmax_scale": scale})
    helpers.check_outputs(bwd, got, saved, {"softmax_scale": scale}, bvariant)  # the spec's reference
    o, leaves = _meaning(name, t, causal, scale)
    want = dict(zip(leaves, torch.autograd.grad(o, list(leaves.values()), do.double())))
    bref = helpers.reference(bwd, {**saved, "softmax_scale": scale}, variant=bvariant)
    for n in ("q", "k", "v", extra):
        torch.testing.assert_close(bref[f"d{n}"], want[n], rtol=1e-7, atol=1e-7)
    g = got[f"d{extra}"].double()
    assert torch.isfinite(g).all() and g.abs().max() > 0
    err = (g - want[extra]).abs().max() / want[extra].abs().max()
    assert err < 2e-2, f"d{extra}: max error {err:.2e} of its largest value"


def _through_the_op(name: str, causal: bool, D: int, device: str, **load):
    import kgen

    op = kgen.load(SPECS / f"{name}.yaml", **load)
    gen = torch.Generator().manual_seed(5)
    t = _inputs(name, gen, D)
    do = torch.randn(B, SQ, H, D, generator=gen).to(torch.bfloat16)
    leaves = {n: x.to(device).requires_grad_() for n, x in t.items()}
    o, _ = op(**leaves, softmax_scale=1 / math.sqrt(D), causal=causal)
    grads = torch.autograd.grad(o, list(leaves.values()), do.to(device))
    want_o, exact = _meaning(name, t, causal, 1 / math.sqrt(D))
    want = torch.autograd.grad(want_o, list(exact.values()), do.double())
    for n, g, w in zip(leaves, grads, want):
        assert g.dtype == t[n].dtype and g.shape == t[n].shape, n  # the input's dtype, as autograd requires
        err = (g.double().cpu() - w).abs().max() / w.abs().max()
        assert err < 2e-2, f"d{n}: max error {err:.2e} of its largest value"


@pytest.mark.parametrize("name, causal", [("alibi_grad", True), ("learned_bias", False)])
def test_the_op_returns_the_hook_tensors_gradient_on_the_cpu(name, causal):
    _through_the_op(name, causal, 32, "cpu")


def test_gfx942_emulation_returns_the_hook_tensors_gradient():
    from kgen.backends import available
    from kgen.knobs import knobs

    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    _through_the_op("learned_bias", True, 32, "cpu", target="gfx942", emulate=True)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("name, causal, D", CASES)
def test_gpu_returns_the_hook_tensors_gradient(name, causal, D):
    _through_the_op(name, causal, D, "cuda")


def test_a_tensor_with_grad_false_gets_no_gradient_output():
    """specs/variants/alibi.yaml keeps flash-attn's contract: its slopes take no gradient, so its
    backward computes none."""
    bwd = backward_spec(load_spec(ROOT / "specs" / "variants" / "alibi.yaml"))
    assert "dslopes" not in bwd.spec.tensors
