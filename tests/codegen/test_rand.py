"""rand(seed, offset) and rand8(seed, offset) in programs (tests/codegen/specs/rand_fill.yaml):
int64 seed and offset scalars past 32 bits, a 2D tile of numbers and dropout by them; bit for bit kgen/ir/philox.py on
the CPU interpreter, in the gfx942 emulation and (marked gpu) on the GPU, through both compilers
without spills; the keep rate, and independence across rows, columns and seeds. Then the
language's rules for rand."""
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
from kgen.errors import SpecError  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.ir.philox import rand, rand8  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = HERE / "specs" / "rand_fill.yaml"
SCALARS = {"seed": -(2**62) + 12345, "base": 2**33 + 7, "p": 0.3}  # both words of seed and counter used


def _want(x: torch.Tensor, seed: int, base: int, p: float, bytes: bool, tiled: bool = False
          ) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.shape
    i, j = torch.arange(m).view(-1, 1), torch.arange(n).view(1, -1)
    at = (base * 16 + i // 16 * ((n + 15) // 16) + j // 16) * 256 + i % 16 * 16 + j % 16 if tiled else base + i * n + j
    u = (rand8 if bytes else rand)(seed + j % 2 if tiled else seed, at)
    return u, torch.where(u >= p, x / (1.0 - p), 0.0)


def _check(u: torch.Tensor, y: torch.Tensor, x: torch.Tensor, **scalars) -> None:
    want_u, want_y = _want(x, **scalars)
    assert torch.equal(u.cpu(), want_u), "the numbers differ from kgen/ir/philox.py's"
    torch.testing.assert_close(y.cpu(), want_y, rtol=1e-6, atol=0)


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("bytes", [False, True])
def test_interpreter_matches_reference_and_philox(bytes, tiled):
    ls, x = load_spec(SPEC), torch.randn(37, 100)  # partial blocks on both axes
    v = {"bytes": bytes, "tiled": tiled}
    got = helpers.run_spec_cpu(ls, v, {"x": x}, {"M": 37, "N": 100}, SCALARS)
    helpers.check_outputs(ls, got, {"x": x}, SCALARS, v)
    _check(got["u"], got["y"], x, **SCALARS, **v)


def test_rand8_is_the_bytes_of_the_words():
    """rand8's sixteen offsets of a counter are the bytes, low first, of rand's four words there."""
    seed, base = SCALARS["seed"], SCALARS["base"] * 16
    words = (rand(seed, base // 4 + torch.arange(4)) * 2.0**24).to(torch.int64)  # each word's top 24 bits
    got = (rand8(seed, base + torch.arange(16)) * 256).to(torch.int64).view(4, 4)
    assert torch.equal(got[:, 1:], torch.stack([(words >> (8 * i)) & 0xFF for i in range(3)], 1))


@pytest.mark.parametrize("bytes, kept", [(False, 0.7), (True, (256 - 77) / 256)])  # rand8: k / 256 >= 0.3 for k >= 77
def test_keep_rate_and_independence(bytes, kept):
    x = torch.ones(256, 256)
    u, y = kgen.load(SPEC)(x, **SCALARS, bytes=bytes)
    keep = (y != 0).float()
    n = keep.numel()
    assert abs(float(keep.mean()) - kept) < 4 * (kept * (1 - kept) / n) ** 0.5  # binomial, 4 standard deviations
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / 0.7))
    # neighbouring rows and columns, and the same offsets under another seed, are uncorrelated
    other = kgen.load(SPEC)(x, seed=SCALARS["seed"] + 1, base=SCALARS["base"], p=0.3, bytes=bytes)[0]
    for a, b in ((u[1:], u[:-1]), (u[:, 1:], u[:, :-1]), (u, other)):
        r = torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1]
        assert abs(float(r)) < 4 / a.numel() ** 0.5, float(r)


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("bytes", [False, True])
def test_gfx942_emulation_matches(bytes, tiled):
    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    x = torch.randn(37, 100)
    v = {"bytes": bytes, "tiled": tiled}
    _check(*kgen.load(SPEC, target="gfx942", emulate=True)(x, **SCALARS, **v), x, **SCALARS, **v)


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("bytes", [False, True])
@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_compiles_without_spills(target, bytes, tiled):
    """Offsets base + i N + j: no two registers provably share a counter (base and N are any
    integers), so the registers draw through the run-time memo; tiled offsets: a row's columns in
    a 16-column tile share theirs, one Philox call each (kgen/codegen/rand_draw.py)."""
    backend = load_target(target).backend
    if not available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found")
    (k,) = build_variant(load_spec(SPEC), {"bytes": bytes, "tiled": tiled}, load_target(target), compile=True).kernels
    assert k.resources["spill_bytes"] == 0 and k.resources["stack_bytes"] == 0, k.resources
    assert "long long scalar_seed" in k.source
    memo = f"memo.uniform{'8' if bytes else ''}(seed, " in k.source
    assert memo != tiled and ("kg::philox4(" in k.source) == tiled


def _spec(tmp_path, line: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"""kgen: 1
name: s
summary: s
sizes: [N]
scalars:
  f: {{}}
tensors:
  y: {{shape: [N], dtype: fp32, role: output}}
kernels:
  - name: k
    grid: "1"
    program: |
      {line}
      store(y[block(0, 16)], r)
reference: y = torch.zeros(N)
""")
    return path


@pytest.mark.parametrize("line, message", [
    ("r = rand(f, arange(16))", "rand(seed, offset) takes an integer seed (int32 or int64 scalar or tile), got fp32"),
    ("r = rand(3, arange(16).to(fp32))", "rand(seed, offset) takes an integer offset (int32 or int64 scalar or tile), got fp32"),
    ("r = rand(3, 0.5)", "takes an integer offset"),
    ("r = rand8(f, arange(16))", "rand8(seed, offset) takes an integer seed (int32 or int64 scalar or tile), got fp32"),
])
def test_rand_errors(tmp_path, line, message):
    from kgen.lang import kernel_ir

    with pytest.raises(SpecError) as e:
        kernel_ir(load_spec(_spec(tmp_path, line)), 0, {}, {})
    assert message in str(e.value) and "s.yaml:" in str(e.value)


def test_rand_of_constants_folds(tmp_path):
    from kgen.ir.core import walk
    from kgen.lang import kernel_ir

    k = kernel_ir(load_spec(_spec(tmp_path, "r = full((16,), rand(3, 5) + rand8(3, 5), fp32)")), 0, {}, {})
    fulls = [op for op in walk(k.body) if op.kind == "full"]
    assert fulls and fulls[0].attrs["value"] == float(rand(3, 5)) + float(rand8(3, 5))


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("bytes", [False, True])
def test_gpu_matches(monkeypatch, tmp_path, bytes, tiled):
    monkeypatch.setenv("KGEN_POISON", "1")  # outputs start as NaN: an unwritten element fails
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path))
    x = torch.randn(1000, 3000)
    u, y = kgen.load(SPEC)(x.cuda(), **SCALARS, bytes=bytes, tiled=tiled)
    assert u.is_cuda
    _check(u, y, x, **SCALARS, bytes=bytes, tiled=tiled)
