"""Tensor copies (TMA, sm_90): tests/codegen/specs/tensor_copies.yaml copies k a whole iteration
ahead into two slots, in a loop over key blocks inside a loop over groups. The emitted code is
simulated lane by lane (tests/codegen/lane_sim.py), the copies as the hardware places them (the
box row-major, the 128-byte swizzle applied to byte addresses), each barrier's phases counted:
a wait for the wrong parity, an arrival that leaves a run's barriers odd, a box at the wrong
coordinates or into the wrong panel, and a byte count the copies do not deliver all fail. On the
other targets the same kernel takes cp.async (sm_80) or register loads (gfx942). The op also
runs on the GPU (marked gpu)."""
from __future__ import annotations

import sys
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
from kgen.ir.core import walk  # noqa: E402
from kgen.driver import compile_kernel  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = HERE / "specs" / "tensor_copies.yaml"
VARIANT = {"dtype": "bf16", "d": 128}
# ragged rows; 3 key blocks (the last partial), so slot 0 takes two copies per run and slot 1
# one, and 3 groups, so that the inner loop runs three times on the same barriers
M, N, G = 100, 150, 3


def _inputs(device: str = "cpu") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    # entries in {-1, 0, 1}: q k^T is an integer of at most 128 (exact in bf16), every sum exact
    return {"q": torch.randint(-1, 2, (M, 128), generator=gen).to(torch.bfloat16).to(device),
            "k": torch.randint(-1, 2, (G, N, 128), generator=gen).to(torch.bfloat16).to(device)}


def _reference(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    s = torch.einsum("md,gnd->gmn", q.float(), k.float()).to(q.dtype).float()
    return torch.einsum("gmn,gnd->md", s, k.float())


def _flat(ctxs):
    for c in ctxs:
        yield c
        if c["macro"] == "for_loop":
            yield from _flat(c["body"])


def _simulate(target: str, edit=None, land: str = "at_wait"):
    ls, tg = load_spec(SPEC), load_target(target)
    k = compile_kernel(ls, 0, VARIANT, {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 4}, tg)
    name_values(k)
    emitter = Emitter(k, tg, tensor_dims(k))
    ctxs = emitter.ops(k.body)
    if edit:
        edit(list(_flat(ctxs)))
    inputs = {name: t.double().numpy() for name, t in _inputs().items()}
    out = np.full((M, 128), np.nan)
    sim = lane_sim.ProgramSim(k, tg, {**inputs, "out": out}, {"M": M, "N": N, "G": G}, land=land, macros=emitter.macros())
    for block in ((0, 0, 0), (1, 0, 0)):
        sim.run_block(block, ctxs)
    if edit is None:  # the simulation ran the lines the source has
        source = render_kernel(k, tg, spec_file="tests/codegen/specs/tensor_copies.yaml", program_line=1, variant=VARIANT)
        assert not [s for s in sim.snippets if s not in source]
    want = _reference(*_inputs().values()).double().numpy()
    return out, want, k


@pytest.mark.parametrize("land", ["at_wait", "at_issue"])
@pytest.mark.parametrize("target", target_names())
def test_emitted_copies_deliver_every_key_block(target, land):
    out, want, k = _simulate(target, land=land)
    assert np.array_equal(out, want)
    copies = [op for op in walk(k.body) if op.kind == "copy_async"]
    tensor = [op for op in copies if op.attrs.get("tma")]
    if target == "sm_90":  # k's copies (q's too): one thread, one box per 128-byte panel
        assert {op.attrs["tensor"] for op in tensor} == {"q", "k"} and len(tensor) == len(copies)
        assert [op.kind for op in walk(k.body) if op.kind == "tma_reset"] == ["tma_reset"]  # after the inner loop
        assert k.tma_barriers == 3  # q's, and one per slot of k's
    else:
        assert not tensor


def _first(ctxs, macro, n=0):
    return [c for c in ctxs if c["macro"] == macro][n]


@pytest.mark.parametrize("edit, error", [
    # every wait in the loop for parity 0: the second use of slot 0 waits for a phase long past
    (lambda cs: _first(cs, "tma_wait", 1).update(parity="0"), "parity"),
    # no arrival after the inner loop: the next run's first wait on slot 1 has the wrong parity
    (lambda cs: [f.update(uses="0") for f in _first(cs, "tma_reset")["flips"]], "parity"),
    # the barrier armed for more bytes than the copies move: its wait would hang
    (lambda cs: _first(cs, "tma_copy", 1).update(bytes=_first(cs, "tma_copy", 1)["bytes"] * 2), "hang"),
    # a wait on the other slot's barrier
    (lambda cs: _first(cs, "tma_wait", 1).update(bar=_first(cs, "tma_wait", 1)["bar"].replace("% 2", "% 2 + 1")), "barrier"),
])
def test_simulation_catches_broken_barriers(edit, error):
    with pytest.raises(lane_sim.SimError, match=error):
        _simulate("sm_90", edit)


@pytest.mark.parametrize("edit", [
    # the second panel's box at the first panel's columns
    lambda cs: _first(cs, "tma_copy", 1)["boxes"][1]["coords"].__setitem__(0, "0"),
    # the second panel written over the first
    lambda cs: _first(cs, "tma_copy", 1)["boxes"][1].update(slot=_first(cs, "tma_copy", 1)["boxes"][0]["slot"]),
    # the next key block's copy at this block's rows
    lambda cs: _first(cs, "tma_copy", 2)["boxes"][0]["coords"].__setitem__(1, "0"),
])
def test_simulation_catches_misplaced_boxes(edit):
    out, want, _ = _simulate("sm_90", edit)
    assert not np.array_equal(out, want)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
def test_gpu_matches_the_reference():
    import kgen

    op = kgen.load(SPEC)
    inputs = _inputs("cuda")
    assert torch.equal(op(**inputs, d=128), _reference(*inputs.values()))
    # a view whose rows are not 16-byte aligned takes a copy before the tensor map describes it
    k_odd = torch.cat([inputs["k"].reshape(-1), inputs["k"].reshape(-1)[:1]])[1:].view(G, N, 128)
    assert k_odd.data_ptr() % 16
    assert torch.equal(op(q=inputs["q"], k=k_odd, d=128), _reference(inputs["q"], k_odd))
