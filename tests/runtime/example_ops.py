"""The example ops (specs/softmax, rmsnorm, layernorm, swiglu, matmul) as PyTorch computes them, and the check of a
kgen op's forward and backward against them; shared by test_op.py (CPU) and test_ops_gpu.py.

`TORCH_FNS[name](**inputs)` returns the spec's outputs by name, computed with differentiable torch
ops in the dtype of the inputs: in float64 it is the ground truth of the forward and, through
autograd, of the backward; in the input dtype it is the yardstick of the tolerance
(helpers.check_close). They are written apart from the specs' `reference:` code so that the
backward specs are checked against autograd, not against their own formulas.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for helpers
import helpers  # noqa: E402

SPECS = Path(__file__).resolve().parents[2] / "specs"
FORWARD_OPS = ("softmax", "rmsnorm", "layernorm", "swiglu", "matmul")
RMSNORM_EPS = 1e-6  # rmsnorm.yaml's default eps
LAYERNORM_EPS = 1e-5  # layernorm.yaml's default eps


def softmax(x):
    return {"y": torch.softmax(x, dim=-1)}


def rmsnorm(x, w):
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1) + RMSNORM_EPS)
    return {"y": x * rstd[:, None] * w, "rstd": rstd}


def layernorm(x, w, b):
    mean = x.mean(dim=-1)
    rstd = torch.rsqrt(x.var(dim=-1, unbiased=False) + LAYERNORM_EPS)
    return {"y": torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, LAYERNORM_EPS), "mean": mean, "rstd": rstd}


def swiglu(a, b):
    return {"y": torch.nn.functional.silu(a) * b}


def matmul(a, b):
    return {"c": a @ b}


TORCH_FNS = {"softmax": softmax, "rmsnorm": rmsnorm, "layernorm": layernorm, "swiglu": swiglu, "matmul": matmul}


def check_forward_backward(op, inputs: dict[str, torch.Tensor], generator: torch.Generator) -> None:
    """Run `op` on `inputs` (by name) and backpropagate random output gradients through it; assert
    every output and every input gradient is within helpers.check_close of float64 torch.

    The gradients go through the op's registered autograd (the backward spec), so this checks the
    wiring too: which saved tensor or output gradient feeds which backward input, which backward
    output becomes which input's gradient.
    """
    fn = TORCH_FNS[op.spec.name]
    leaves = {n: t.detach().clone().requires_grad_() for n, t in inputs.items()}
    exact_in = {n: t.detach().double().requires_grad_() for n, t in inputs.items()}
    lowp_in = {n: t.detach().clone().requires_grad_() for n, t in inputs.items()}
    outs = op(**leaves)
    got = dict(zip(op.outputs, outs if isinstance(outs, tuple) else (outs,)))
    exact, lowp = fn(**exact_in), fn(**lowp_in)
    for n in op.outputs:
        helpers.check_close(n, got[n].detach(), exact[n].detach(), lowp[n].detach())

    diff = [n for n in op.outputs if op.spec.tensors[n].grad]
    for n in op.outputs:
        assert got[n].requires_grad == (n in diff), f"{n}: requires_grad is {got[n].requires_grad}"
    douts = [torch.randn(got[n].shape, generator=generator).to(got[n].dtype).to(got[n].device) for n in diff]
    g_kgen = torch.autograd.grad([got[n] for n in diff], list(leaves.values()), douts)
    g_exact = torch.autograd.grad([exact[n] for n in diff], list(exact_in.values()), [d.double() for d in douts])
    g_lowp = torch.autograd.grad([lowp[n] for n in diff], list(lowp_in.values()), douts)
    for name, g, e, lo in zip(inputs, g_kgen, g_exact, g_lowp):
        helpers.check_close(f"d{name}", g, e, lo)
