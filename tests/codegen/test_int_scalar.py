"""tests/codegen/specs/int_scalar.yaml: run-time int32 scalars (`scalars: {shift: {dtype: int32}}`)
on the CPU interpreter, in the gfx942 emulation, compiled for both targets (an `int` parameter,
signature letter 'i'), on the GPU, and the one-sentence errors for a non-integer value and an
int32 scalar's non-integer default."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
import helpers  # noqa: E402

import kgen  # noqa: E402
from kgen.backends import available  # noqa: E402
from kgen.build import build_variant  # noqa: E402
from kgen.errors import LaunchError, SpecError  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = HERE / "specs" / "int_scalar.yaml"


def _want(x: torch.Tensor, shift: int, scale: float = 2.0) -> torch.Tensor:
    idx = torch.arange(len(x))
    return torch.where(idx >= shift, x.double() * scale, x.double()) + shift // 2


@pytest.mark.parametrize("shift", [0, 7, -5, 300])
def test_interpreter_and_op_match(shift):
    x = torch.randn(300, generator=torch.Generator().manual_seed(shift & 0xFF))
    got = helpers.run_spec_cpu(load_spec(SPEC), {}, {"x": x}, {"N": 300}, {"shift": shift, "scale": 2.0})
    torch.testing.assert_close(got["y"].double(), _want(x, shift), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(kgen.load(SPEC)(x, shift=float(shift)).double(), _want(x, shift), rtol=1e-6, atol=1e-6)


def test_gfx942_emulation_matches():
    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    x = torch.randn(300)
    got = kgen.load(SPEC, target="gfx942", emulate=True)(x, shift=37, scale=0.5)
    torch.testing.assert_close(got.double(), _want(x, 37, 0.5), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_compiles_with_an_int_parameter(target):
    backend = load_target(target).backend
    if not available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found")
    (k,) = build_variant(load_spec(SPEC), {}, load_target(target), compile=True).kernels
    assert "int scalar_shift" in k.source and "float scalar_scale" in k.source
    assert k.signature.endswith("iif")  # the size N, then shift, then scale


def test_a_value_that_is_not_an_integer_is_one_sentence():
    with pytest.raises(LaunchError) as err:
        kgen.load(SPEC)(torch.randn(5), shift=2.5)
    assert str(err.value) == "int_scalar: scalar 'shift' must be an int32 integer, got 2.5"


def test_an_int32_scalar_with_a_fractional_default_is_a_spec_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(SPEC.read_text().replace("shift: {dtype: int32}", "shift: {dtype: int32, default: 1.5}"))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert "an int32 scalar's default must be an integer, got 1.5" in str(err.value) and "bad.yaml:" in str(err.value)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
def test_gpu_matches():
    x = torch.randn(1000, device="cuda")
    got = kgen.load(SPEC)(x, shift=513)
    torch.testing.assert_close(got.cpu().double(), _want(x.cpu(), 513), rtol=1e-6, atol=1e-6)
