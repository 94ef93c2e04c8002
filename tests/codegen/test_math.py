"""tests/codegen/specs/math_fns.yaml: sigmoid, tanh, erf, sin, cos, floor and ceil against float64,
in units in the last place of float32 at the exact value, on the CPU interpreter, in the gfx942
emulation (whose kernels run templates/hip/kgen_hip.h's own tanh and erf on the host), compiled
for both shipped targets with the real toolchains, and (marked gpu) on the GPU."""
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

SPEC = HERE / "specs" / "math_fns.yaml"
OUTPUTS = {"sig": torch.sigmoid, "th": torch.tanh, "er": torch.erf, "sn": torch.sin, "cs": torch.cos,
           "fl": torch.floor, "ce": torch.ceil}
# most ulps from the float64 value: what each implementation promises (docs/SPEC_LANGUAGE.md,
# "Functions and methods"); CUDA's sigmoid inherits exp-as-exp2's error, relative |x| 2^-24 in
# the exponent, about 40 ulps at |x| = 100
HOST_ULPS = {"sig": 4, "th": 2, "er": 4, "sn": 2, "cs": 2, "fl": 0, "ce": 0}
CUDA_ULPS = {"sig": 64, "th": 2, "er": 2, "sn": 2, "cs": 2, "fl": 0, "ce": 0}


def _x(device: str = "cpu") -> torch.Tensor:
    gen = torch.Generator().manual_seed(7)
    edges = torch.tensor([0.0, -0.0, 1e-30, -1e-7, 1e-3, 0.5, -0.624, 0.626, 0.999, -1.0, 1.001, 2.5, -3.7,
                          9.0, -12.0, 20.0, -88.0, 100.0, -100.0, 1.5, -2.5])
    return torch.cat([edges, torch.randn(1000, generator=gen) * 3, torch.rand(203, generator=gen) * 200 - 100]).to(device)


def _ulps(got: torch.Tensor, x: torch.Tensor, fn) -> float:
    want = fn(x.double())
    spacing = torch.tensor([float(torch.finfo(torch.float32).tiny)] * len(want), dtype=torch.float64)
    ulp = torch.maximum((want.abs().float().nextafter(torch.tensor(float("inf"))) - want.abs().float()).double(), spacing)
    return float(((got.cpu().double() - want) / ulp).abs().max())


def _check(got: dict[str, torch.Tensor], x: torch.Tensor, bounds: dict[str, int]) -> None:
    for name, fn in OUTPUTS.items():
        assert not torch.isnan(got[name]).any(), name
        err = _ulps(got[name], x.cpu(), fn)
        assert err <= bounds[name], f"{name}: {err:.1f} ulps, at most {bounds[name]}"


def test_interpreter_matches_float64():
    ls = load_spec(SPEC)
    x = _x()
    _check(helpers.run_spec_cpu(ls, {}, {"x": x}, {"N": len(x)}, {}), x, HOST_ULPS)


def test_gfx942_emulation_matches_float64():
    import kgen

    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    x = _x()
    op = kgen.load(SPEC, target="gfx942", emulate=True)
    _check(dict(zip(OUTPUTS, op(x))), x, HOST_ULPS)


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_compiles_for_both_targets_without_spills(target):
    backend = load_target(target).backend
    if not available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found")
    built = build_variant(load_spec(SPEC), {}, load_target(target), compile=True)
    (k,) = built.kernels
    assert k.resources["spill_bytes"] == 0 and k.resources["stack_bytes"] == 0, k.resources
    for fn in ("sigmoid", "tanh", "erf", "sin", "cos", "floor", "ceil"):
        assert f"kg::{fn}_(" in k.source


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
def test_gpu_matches_float64():
    import kgen

    x = _x("cuda")
    bounds = CUDA_ULPS if torch.version.hip is None else HOST_ULPS
    _check(dict(zip(OUTPUTS, kgen.load(SPEC)(x))), x, bounds)
