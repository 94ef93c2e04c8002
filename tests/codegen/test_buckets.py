"""tests/codegen/specs/row_norm.yaml: a variant axis chosen at each call by the bucket of a size
(`buckets: {ROW: N}`, as Triton's autotune `key=`): the op picks the smallest ROW that holds N,
the program reads the whole row in one tile of ROW, N above every bucket is one clear error, and
`kgen check` sizes land inside each variant's bucket; on the CPU interpreter, in the gfx942
emulation, compiled for both targets, on the GPU; then the spec errors."""
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
from kgen.build import build_variant, tunable_candidates  # noqa: E402
from kgen.check.samples import check_sizes  # noqa: E402
from kgen.errors import LaunchError, SpecError  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.runtime.binding import choose_variant  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = HERE / "specs" / "row_norm.yaml"


def _want(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x, w = x.double(), w.double()
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


@pytest.mark.parametrize("n, row", [(1, 256), (256, 256), (257, 1024), (1000, 1024), (4096, 4096)])
def test_the_call_takes_the_smallest_bucket_that_holds_n(n, row):
    x, w = torch.randn(3, n), torch.randn(n)
    assert choose_variant(load_spec(SPEC), {"x": x, "w": w}, {}) == {"ROW": row}
    torch.testing.assert_close(kgen.load(SPEC)(x, w).double(), _want(x, w), rtol=1e-5, atol=1e-6)


def test_n_above_every_bucket_is_one_sentence():
    with pytest.raises(LaunchError) as err:
        kgen.load(SPEC)(torch.randn(2, 5000), torch.randn(5000))
    assert str(err.value) == "row_norm: N = 5000 is above the largest bucket of ROW; accepted: N <= 4096"


def test_a_bucketed_axis_is_not_an_argument():
    with pytest.raises(LaunchError, match="unknown argument 'ROW'"):
        kgen.load(SPEC)(torch.randn(2, 10), torch.randn(10), ROW=256)


def test_check_sizes_fall_inside_each_bucket():
    ls = load_spec(SPEC)
    below = 0
    for v in ls.variants():
        n = check_sizes(ls, v, tunable_candidates(ls, v)[0])["N"]
        assert below < n <= v["ROW"] and n != v["ROW"]
        below = v["ROW"]


def test_gfx942_emulation_matches():
    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    op = kgen.load(SPEC, target="gfx942", emulate=True)
    for n in (200, 700):
        x, w = torch.randn(3, n), torch.randn(n)
        torch.testing.assert_close(op(x, w).double(), _want(x, w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_every_bucket_compiles_without_spills(target):
    backend = load_target(target).backend
    if not available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found")
    ls = load_spec(SPEC)
    for v in ls.variants():
        (k,) = build_variant(ls, v, load_target(target), compile=True).kernels
        assert k.resources["spill_bytes"] == 0 and k.resources["stack_bytes"] == 0, (v, k.resources)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
def test_gpu_matches():
    for n in (100, 1000, 4000):
        x, w = torch.randn(64, n, device="cuda"), torch.randn(n, device="cuda")
        torch.testing.assert_close(kgen.load(SPEC)(x, w).cpu().double(), _want(x.cpu(), w.cpu()), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("edit, message", [
    (("buckets: {ROW: N}", "buckets: {COL: N}"), "buckets: 'COL' is not a variant axis; axes: ROW"),
    (("buckets: {ROW: N}", "buckets: {ROW: K}"), "buckets: 'K' is not a size; sizes: M, N"),
    (("ROW: [256, 1024, 4096]", "ROW: [1024, 256]"), "variant axis 'ROW' buckets size N: its values must be positive "
                                                      "integers in ascending order, got [1024, 256]"),
])
def test_a_bad_bucket_is_a_spec_error_at_its_place(tmp_path, edit, message):
    path = tmp_path / "row_norm.yaml"
    path.write_text(SPEC.read_text().replace(*edit))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert message in str(err.value) and "row_norm.yaml:" in str(err.value)
