"""The shipped specs' gfx942 kernels, as `kgen build` writes them (the build's own tunables),
run in the wave64 emulation (kgen/emulate) on small, ragged sizes, against each spec's
reference: the sizes, domains and tolerance of tests/ir/test_interp_examples.py, which runs the
same programs through the IR interpreter.

Each spec runs its first and its last variant here (every variant of every spec is the aim of
issue 24: the host compile of the large kernels is what bounds the time)."""
from __future__ import annotations

import sys
import zlib
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for helpers
import helpers  # noqa: E402

from kgen.backends import available  # noqa: E402
from kgen.build import build_variant  # noqa: E402
from kgen.emulate.runner import run_kernel  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.spec.expr import eval_expr  # noqa: E402
from kgen.spec.load import load_spec, variant_id  # noqa: E402

SPECS = Path(__file__).resolve().parents[2] / "specs"
SIZES = {"M": 37, "N": 100, "K": 76, "B": 2, "SQ": 45, "SK": 37, "H": 2, "HKV": 2,
         "batch": 2, "seqlen": 45, "nheads": 2, "ngroups": 1}
SCALARS = {"softmax_scale": 0.17}


def _cases():
    for path in sorted(SPECS.glob("*.yaml")):
        variants = load_spec(path).variants()
        for variant in {variant_id(v): v for v in (variants[0], variants[-1])}.values():
            yield pytest.param(path, variant, id=f"{path.stem}-{variant_id(variant)}")


@pytest.mark.parametrize("path, variant", list(_cases()))
def test_gfx942_kernels_match_the_reference_in_emulation(path, variant):
    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no clang for HIP was found")
        pytest.skip("no clang for HIP found")
    ls = load_spec(path)
    spec = ls.spec
    built = build_variant(ls, variant, load_target("gfx942"), compile=False)
    sizes = helpers.derive_sizes(spec, {s: v for s, v in SIZES.items() if s in spec.sizes}, {**variant, **built.tunables})
    env = {**variant, **built.tunables, **sizes}
    helpers.check_constraints(spec, env)
    gen = torch.Generator().manual_seed(zlib.crc32(f"{path.stem}-{variant_id(variant)}".encode()))
    inputs = helpers.DOMAINS.get(spec.name, lambda t: t)(helpers.random_inputs(spec, variant, env, gen))
    scalars = helpers.scalar_values(spec, {k: v for k, v in SCALARS.items() if k in spec.scalars})
    inputs = helpers.consistent_with_forward(ls, inputs, scalars, variant)
    tensors = {**helpers.allocate(spec, variant, env), **inputs}  # outputs NaN (zeros where init: zeros)
    for ks, bk in zip(spec.kernels, built.kernels):
        run_kernel(bk, tuple(int(eval_expr(g, env)) for g in ks.grid), tensors, sizes, scalars)
    assert all(torch.equal(tensors[n], inputs[n]) for n in inputs), "a kernel wrote into an input"
    helpers.check_outputs(ls, tensors, inputs, scalars, variant)
