"""Every example op on a GPU, through the compiled code objects: forward and backward (autograd)
against float64 torch, and a deterministic rmsnorm dw.

Outputs are NaN-poisoned before the kernels run (KGEN_POISON), so an element no kernel writes
fails the check; inputs are fresh torch.randn (never zeros, which hide missing loads and masks);
sizes include 1 and sizes that are no multiple of any block (rows: BLOCK_M=4, BLOCK_N=512/1024,
BLOCK_C=128, BLOCK_R=16; matmul: 64x64x32); every dtype the spec has. The tolerance is
helpers.check_close: 2x the error of torch doing the same computation in the input dtype, plus
helpers.FLOOR. Code objects are built into a private cache (KGEN_CACHE_DIR), so nothing depends
on the user's cache.

Skipped without a GPU that kgen builds for; without the compiler for it, skipped too except in CI.
"""
from __future__ import annotations

import sys
import zlib
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/runtime, for example_ops
import example_ops  # noqa: E402
from example_ops import SPECS, helpers  # noqa: E402

import kgen  # noqa: E402
from kgen import backends  # noqa: E402
from kgen.errors import LaunchError  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.runtime import compiled  # noqa: E402
from kgen.runtime.binding import NAMES, TORCH  # noqa: E402
from kgen.runtime.op import device_target  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402


_NO_GPU = helpers.no_gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_NO_GPU is not None, reason=str(_NO_GPU))]

ROW_SIZES = [(1, 1), (37, 100), (256, 4096), (1000, 3000), (129, 10007)]  # (M, N)
MATMUL_SIZES = [(1, 1, 1), (37, 100, 76), (256, 512, 128), (1000, 3000, 520)]  # (M, N, K)


def _built(spec, dtype: str, sizes: dict[str, int]) -> bool:
    """Whether a call of these sizes runs a built variant (the bucketed axes follow their sizes;
    layernorm builds no fp32 rows above 4096)."""
    variant = {"dtype": dtype, **{axis: next(v for v in spec.variants[axis] if sizes[size] <= v)
                                  for axis, size in spec.buckets.items()}}
    return not any(all(variant.get(a) == v for a, v in ex.items()) for ex in spec.exclude)


def _cases():
    for name in example_ops.FORWARD_OPS:
        spec = load_spec(SPECS / f"{name}.yaml").spec
        for dt in spec.variants["dtype"]:
            if name == "matmul":
                sizes = [dict(zip("MNK", s)) for s in MATMUL_SIZES]
            else:
                sizes = [dict(zip("MN", s)) for s in ROW_SIZES]
            for s in sizes:
                if _built(spec, dt, s):
                    yield pytest.param(name, TORCH[dt], s, id=f"{name}-{dt}-" + "x".join(map(str, s.values())))


@pytest.fixture(scope="module", autouse=True)
def kgen_env(tmp_path_factory):
    """A private cache and NaN poisoning for this module. knobs() reads the environment at each
    call, so setting the variables is enough; but compiled variants are memoised per process,
    not per cache, so the memo starts empty here (and is put back afterwards). The launcher
    extension, if this process already loaded it, is kept: it holds no kernel code."""
    backend = device_target(torch.device("cuda")).backend
    if not backends.available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found (KGEN_NVCC / KGEN_HIP_CLANG)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KGEN_CACHE_DIR", str(tmp_path_factory.mktemp("kgen-cache")))
        mp.setenv("KGEN_POISON", "1")
        mp.setattr(compiled, "_memo", {})
        compiled._load_entry.cache_clear()
        yield
    compiled._load_entry.cache_clear()


@pytest.fixture(scope="module")
def ops():
    return {name: kgen.load(SPECS / f"{name}.yaml") for name in example_ops.FORWARD_OPS}


def _inputs(op, dtype: torch.dtype, sizes: dict[str, int], gen: torch.Generator) -> dict[str, torch.Tensor]:
    cpu = helpers.random_inputs(op.spec, {"dtype": NAMES[dtype]}, sizes, gen)
    return {n: t.cuda() for n, t in cpu.items()}


@pytest.mark.parametrize("name, dtype, sizes", list(_cases()))
def test_op_matches_float64(ops, name, dtype, sizes):
    assert knobs().poison, "outputs must be NaN-poisoned for this test to see unwritten elements"
    op = ops[name]
    gen = torch.Generator().manual_seed(zlib.crc32(f"{name}-{dtype}-{sizes}".encode()))
    example_ops.check_forward_backward(op, _inputs(op, dtype, sizes, gen), gen)


def test_rmsnorm_dw_is_deterministic(ops):
    """dw sums over all rows: kernel `rows` writes per-block partial sums, kernel `dw` adds them
    in a fixed order, so repeated backwards agree bit for bit. fp32, so that no rounding to a
    16-bit output hides a difference; M gives 4097 partial sums for the `dw` kernel to add."""
    op = ops["rmsnorm"]
    gen = torch.Generator().manual_seed(3)
    inputs = _inputs(op, torch.float32, {"M": 16387, "N": 3000}, gen)
    x, w = (t.requires_grad_() for t in inputs.values())
    y, _ = op(x, w)
    dy = torch.randn(y.shape, generator=gen).cuda()
    runs = [torch.autograd.grad(y, (x, w), dy, retain_graph=True) for _ in range(5)]
    dx0, dw0 = runs[0]
    assert torch.isfinite(dw0).all() and torch.isfinite(dx0).all()
    for i, (dx, dw) in enumerate(runs[1:], 1):
        assert torch.equal(dw, dw0), f"run {i}: dw differs in {int((dw != dw0).sum())} of {dw.numel()} elements"
        assert torch.equal(dx, dx0), f"run {i}: dx differs in {int((dx != dx0).sum())} of {dx.numel()} elements"


def test_inputs_on_two_devices_are_one_clear_sentence(ops):
    x = torch.randn(5, 37, device="cuda")
    with pytest.raises(LaunchError) as err:
        ops["rmsnorm"](x, torch.randn(37))
    assert str(err.value) == ("rmsnorm: 'w' is on cpu, the other inputs on cuda:0; put all inputs on one device")
