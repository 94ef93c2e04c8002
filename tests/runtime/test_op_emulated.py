"""kgen.load(spec, target="gfx942", emulate=True): the op runs gfx942's kernels, as `kgen build`
writes them, in the CPU emulation (kgen.emulate), forward and backward through autograd."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kgen
from kgen.backends import available
from kgen.errors import LaunchError, TargetError

SPECS = Path(__file__).resolve().parents[2] / "specs"


@pytest.mark.skipif(not available("hip"), reason="no clang for HIP found")
def test_rmsnorm_forward_and_backward_in_emulation():
    op = kgen.load(SPECS / "rmsnorm.yaml", target="gfx942", emulate=True)
    assert op.qualname == "kgen::rmsnorm_emulated_gfx942"
    torch.manual_seed(3)
    x = torch.randn(9, 1500, requires_grad=True)  # ragged: blocks of 4 rows and 1024 columns
    w = torch.randn(1500, requires_grad=True)
    y, rstd = op(x, w)
    (y * torch.cos(y.detach())).sum().backward()  # a gradient that is not all ones
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    y64 = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w64
    (y64 * torch.cos(y.detach().double())).sum().backward()
    torch.testing.assert_close(y.double(), y64.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"emulate": True}, LaunchError, r"needs the target to emulate: target='gfx942' or 'gfx90a'"),
    ({"target": "gfx942"}, LaunchError, r"picks a target for emulation only; add emulate=True"),
    ({"target": "sm_90", "emulate": True}, TargetError, r"no emulation for sm_90 \(a cuda target\); accepted: gfx90a, gfx942"),
])
def test_load_with_emulate_refuses_what_it_cannot_do(kwargs, error, message):
    with pytest.raises(error, match=message):
        kgen.load(SPECS / "softmax.yaml", **kwargs)
