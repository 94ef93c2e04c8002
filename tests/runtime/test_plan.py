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
        return tuple(compiled.ReadyKernel(None if k.empty else _Recording(k.name, calls), tuple(k.grid), k.threads,
                                          k.shared_bytes, k.signature, tuple(k.arguments["tensors"]),
                                          tuple(k.arguments["sizes"]), tuple(k.arguments["scalars"]),
                                          tuple((m["tensor"], tuple(m["box"])) for m in k.tensor_maps), tuple(k.writes))
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


def _attention_inputs(seg: bool):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 96, 2, 64, generator=gen).to(torch.bfloat16) for _ in range(3))
    out = {"q": q, "k": k, "v": v}
    if seg:
        out["seg"] = torch.randint(0, 3, (2, 96), generator=gen, dtype=torch.int32)
    return out


def test_a_block_table_the_analysis_makes_needless_is_neither_launched_nor_allocated(recorded):
    op = load(SPECS / "fa2_fwd.yaml")
    inputs = _attention_inputs(seg=False)
    # gfx942: no tensor maps, which only a driver encodes
    p = plan.make_plan(op, inputs, {"causal": True}, torch.device("cpu"), load_target("gfx942"), None)
    assert len(p.launches) == 1 and p.kept == ()
    assert len(p.outputs) == 2  # o and lse: no key_blocks
    plan.launch(p, tuple(inputs.values()), (0.125,), torch.device("cpu"), poison=False)
    assert [c[0] for c in recorded] == ["fa2_fwd_fwd"]


def test_a_block_table_is_measured_again_only_when_its_inputs_change(recorded):
    op = load(Path(__file__).resolve().parents[2] / "kgen" / "bench" / "specs" / "segment_eq.yaml")
    inputs = _attention_inputs(seg=True)
    cpu = torch.device("cpu")
    p = plan.make_plan(op, inputs, {"causal": True}, cpu, load_target("gfx942"), None)
    assert [ln.kernel.name for ln in p.launches] == ["fa2_segment_eq_blocks", "fa2_segment_eq_fwd"]
    assert [kp.launch for kp in p.kept] == [0]

    def launched(seg, scale=0.125):
        recorded.clear()
        all_t = plan.launch(p, (inputs["q"], inputs["k"], inputs["v"], seg), (scale,), cpu, poison=False)
        table = all_t[p.kept[0].writes[0]]
        return [c[0] for c in recorded], table.data_ptr()

    seg = inputs["seg"]
    names, table = launched(seg)
    assert names == ["fa2_segment_eq_blocks", "fa2_segment_eq_fwd"]
    names, again = launched(seg, scale=0.5)  # softmax_scale is not the mask's: the table is kept
    assert names == ["fa2_segment_eq_fwd"] and again == table
    seg.add_(0)  # an in-place write, whatever it changes, is a new version
    assert launched(seg)[0] == ["fa2_segment_eq_blocks", "fa2_segment_eq_fwd"]
    assert launched(seg.clone())[0] == ["fa2_segment_eq_blocks", "fa2_segment_eq_fwd"]  # another object
