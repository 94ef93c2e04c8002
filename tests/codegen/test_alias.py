"""Outputs written over an input (`alias:`) in the kernels: tests/codegen/specs/scale_inplace.yaml
and ce_inplace.yaml with their backwards run on the CPU interpreter with the output bound to the
input's tensor (the result against the reference of a copy taken before), and compiled for both
targets, where the two pointers to one memory lose __restrict__ (and so read-only-cache loads)
while every other pointer keeps it. The ops themselves: tests/runtime/test_alias.py."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
import helpers  # noqa: E402

from kgen.backends import available  # noqa: E402
from kgen.build import build_variant  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPECS = HERE / "specs"
CASES = {  # spec -> (sizes, the aliased pair (output, input))
    "scale_inplace": ({"M": 37, "N": 300}, ("y", "x")),
    "scale_inplace_bwd": ({"M": 37, "N": 300}, ("dx", "dy")),
    "ce_inplace": ({"M": 9, "V": 700}, ("grad_logits", "logits")),
    "ce_inplace_bwd": ({"M": 9, "V": 700}, ("dlogits", "grad_logits")),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_interpreter_writes_through_the_input(name, dtype):
    ls = load_spec(SPECS / f"{name}.yaml")
    sizes, (out, src) = CASES[name]
    variant = {"dtype": dtype}
    inputs = helpers.random_inputs(ls, variant, sizes, torch.Generator().manual_seed(len(name)))
    scalars = {"s": 0.75} if ls.spec.scalars else {}
    copies = {n: t.clone() for n, t in inputs.items()}
    got = helpers.run_spec_cpu(ls, variant, dict(inputs), sizes, scalars)
    assert got[out] is inputs[src] and not torch.equal(inputs[src], copies[src])
    helpers.check_outputs(ls, got, copies, scalars, variant)


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiles_without_restrict_on_the_shared_memory(target, name):
    backend = load_target(target).backend
    if not available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found")
    _, (out, src) = CASES[name]
    (k,) = build_variant(load_spec(SPECS / f"{name}.yaml"), {"dtype": "bf16"}, load_target(target), compile=True).kernels
    assert k.resources["spill_bytes"] == 0 and k.resources["stack_bytes"] == 0, k.resources
    assert f"const kg::bf16* t_{src}," in k.source and f"kg::bf16* t_{out}," in k.source
    other = {"ce_inplace": "t_target", "ce_inplace_bwd": "t_dloss"}.get(name)
    if other:  # a tensor no output is written over keeps its promise
        assert f"* __restrict__ {other}," in k.source
