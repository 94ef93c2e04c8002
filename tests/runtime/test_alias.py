"""Outputs written over an input (`alias:`), as ops: tests/codegen/specs/scale_inplace.yaml (y = x
* s over x) and ce_inplace.yaml (a cross-entropy forward writing the logits' gradient over the
logits, Liger-Kernel style, its backward written over the saved gradient). The op returns the
input tensor itself, written through; NaN poisoning leaves it alone; autograd rebases the input
onto the op (mark_dirty), refuses a leaf that requires grad, and PyTorch's version counter catches
a tensor saved elsewhere that the op overwrote; the schema declares the mutation (opcheck,
torch.compile); wrong strides are one error. On the CPU interpreter, in the gfx942 emulation and
(marked gpu) on the GPU against float64 references."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
import helpers  # noqa: E402

import kgen  # noqa: E402
from kgen.backends import available  # noqa: E402
from kgen.errors import LaunchError  # noqa: E402
from kgen.knobs import knobs  # noqa: E402

SPECS = HERE.parent / "codegen" / "specs"
DT = {"fp32": torch.float32, "bf16": torch.bfloat16}
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


@pytest.fixture(scope="module")
def scale():
    return kgen.load(SPECS / "scale_inplace.yaml")


@pytest.fixture(scope="module")
def ce():
    return kgen.load(SPECS / "ce_inplace.yaml")


def _targets(m: int, v: int, seed: int = 0) -> torch.Tensor:
    t = torch.randint(0, v, (m,), generator=torch.Generator().manual_seed(seed))  # int64, as PyTorch makes them
    t[::5] = -1  # ignored rows
    t[1] = v - 1
    return t


def _ce_reference(logits: torch.Tensor, target: torch.Tensor):
    """loss per row and its gradient, by torch in float64."""
    x = logits.double().requires_grad_()
    loss = F.cross_entropy(x, target, ignore_index=-1, reduction="none")
    (grad,) = torch.autograd.grad(loss.sum(), x)
    return loss.detach(), grad


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_op_writes_over_its_input_and_returns_it(scale, dtype, monkeypatch):
    monkeypatch.setenv("KGEN_POISON", "1")  # outputs the op allocates start as NaN; an aliased one is the input
    x = torch.randn(37, 300).to(DT[dtype])
    before = x.clone()
    y = scale(x, 0.5)
    assert y is x and y.data_ptr() == x.data_ptr()
    assert torch.equal(y, (before.float() * 0.5).to(DT[dtype]))
    helpers.check_outputs(scale.ls, {"y": y}, {"x": before}, {"s": 0.5}, {"dtype": dtype})  # the reference on a copy
    assert torch.ops.kgen.scale_inplace(x, 2.0) is None  # the schema returns nothing: x is mutated
    assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_cross_entropy_writes_the_gradient_over_the_logits(ce, dtype, monkeypatch):
    monkeypatch.setenv("KGEN_POISON", "1")
    logits, target = torch.randn(23, 700).to(DT[dtype]), _targets(23, 700)
    want_loss, want_grad = _ce_reference(logits, target)
    ptr = logits.data_ptr()
    loss, grad = ce(logits, target)
    assert grad is logits and grad.data_ptr() == ptr and loss.dtype == torch.float32
    torch.testing.assert_close(loss.double(), want_loss, rtol=TOL[DT[dtype]], atol=TOL[DT[dtype]])
    torch.testing.assert_close(grad.double(), want_grad, rtol=TOL[DT[dtype]], atol=TOL[DT[dtype]])
    assert (loss[::5] == 0).all() and (grad[::5] == 0).all()


def test_autograd_through_an_overwritten_input(ce, scale):
    """The logits come from a layer (not a leaf): the op rebases them onto itself, the loss's
    gradient flows through the backward spec to the layer; `dl` is not overwritten by the
    backward, which writes over a copy of what it receives."""
    gen = torch.Generator().manual_seed(1)
    h, w = torch.randn(9, 16, generator=gen), torch.randn(16, 300, generator=gen, requires_grad=True)
    target, dl = _targets(9, 300, 1), torch.randn(9, generator=gen)
    logits = h @ w
    loss, buf = ce(logits, target)
    assert buf is logits and logits.grad_fn is loss.grad_fn and type(loss.grad_fn).__name__ == "ce_inplaceBackward"
    kept = dl.clone()
    (gw,) = torch.autograd.grad(loss, w, dl)
    assert torch.equal(dl, kept)
    w64 = w.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(F.cross_entropy(h.double() @ w64, target, ignore_index=-1, reduction="none"), w64, dl.double())
    torch.testing.assert_close(gw.double(), want, rtol=1e-5, atol=1e-5)
    a = torch.randn(5, 300, generator=gen, requires_grad=True)
    y = scale(a * 1.0, 3.0)  # y is the product a * 1.0, scaled in place; its grad flows to a
    (ga,) = torch.autograd.grad((y * y).sum(), a)
    torch.testing.assert_close(ga, 18 * a.detach(), rtol=1e-5, atol=1e-5)


def test_autograd_refuses_a_leaf_before_writing_it(scale):
    x = torch.randn(4, 300, requires_grad=True)
    before = x.detach().clone()
    with pytest.raises(LaunchError) as err:
        scale(x, 2.0)
    assert str(err.value) == ("scale_inplace: 'x' is a leaf tensor that requires grad, and output 'y' is written over it "
                              "(alias: x), which PyTorch does not allow for a leaf; pass a tensor computed from it "
                              "(x.clone()) or call under torch.no_grad()")
    assert torch.equal(x.detach(), before)
    with torch.no_grad():
        assert scale(x, 2.0) is x
    assert torch.equal(x.detach(), before * 2)


def test_a_tensor_saved_elsewhere_and_overwritten_fails_its_backward(scale):
    a = torch.randn(4, 300, requires_grad=True)
    b = a * 1.0
    square = (b * b).sum()  # saves b
    scale(b, 2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        square.backward()


@pytest.mark.parametrize("make, got", [
    (lambda: torch.randn(4, 512)[:, :300], "strides (512, 1)"),
    (lambda: torch.randn(4 * 300 + 1)[1:].view(4, 300), "an address 4 bytes past 16-byte alignment"),
])
def test_an_input_the_kernels_cannot_write_as_an_output_is_one_error(scale, make, got):
    with pytest.raises(LaunchError) as err:
        scale(make(), 2.0)
    assert str(err.value) == (f"scale_inplace: 'x' is overwritten by output 'y' (alias: x), so it must be contiguous and "
                              f"16-byte aligned, as an allocated output is; got {got}: pass x.clone()")


def test_the_schema_declares_the_mutation(ce, scale):
    assert str(torch.ops.kgen.ce_inplace.default._schema).endswith("ce_inplace(Tensor(a!) logits, Tensor target) -> Tensor")
    for overload, args in ((torch.ops.kgen.scale_inplace.default, (torch.randn(5, 300), 2.0)),
                           (torch.ops.kgen.ce_inplace.default, (torch.randn(6, 300), _targets(6, 300)))):
        torch.library.opcheck(overload, args, test_utils=("test_schema", "test_autograd_registration",
                                                          "test_faketensor", "test_aot_dispatch_dynamic"))
    f = torch.compile(lambda x: scale(x, 2.0) + 1, backend="aot_eager", fullgraph=True)
    x = torch.randn(5, 300)
    before = x.clone()
    assert torch.equal(f(x), before * 2 + 1) and torch.equal(x, before * 2)


def test_gfx942_emulation_matches():
    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    ce = kgen.load(SPECS / "ce_inplace.yaml", target="gfx942", emulate=True)
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(7, 300, generator=gen, requires_grad=True)
    target, dl = _targets(7, 300, 2), torch.randn(7, generator=gen)
    logits = z * 1.0
    loss, grad = ce(logits, target)
    assert grad is logits
    want_loss, want_grad = _ce_reference(z.detach(), target)
    torch.testing.assert_close(loss.detach().double(), want_loss, rtol=1e-5, atol=1e-5)
    (gz,) = torch.autograd.grad(loss, z, dl)  # through the emulated backward, written over its copy
    torch.testing.assert_close(gz.double(), want_grad * dl.double()[:, None], rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_matches(dtype, monkeypatch, tmp_path):
    monkeypatch.setenv("KGEN_POISON", "1")  # allocated outputs start as NaN: an unwritten element fails
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path))
    ce, scale = kgen.load(SPECS / "ce_inplace.yaml"), kgen.load(SPECS / "scale_inplace.yaml")
    gen = torch.Generator().manual_seed(3)
    m, v = 1000, 5003  # a partial last block of the vocabulary
    z, target, dl = torch.randn(m, v, generator=gen).to(DT[dtype]), _targets(m, v, 3), torch.randn(m, generator=gen)
    want_loss, want_grad = _ce_reference(z, target)
    zc = z.cuda().requires_grad_()
    logits = zc * 1
    ptr = logits.data_ptr()
    loss, grad = ce(logits, target.cuda())
    assert grad is logits and grad.data_ptr() == ptr
    tol = TOL[DT[dtype]]
    torch.testing.assert_close(loss.detach().cpu().double(), want_loss, rtol=tol, atol=tol)
    torch.testing.assert_close(grad.detach().cpu().double(), want_grad, rtol=tol, atol=tol)
    (gz,) = torch.autograd.grad(loss, zc, dl.cuda())
    torch.testing.assert_close(gz.cpu().double(), want_grad * dl.double()[:, None], rtol=tol, atol=tol)
    x = torch.randn(333, 1000, generator=gen).to(DT[dtype])
    xc = x.cuda()
    y = scale(xc, 0.25)
    assert y is xc and torch.equal(y.cpu(), (x.float() * 0.25).to(DT[dtype]))
    shifted = torch.empty(333 * 1000 + 8, dtype=DT[dtype], device="cuda")[1:333 * 1000 + 1].view(333, 1000)
    with pytest.raises(LaunchError, match="16-byte aligned"):  # the call plan of xc's strides is cached: checked anyway
        scale(shifted, 0.25)
