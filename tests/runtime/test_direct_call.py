"""A call of a KgenOp that skips the dispatcher (KgenOp._direct, autograd.direct_function).

On plain tensors, outside torch.compile, torch.jit.trace, functorch, torch function and dispatch
modes and the profiler, `op(...)` runs the op directly (through an autograd.Function when a gradient is
wanted); everywhere else it takes the registered torch.library op. Both paths must give the same
outputs, the same gradients, the same requires_grad flags and the same refusal of a double
backward; this runs both on the CPU interpreter, whose results are bitwise reproducible.
"""
from __future__ import annotations

import sys
import zlib
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/runtime, for example_ops
import example_ops  # noqa: E402
from example_ops import SPECS, helpers  # noqa: E402

import kgen  # noqa: E402
from kgen.errors import LaunchError  # noqa: E402

SIZES = {"M": 5, "N": 37, "K": 11}


@pytest.fixture(scope="module")
def ops() -> dict[str, kgen.runtime.op.KgenOp]:
    return {name: kgen.load(SPECS / f"{name}.yaml") for name in example_ops.FORWARD_OPS}


def _inputs(op, requires_grad: bool) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(zlib.crc32(op.spec.name.encode()))
    dtype = "fp32" if "fp32" in op.spec.variants["dtype"] else op.spec.variants["dtype"][0]
    return {n: t.requires_grad_(requires_grad) for n, t in helpers.random_inputs(op.spec, {"dtype": dtype}, SIZES, gen).items()}


def _registered(op, inputs):
    """The same call through torch.ops (the dispatcher and torch.library's autograd kernel)."""
    return getattr(torch.ops.kgen, op.opname)(*op._positional(tuple(inputs.values()), {}))


class _PassFunctions(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _PassDispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", example_ops.FORWARD_OPS)
def test_direct_call_matches_the_registered_op(ops, name):
    op = ops[name]
    inputs = _inputs(op, requires_grad=True)
    assert op._direct(op._positional(tuple(inputs.values()), {})) is not None  # the direct path is taken
    direct, registered = op(**inputs), _registered(op, inputs)
    direct = direct if isinstance(direct, tuple) else (direct,)
    registered = registered if isinstance(registered, tuple) else (registered,)
    for n, d, r in zip(op.outputs, direct, registered):
        assert torch.equal(d, r), n
        assert d.requires_grad == r.requires_grad == op.spec.tensors[n].grad, n
    diff = [j for j, n in enumerate(op.outputs) if op.spec.tensors[n].grad]
    gen = torch.Generator().manual_seed(2)
    douts = [torch.randn(direct[j].shape, generator=gen).to(direct[j].dtype) for j in diff]
    g_direct = torch.autograd.grad([direct[j] for j in diff], list(inputs.values()), douts)
    g_registered = torch.autograd.grad([registered[j] for j in diff], list(inputs.values()), douts)
    for n, a, b in zip(inputs, g_direct, g_registered):
        assert a.dtype == inputs[n].dtype and torch.equal(a, b), n


def test_direct_call_without_grad_records_nothing(ops):
    op = ops["rmsnorm"]
    y, rstd = op(**_inputs(op, requires_grad=False))
    assert y.grad_fn is None and not y.requires_grad and not rstd.requires_grad
    with torch.no_grad():
        y, _ = op(**_inputs(op, requires_grad=True))
    assert y.grad_fn is None and not y.requires_grad


def test_double_backward_through_the_direct_call_is_refused(ops):
    op = ops["softmax"]
    (x,) = _inputs(op, requires_grad=True).values()
    (gx,) = torch.autograd.grad(op(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(LaunchError, match=r"^kgen::softmax_bwd cannot be differentiated"):
        gx.sum().backward()


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("context", ["function mode", "dispatch mode", "profiler", "vmap", "jit trace", "subclass"])
def test_calls_the_dispatcher_must_see_take_the_registered_op(ops, context):
    op = ops["softmax"]
    (x,) = _inputs(op, requires_grad=False).values()
    seen: list[bool] = []

    def probe(t):
        seen.append(op._direct(op._positional((t,), {})) is not None)
        return op(t)

    if context == "function mode":
        with _PassFunctions():
            probe(x)
    elif context == "dispatch mode":
        with _PassDispatch():
            probe(x)
    elif context == "profiler":
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            probe(x)
        assert any(e.name == "kgen::softmax" for e in prof.events())  # the op shows by name
    elif context == "vmap":
        out = torch.func.vmap(probe)(x[None].expand(2, -1, -1).contiguous())
        assert torch.equal(out[0], op(x))
    elif context == "jit trace":  # the trace records the op, as it records any torch.ops call
        traced = torch.jit.trace(probe, (x,), check_trace=False)
        assert "kgen::softmax" in str(traced.graph)
    else:
        class Sub(torch.Tensor):
            pass
        probe(x.as_subclass(Sub))
    assert seen and not any(seen)
