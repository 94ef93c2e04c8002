"""A GPU call's plan and launch (kgen/runtime/plan.py), on the CPU: each kernel gets the argument
list kgen/ir/passes/arguments.py asks for (per tensor its address and every stride but the last,
then sizes, then scalars), built from a prebuilt template with the addresses and scalars filled
in per call. The kernels are stand-ins that record what they are given; the variant's sources
are rendered (not compiled), so the argument lists are the real ones."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kgen.build import build_variant
from kgen.hw.descriptor import load_target
from kgen.runtime import compiled, plan
from kgen.runtime.op import load

SPECS = Path(__file__).resolve().parents[2] / "specs"


class _Recording:
    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def __call__(self, grid, block, shared_bytes, stream, signature, args):
        self.calls.append((self.name, grid, block, shared_bytes, stream, signature, list(args)))


@pytest.fixture
def recorded(monkeypatch):
    """compiled_variant as the runtime calls it, with kernels that record their launches."""
    calls: list = []

    def fake_compiled_variant(ls, variant, target, first=None):
        bv = build_variant(ls, variant, target, first=first, compile=False)
        return tuple(compiled.ReadyKernel(_Recording(k.name, calls), tuple(k.grid), k.threads, k.shared_bytes, k.signature,
                                          tuple(k.arguments["tensors"]), tuple(k.arguments["sizes"]), tuple(k.arguments["scalars"]),
                                          tuple((m["tensor"], tuple(m["box"])) for m in k.tensor_maps))
                     for k in bv.kernels), bv.tunables

    monkeypatch.setattr(compiled, "compiled_variant", fake_compiled_variant)
    monkeypatch.setattr(plan, "current_stream", lambda device: 1234)
    return calls


def _expected(rk_tensors, rk_sizes, rk_scalars, tensors, sizes, scalars):
    out = []
    for n in rk_tensors:
        out += [tensors[n].data_ptr(), *tensors[n].stride()[:-1]]
    return out + [sizes[s] for s in rk_sizes] + [scalars[s] for s in rk_scalars]


def test_each_launch_gets_its_arguments_from_the_template(recorded):
    op = load(SPECS / "layernorm.yaml")
    target = load_target("sm_90")
    x = torch.randn(6, 37, dtype=torch.bfloat16)[:, :33]  # a row stride that is not the width
    w, b = torch.randn(33, dtype=torch.bfloat16), torch.randn(33, dtype=torch.bfloat16)
    inputs = {"x": x, "w": w, "b": b}
    p = plan.make_plan(op, inputs, {}, x.device, target, None)
    kernels = {rk.kernel.name: rk for rk in compiled.compiled_variant(op.ls, {"dtype": "bf16", "ROW": 1024}, target)[0]}
    for eps in (1e-5, 0.25):  # one plan, scalars filled in per call
        recorded.clear()
        all_t = plan.launch(p, (x, w, b), (eps,), x.device, poison=False)
        tensors = dict(zip(list(op.inputs) + [n for n, t in op.spec.tensors.items() if t.role != "input"], all_t))
        assert [tensors[n].shape for n in op.outputs] == [torch.Size([6, 33]), torch.Size([6]), torch.Size([6])]
        assert len(recorded) == len(p.launches) >= 1
        for (name, grid, block, shared, stream, signature, args), ln in zip(recorded, p.launches):
            rk = kernels[name]
            assert stream == 1234 and block == (rk.threads, 1, 1) and len(grid) == 3
            assert args == _expected(rk.tensors, rk.sizes, rk.scalars, tensors, {"M": 6, "N": 33}, {"eps": eps})
            assert len(signature) == len(args)


def test_a_second_call_writes_new_addresses(recorded):
    op = load(SPECS / "softmax.yaml")
    target = load_target("sm_90")
    x1, x2 = torch.randn(5, 40), torch.randn(5, 40)
    p = plan.make_plan(op, {"x": x1}, {}, x1.device, target, None)
    y1 = plan.launch(p, (x1,), (), x1.device, poison=False)[p.returned[0]]
    first = recorded[-1][-1]
    y2 = plan.launch(p, (x2,), (), x2.device, poison=True)[p.returned[0]]
    second = recorded[-1][-1]
    assert y1.data_ptr() != y2.data_ptr() and torch.isnan(y2).all()  # poisoned, as KGEN_POISON asks
    assert x1.data_ptr() in first and y1.data_ptr() in first
    assert x2.data_ptr() in second and y2.data_ptr() in second and x1.data_ptr() not in second
