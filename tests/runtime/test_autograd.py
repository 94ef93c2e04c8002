"""Autograd from a spec's backward pairing (kgen/runtime/autograd.py), on the CPU."""
from __future__ import annotations

from pathlib import Path

import torch

import kgen

SPECS = Path(__file__).resolve().parents[2] / "specs"


def _renamed(tmp_path: Path, x_grad: bool) -> Path:
    """softmax and its backward under new names (ops are registered by name, once per process),
    with the input x marked grad: false when asked."""
    tag = "on" if x_grad else "off"
    fwd = (SPECS / "softmax.yaml").read_text().replace("name: softmax", f"name: softmax_grad_{tag}")
    fwd = fwd.replace("backward: softmax_bwd.yaml", f"backward: softmax_grad_{tag}_bwd.yaml")
    if not x_grad:
        fwd = fwd.replace("x: {shape: [M, N], dtype: $dtype}", "x: {shape: [M, N], dtype: $dtype, grad: false}")
    bwd = (SPECS / "softmax_bwd.yaml").read_text().replace("name: softmax_bwd", f"name: softmax_grad_{tag}_bwd")
    (tmp_path / f"softmax_grad_{tag}_bwd.yaml").write_text(bwd)
    path = tmp_path / f"softmax_grad_{tag}.yaml"
    path.write_text(fwd)
    assert ("grad: false" in fwd) != x_grad
    return path


def test_input_marked_grad_false_gets_no_gradient(tmp_path):
    for x_grad in (True, False):
        op = kgen.load(_renamed(tmp_path, x_grad))
        x = torch.randn(3, 5, requires_grad=True)
        (op(x) * torch.randn(3, 5)).sum().backward()
        if x_grad:
            assert x.grad is not None and torch.isfinite(x.grad).all()
        else:
            assert x.grad is None
