"""tests/codegen/specs/scalar_ops.yaml: one-element loads, stores and atomic adds, 1-D tiles
reduced to scalars (across warps, through shared memory), exact int32 sums and `**` with negative
bases, on the CPU interpreter against the reference, compiled for both shipped targets with the
real toolchains, and (marked gpu) run on the GPU against the reference."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
import helpers  # noqa: E402

from kgen.build import build_variant  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.backends import available  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = HERE / "specs" / "scalar_ops.yaml"
SIZES = [1, 255, 256, 1000]  # one element, one block less one, exactly one block, several blocks


def _inputs(n: int, device: str = "cpu") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=gen)
    c = torch.randint(-(2 ** 20), 2 ** 20, (n,), generator=gen, dtype=torch.int32)  # sums beyond 2^24
    scale = torch.tensor([0.5 + torch.rand(1, generator=gen).item(), -1.5])  # a negative base for **
    return {k: v.to(device) for k, v in {"x": x, "c": c, "scale": scale}.items()}


def _check(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert torch.equal(got["count"].cpu().long(), want["count"].long()), "int32 sums must be exact"
    assert torch.equal(got["peak"].cpu().double(), want["peak"])
    for name in ("y", "total"):
        torch.testing.assert_close(got[name].cpu().double(), want[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", SIZES)
def test_interpreter_matches_the_reference(n):
    ls = load_spec(SPEC)
    inputs = _inputs(n)
    got = helpers.run_spec_cpu(ls, {}, dict(inputs), {"N": n}, {})
    _check(got, helpers.reference(ls, inputs))


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_compiles_for_both_targets_without_spills(target):
    backend = load_target(target).backend
    if not available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found")
    built = build_variant(load_spec(SPEC), {}, load_target(target), compile=True)
    for k in built.kernels:
        assert k.resources["spill_bytes"] == 0 and k.resources["stack_bytes"] == 0, k.resources
    source = built.kernels[0].source
    assert "kg::thread_id() == 0" in source  # the one-element store and atomic add: one thread
    assert "int r" in source  # the int32 sum accumulates in int


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("n", SIZES)
def test_gpu_matches_the_reference(n):
    import kgen

    op = kgen.load(SPEC)
    inputs = _inputs(n, "cuda")
    y, total, peak, count = op(**inputs)
    _check({"y": y, "total": total, "peak": peak, "count": count},
           helpers.reference(load_spec(SPEC), {k: v.cpu() for k, v in inputs.items()}))
