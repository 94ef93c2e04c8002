"""Every variant of every spec in specs/, run with the CPU interpreter against its reference.

Sizes are small and odd (no multiple of any block size), so masked loads and stores at the
edges are exercised; each spec runs with its own tunables and with small blocks (so that every
loop over blocks runs several times). The tolerance is relative to the error of PyTorch doing
the same computation in the input dtype (tests/helpers.py: check_close).
"""
from __future__ import annotations

import sys
import zlib
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for helpers
import helpers  # noqa: E402

from kgen.spec.expr import eval_expr  # noqa: E402
from kgen.spec.load import load_spec, variant_id  # noqa: E402
from kgen.spec.refs import tunable_constraints  # noqa: E402

SPECS = Path(__file__).resolve().parents[2] / "specs"
# no size is a multiple of 8 or more (every block tunable is 8 or more, except BLOCK_M = 4 of
# the row-wise specs, which tiles M = 37), so every last block along every dim is partial.
# Attention runs with more queries than keys (causal rows that see no key) with the spec's
# blocks, and with more keys than queries and grouped heads (H = 2 * HKV) with small ones.
# The SSD scan (ssd_fwd) runs one partial chunk here, with random-sign dt * A; tests/ir/test_ssd.py
# covers several chunks with Mamba-like inputs.
SIZES = {
    "spec": {"M": 37, "N": 100, "K": 76, "B": 2, "SQ": 45, "SK": 37, "H": 2, "HKV": 2,
             "batch": 2, "seqlen": 45, "nheads": 2, "ngroups": 1, "nbounds": 4, "dim": 150},
    "small": {"M": 37, "N": 100, "K": 76, "B": 1, "SQ": 37, "SK": 45, "H": 4, "HKV": 2,
              "batch": 1, "seqlen": 37, "nheads": 4, "ngroups": 2, "nbounds": 3, "dim": 21},
}
SCALARS = {"softmax_scale": 0.17}  # scalars without a default in their spec
SMALL_BLOCK = 8


def _cases():
    for path in sorted(SPECS.glob("*.yaml")):
        ls = load_spec(path)
        for variant in ls.variants():
            for blocks in ("spec", "small"):
                yield pytest.param(path, variant, blocks, id=f"{path.stem}-{variant_id(variant)}-{blocks}")


def _tunables(ls, variant, blocks: str) -> dict[str, int]:
    t = helpers.default_tunables(ls, variant)
    if blocks == "small":  # each block tunable made small where the spec's constraints allow it
        rules = tunable_constraints(ls.spec)
        for k, v in t.items():
            small = {**t, k: min(v, SMALL_BLOCK)}
            if k.startswith("BLOCK") and all(eval_expr(c, {**variant, **small}) for c in rules):
                t = small
    return t


def test_all_example_specs_are_covered():
    names = {p.stem for p in SPECS.glob("*.yaml")}
    assert {"softmax", "softmax_bwd", "rmsnorm", "rmsnorm_bwd", "matmul", "matmul_bwd"} <= names


@pytest.mark.parametrize("path, variant, blocks", list(_cases()))
def test_spec_matches_reference(path, variant, blocks):
    ls = load_spec(path)
    spec = ls.spec
    tunables = _tunables(ls, variant, blocks)
    unknown = [s for s in spec.sizes if s not in SIZES[blocks]]
    sizes = helpers.derive_sizes(spec, {s: v for s, v in SIZES[blocks].items() if s in spec.sizes}, {**variant, **tunables})
    assert set(sizes) == set(spec.sizes), f"no test value for sizes {unknown}"
    env = {**variant, **tunables, **sizes}

    gen = torch.Generator().manual_seed(zlib.crc32(f"{path.stem}-{variant_id(variant)}".encode()))
    inputs = helpers.random_inputs(spec, variant, env, gen)
    scalars = helpers.scalar_values(spec, {k: v for k, v in SCALARS.items() if k in spec.scalars})
    inputs = helpers.consistent_with_forward(ls, inputs, scalars, variant)
    assert helpers.bind_sizes(spec, inputs).items() <= sizes.items()
    out = helpers.allocate(spec, variant, env)  # NaN-filled (zeros where init: zeros)

    got = helpers.run_spec_cpu(ls, variant, {**inputs, **out}, sizes, scalars, tunables)
    assert all(torch.equal(got[n], inputs[n]) for n in inputs), "a kernel wrote into an input"
    helpers.check_outputs(ls, got, inputs, scalars, variant)


def test_check_close_rejects_two_ulps():
    # the correctly rounded result passes; the same with its largest element two ulps off does not
    # (the norm is the max over all elements, so PyTorch's worst rounding sets the scale)
    torch.manual_seed(0)
    ref = torch.randn(64, dtype=torch.float64) + 4
    got = ref.to(torch.bfloat16)
    helpers.check_close("x", got, ref, got.double())
    i = int(ref.abs().argmax())
    ulp = 2.0 ** (torch.frexp(got[i].float()).exponent.item() - 8)  # bf16: 8 significant bits
    bad = got.clone()
    bad[i] = got[i].double() + 2 * ulp
    with pytest.raises(AssertionError, match=r"x \(torch.bfloat16\): max error .* exceeds 2 \* "):
        helpers.check_close("x", bad, ref, got.double())
