"""Tile atomic adds: tests/codegen/specs/atomic_dot.yaml adds split-K matmul products into an fp32
output. The emitted code is simulated lane by lane (tests/codegen/lane_sim.py) on every target,
every program of a ragged grid adding into the same rows; on sm_90 each warp's part goes through
its slice of shared memory as one bulk reduction per row (kgen/ir/passes/bulk_reduce.py), elsewhere
per element, the vector width from the descriptor; and (marked gpu) the op runs on the GPU."""
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

from kgen.codegen.emit import Emitter  # noqa: E402
from kgen.codegen.render import name_values, render_kernel, tensor_dims  # noqa: E402
from kgen.hw.descriptor import load_target, target_names  # noqa: E402
from kgen.driver import compile_kernel  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = HERE / "specs" / "atomic_dot.yaml"
VARIANT = {"dtype": "bf16", "n": 64}
M, K = 100, 70  # ragged: the last row block and the last k block are partial


def _inputs(device: str = "cpu") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    # small integers: every product and sum is exact in bf16 inputs and fp32 sums, in any order
    return {"a": torch.randint(-3, 4, (M, K), generator=gen).to(torch.bfloat16).to(device),
            "b": torch.randint(-3, 4, (K, 64), generator=gen).to(torch.bfloat16).to(device)}


def _simulate(target: str, warps: int, ctx_edit=None) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    ls, tg = load_spec(SPEC), load_target(target)
    k = compile_kernel(ls, 0, VARIANT, {"BLOCK_M": 64, "BLOCK_K": 32, "WARPS": warps}, tg)
    name_values(k)
    emitter = Emitter(k, tg, tensor_dims(k))
    ctxs = emitter.ops(k.body)
    if ctx_edit:
        ctx_edit(ctxs)
    inputs = {name: t.double().numpy() for name, t in _inputs().items()}
    out = np.zeros((M, 64))
    sim = lane_sim.ProgramSim(k, tg, {**inputs, "out": out}, {"M": M, "K": K}, macros=emitter.macros())
    for block in product(range(2), range(3), range(1)):
        sim.run_block(block, ctxs)
    source = render_kernel(k, tg, spec_file="tests/codegen/specs/atomic_dot.yaml", program_line=1, variant=VARIANT)
    assert not [s for s in sim.snippets if s not in source]
    return out, inputs["a"] @ inputs["b"], ctxs


@pytest.mark.parametrize("target, warps", list(product(target_names(), (4, 8))))
def test_emitted_atomic_adds_sum_every_program(target, warps):
    out, want, ctxs = _simulate(target, warps)
    assert np.array_equal(out, want)
    add = next(c for c in ctxs if c.get("atomic"))
    assert add["vec"] == min(2, load_target(target).global_fp32_atomic_vector)
    assert "i1_" not in add["in_vec"]  # the whole static column dim needs no test
    # sm_90: through each warp's slice of shared memory, one bulk reduction per row of 64 fp32
    # (a warp of the wgmma accumulator holds 16 rows x 64 columns); elsewhere per element
    bulk = load_target(target).shared_bulk_fp32_add
    assert add["macro"] == ("bulk_add" if bulk else "store")
    if bulk:
        assert (add["bulk"]["rows"], add["bulk"]["cols"], add["bulk"]["ld"]) == (64 // min(warps, 4), 64 // max(warps // 4, 1), 72 if warps == 4 else 40)


@pytest.mark.parametrize("target", ["sm_90", "sm_80"])
def test_simulation_catches_a_dropped_row_test(target):
    """The check has teeth: without the row bound the last block's adds run past the tensor."""
    def drop(ctxs):
        add = next(c for c in ctxs if c.get("atomic"))
        add["in_elem"] = add["in_vec"] = "true"
        if "bulk" in add:
            add["bulk"]["in_row"] = "true"
    with pytest.raises(lane_sim.SimError, match="touches element"):
        _simulate(target, 4, drop)


def test_simulation_catches_overlapping_rows_of_a_slice():
    """A row stride shorter than a row: two lanes' values land in one slot."""
    def squeeze(ctxs):
        add = next(c for c in ctxs if c.get("atomic"))
        add["bulk"]["ld"] = add["bulk"]["cols"] - 8
    with pytest.raises(lane_sim.SimError, match="twice"):
        _simulate("sm_90", 4, squeeze)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
def test_gpu_matches_the_reference():
    import kgen

    op = kgen.load(SPEC)
    inputs = _inputs("cuda")
    out = op(**inputs, n=64)
    want = inputs["a"].float() @ inputs["b"].float()
    assert torch.equal(out, want)
