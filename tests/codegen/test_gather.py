"""Loads and stores indexed by integer tiles (gather, scatter, scatter-add): tests/codegen/specs/
gather_rows.yaml reads embedding rows by an id tile and counts the ids with atomic adds, ids out
of range included, on the CPU interpreter, in the gfx942 emulation, through both compilers and
on the GPU; then the errors."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import helpers  # noqa: E402

import kgen  # noqa: E402
from kgen.backends import available  # noqa: E402
from kgen.build import build_variant  # noqa: E402
from kgen.errors import SpecError  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = HERE / "specs" / "gather_rows.yaml"
R, V, D = 37, 11, 100
DT = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _inputs(dtype: str):
    gen = torch.Generator().manual_seed(5)
    return {"table": torch.randn(V, D, generator=gen).to(DT[dtype]),
            "ids": torch.randint(-2, V + 2, (R,), generator=gen, dtype=torch.int32)}


def _want(ins: dict, scale: float):
    """Independently of the spec's reference: row by row."""
    y = torch.zeros(R, D, dtype=torch.float64)
    counts = torch.zeros(V, dtype=torch.float64)
    for r, i in enumerate(ins["ids"].tolist()):
        if 0 <= i < V:
            y[r] = ins["table"][i].double() * scale
            counts[i] += 1
    return y, counts


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_interpreter_matches(dtype):
    ls, ins = load_spec(SPEC), _inputs(dtype)
    got = helpers.run_spec_cpu(ls, {"dtype": dtype}, dict(ins), {"R": R, "V": V, "D": D}, {"scale": 0.5})
    helpers.check_outputs(ls, got, ins, {"scale": 0.5}, {"dtype": dtype})
    y, counts = _want(ins, 0.5)
    torch.testing.assert_close(got["y"].double(), y, rtol=1e-2, atol=1e-2)
    assert torch.equal(got["counts"].double(), counts) and counts.sum() < R  # some ids were out of range


def test_gfx942_emulation_matches():
    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    ins = _inputs("fp32")
    y, counts = kgen.load(SPEC, target="gfx942", emulate=True)(**ins, scale=0.5)
    want_y, want_counts = _want(ins, 0.5)
    torch.testing.assert_close(y.double(), want_y, rtol=1e-6, atol=1e-6)
    assert torch.equal(counts.double(), want_counts)


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_compiles(target):
    backend = load_target(target).backend
    if not available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found")
    (k,) = build_variant(load_spec(SPEC), {"dtype": "bf16"}, load_target(target), compile=True).kernels
    assert "(unsigned)" in k.text and "kg::atomic_add(&t_counts" in k.text and k.resources["spill_bytes"] == 0


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_matches(dtype):
    ins = _inputs(dtype)
    y, counts = kgen.load(SPEC)(**{k: v.cuda() for k, v in ins.items()}, scale=0.5)
    want_y, want_counts = _want(ins, 0.5)
    torch.testing.assert_close(y.cpu().double(), want_y, rtol=1e-2, atol=1e-2)
    assert torch.equal(counts.cpu().double(), want_counts)


@pytest.mark.parametrize("line, message", [
    ("rows = load(table[ids_t[:, None], block(0, BLOCK_D)])",
     "load() indexed by a tile takes integer tiles and scalars, not block(i, size), in every dim"),
    ("rows = load(table[ids_t, :])", "load() indexed by a tile takes integer tiles and scalars in every dim, not ':'"),
    ("rows = load(table[ids_t.to(fp32)[:, None], c[None, :]])",
     "a tensor index must be an integer scalar, an integer tile or block(i, size), got 16x1 fp32"),
    ("atomic_add(table[ids_t[:, None], c[None, :]], 1.0)", "atomic_add() writes into 'table', an input of the op"),
])
def test_errors_name_the_index(tmp_path, line, message):
    text = SPEC.read_text().replace("      rows = load(table[ids_t[:, None], c[None, :]]).to(fp32)\n", f"      {line}\n      rows = zeros((BLOCK_R, BLOCK_D))\n")
    path = tmp_path / "g.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as e:
        build_variant(load_spec(path), {"dtype": "fp32"}, load_target("sm_90"), compile=False)
    assert message in str(e.value)
