"""cumsum (the `scan` op): tests/codegen/specs/scan.yaml scans a 2-D tile down its rows (across
warps) and along its columns (across lanes and registers), and a 1-D int32 tile. Checked on the CPU
interpreter against the reference; the emitted code simulated lane by lane (tests/codegen/lane_sim.py)
for every target with several warp counts, exactly (integer-valued inputs); compiled for both
shipped targets without spills; and (marked gpu) run on the GPU."""
from __future__ import annotations

import sys
from itertools import product
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
sys.path.insert(0, str(HERE))  # for lane_sim
import helpers  # noqa: E402
import lane_sim  # noqa: E402

from kgen.build import build_variant  # noqa: E402
from kgen.codegen.emit import Emitter  # noqa: E402
from kgen.codegen.render import name_values, render_kernel, tensor_dims  # noqa: E402
from kgen.hw.descriptor import load_target, target_names  # noqa: E402
from kgen.driver import compile_kernel  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402
from kgen.backends import available  # noqa: E402

SPEC = HERE / "specs" / "scan.yaml"
SIZES = [(1, 1), (100, 40), (128, 64)]  # one element, ragged blocks, whole blocks
TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _inputs(m: int, n: int, dtype: str, device: str = "cpu") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(m * 1000 + n)
    x = torch.randint(-4, 5, (m, n), generator=gen).to(TORCH[dtype])  # sums of at most 64 stay exact in bf16
    i = torch.randint(-(2 ** 20), 2 ** 20, (m,), generator=gen, dtype=torch.int32)
    return {"x": x.to(device), "i": i.to(device)}


def _check(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    for name in ("down", "across", "running"):
        assert torch.equal(got[name].cpu().double(), want[name].double()), name


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("m, n", SIZES)
def test_interpreter_matches_the_reference(m, n, dtype):
    ls = load_spec(SPEC)
    inputs = _inputs(m, n, dtype)
    got = helpers.run_spec_cpu(ls, {"dtype": dtype}, dict(inputs), {"M": m, "N": n}, {})
    _check(got, helpers.reference(ls, inputs, variant={"dtype": dtype}))


@pytest.mark.parametrize("target, warps", list(product(target_names(), (1, 4, 8))))
def test_emitted_scan_computes_the_cumsum(target, warps):
    """Every lane of every warp of every block runs the emitted contexts; with 4 and 8 warps
    the row scan crosses warps (shared memory), with 1 it stays in lanes and registers."""
    ls, tg = load_spec(SPEC), load_target(target)
    tunables = {"BLOCK_M": 64, "BLOCK_N": 32, "WARPS": warps}
    k = compile_kernel(ls, 0, {"dtype": "fp32"}, tunables, tg)
    name_values(k)
    emitter = Emitter(k, tg, tensor_dims(k))
    ctxs = emitter.ops(k.body)
    m, n = 128, 64
    inputs = {name: t.double().numpy() for name, t in _inputs(m, n, "fp32").items()}
    outputs = {"down": np.full((m, n), np.nan), "across": np.full((m, n), np.nan), "running": np.full(m, np.nan)}
    sim = lane_sim.ProgramSim(k, tg, {**inputs, **outputs}, {"M": m, "N": n}, macros=emitter.macros())
    for block in product(range(2), range(2), range(1)):
        sim.run_block(block, ctxs)
    source = render_kernel(k, tg, spec_file="tests/codegen/specs/scan.yaml", program_line=1, variant={"dtype": "fp32"})
    assert not [s for s in sim.snippets if s not in source]
    want = helpers.reference(ls, {name: torch.from_numpy(v) for name, v in inputs.items()}, variant={"dtype": "fp32"})
    for name in outputs:
        assert np.array_equal(outputs[name], want[name].numpy()), name
    levels = {lv["kind"] for c in ctxs if c["macro"] == "scan" for lv in c["levels"]}
    assert {"reg", "lane"} <= levels and (("warp" in levels) == (warps > 1)), levels


def test_simulation_catches_a_wrong_level():
    """The check has teeth: dropping one level of a scan must break the result."""
    ls, tg = load_spec(SPEC), load_target("sm_90")
    k = compile_kernel(ls, 0, {"dtype": "fp32"}, {"BLOCK_M": 64, "BLOCK_N": 32, "WARPS": 4}, tg)
    name_values(k)
    emitter = Emitter(k, tg, tensor_dims(k))
    ctxs = emitter.ops(k.body)
    scan = next(c for c in ctxs if c["macro"] == "scan")
    scan["levels"] = scan["levels"][:-1]
    inputs = {name: t.double().numpy() for name, t in _inputs(64, 32, "fp32").items()}
    outputs = {"down": np.full((64, 32), np.nan), "across": np.full((64, 32), np.nan), "running": np.full(64, np.nan)}
    sim = lane_sim.ProgramSim(k, tg, {**inputs, **outputs}, {"M": 64, "N": 32}, macros=emitter.macros())
    sim.run_block((0, 0, 0), ctxs)
    want = helpers.reference(ls, {name: torch.from_numpy(v) for name, v in inputs.items()}, variant={"dtype": "fp32"})
    assert not np.array_equal(outputs["down"], want["down"].numpy())


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_compiles_for_both_targets_without_spills(target):
    backend = load_target(target).backend
    if not available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found")
    for dtype in ("fp32", "bf16"):
        built = build_variant(load_spec(SPEC), {"dtype": dtype}, load_target(target), compile=True)
        for k in built.kernels:
            assert k.resources["spill_bytes"] == 0 and k.resources["stack_bytes"] == 0, k.resources


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("m, n", SIZES)
def test_gpu_matches_the_reference(m, n, dtype):
    import kgen

    op = kgen.load(SPEC)
    inputs = _inputs(m, n, dtype, "cuda")
    down, across, running = op(**inputs)  # dtype comes from the tensors
    _check({"down": down, "across": across, "running": running},
           helpers.reference(load_spec(SPEC), {k: v.cpu() for k, v in inputs.items()}, variant={"dtype": dtype}))
