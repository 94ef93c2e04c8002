"""Warp specialization (kgen/ir/passes/specialize.py): tests/codegen/specs/rings.yaml copies k and
v for each key block; on sm_90 a producer warpgroup feeds both through rings of two slots.
The emitted code is simulated lane by lane (tests/codegen/lane_sim.py), the producer's program
as a coroutine beside the computing warps, each barrier's phases counted as mbarrier counts
them: an acquire for the wrong phase, a slot given back before its last read, a release on the
wrong barrier and a ring wait for the wrong parity all fail. The op also runs on the GPU."""
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

from kgen.codegen.render import render_kernel  # noqa: E402
from kgen.driver import compile_kernel  # noqa: E402
from kgen.errors import SpecError  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.ir.analysis import views_of  # noqa: E402
from kgen.ir.core import walk  # noqa: E402
from kgen.options import CompileOptions  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = HERE / "specs" / "rings.yaml"
TUNABLES = {"BLOCK_M": 128, "BLOCK_N": 64}
# ragged rows and 5 key blocks (the last partial): each of a ring's two slots is filled 2-3 times
M, N = 200, 300


def _variant(warps: int) -> dict:
    return {"dtype": "bf16", "d": 128, "warps": warps}


def _inputs(device: str = "cpu") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    # entries in {-1, 0, 1}: every product and sum is an integer exact in bf16 and fp32
    return {name: torch.randint(-1, 2, (rows, 128), generator=gen).to(torch.bfloat16).to(device)
            for name, rows in (("q", M), ("k", N), ("v", N))}


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return (q.float() @ k.float().T).to(q.dtype).float() @ v.float()


def _flat(ctxs):
    for c in ctxs:
        yield c
        if "body" in c:
            yield from _flat(c["body"])


PINGPONG = CompileOptions(pingpong=True)  # off by default (measured no faster); simulated here


def _lower(warps: int, options: CompileOptions = PINGPONG):
    return compile_kernel(load_spec(SPEC), 0, _variant(warps), TUNABLES, load_target("sm_90"), options=options)


def _simulate(warps: int, edit=None, land: str = "at_wait", options: CompileOptions = PINGPONG):
    tg = load_target("sm_90")
    k = _lower(warps, options)
    inputs = {name: t.double().numpy() for name, t in _inputs().items()}
    out = np.full((M, 128), np.nan)
    sim, _ = lane_sim.simulate(k, tg, {**inputs, "out": out}, {"M": M, "N": N}, [(0, 0, 0), (1, 0, 0)], edit, land)
    if edit is None:  # the simulation ran the lines the source has
        source = render_kernel(k, tg, spec_file="tests/codegen/specs/rings.yaml", program_line=1, variant=_variant(warps))
        assert not [s for s in sim.snippets if s not in source]
    return out, _reference(*_inputs().values()).double().numpy(), k


@pytest.mark.parametrize("land", ["at_wait", "at_issue"])
@pytest.mark.parametrize("warps", [4, 8])
def test_the_producer_fills_every_slot_the_consumers_read(warps, land):
    out, want, k = _simulate(warps, land=land)
    assert np.array_equal(out, want)


@pytest.mark.parametrize("land", ["at_wait", "at_issue"])
@pytest.mark.parametrize("warps", [4, 8])
def test_rings_of_three_slots(warps, land):
    """ring_slots=3: 5 key blocks wrap each ring once, the barriers numbered one per slot. With
    one computing warpgroup (two blocks per multiprocessor) only the first ring gets a third
    slot: a second one would leave room for one block."""
    options = CompileOptions(pingpong=True, ring_slots=3)
    out, want, k = _simulate(warps, land=land, options=options)
    assert np.array_equal(out, want)
    rings = [op for op in k.body.ops if op.kind == "alloc_shared" and op.attrs.get("empty_bar") is not None]
    slots = [3, 3] if warps == 8 else [3, 2]
    assert [op.attrs["slots"] for op in rings] == slots and k.release_barriers == sum(slots)
    bars = sorted(b for op in walk(k.body) if op.kind == "alloc_shared" and op.attrs.get("tma")
                  for b in range(op.attrs["bar"], op.attrs["bar"] + op.attrs.get("slots", 1)))
    assert bars == list(range(k.tma_barriers)) == list(range(1 + sum(slots)))  # q's, then one per slot, each once


@pytest.mark.parametrize("warps, consumer_regs, blocks", [(4, 232, 2), (8, 240, 1)])
def test_the_kernel_has_a_producer_warpgroup_and_rings(warps, consumer_regs, blocks):
    k = _lower(warps)
    top = [op.kind for op in k.body.ops]
    assert top[:3] == ["alloc_shared", "alloc_shared", "producer"]  # the rings exist before it fills them
    producer = k.body.ops[2]
    # one thread's program: the loop's range again, and per ring an acquire before its copy
    assert producer.attrs == {"warps": 4, "regs": 24, "consumer_regs": consumer_regs, "blocks_per_sm": blocks}
    assert k.producer_warps == 4 and k.release_barriers == 4  # two rings of two slots
    (loop,) = [op for op in producer.body.ops if op.kind == "for"]
    assert [op.kind for op in loop.body.ops if op.kind in ("acquire", "copy_async")] == ["acquire", "copy_async"] * 2
    assert all(not op.attrs["pred"] for op in loop.body.ops if op.kind == "copy_async")
    # the consumers: no copies of their own in the loop, ring waits without a block barrier,
    # and each ring given back after its last reader (the wgmma's wait for k; v's product is
    # waited for at the loop's end)
    (consumer,) = [op for op in k.body.ops if op.kind == "for"]
    kinds = [op.kind for op in consumer.body.ops]
    assert "copy_async" not in kinds and kinds.count("release") == 2
    waits = [op for op in consumer.body.ops if op.kind == "wait_async"]
    assert all(w.attrs["ring"] and not w.attrs["barrier"] for w in waits)
    for release in [op for op in consumer.body.ops if op.kind == "release"]:
        views = views_of(consumer.body, release.operands[0])
        readers = [i for i, op in enumerate(consumer.body.ops) if op.kind in ("dot", "dot_wait")
                   and any(v in views for v in op.operands)]
        assert readers and consumer.body.ops.index(release) == max(readers) + 1
        assert consumer.body.ops[max(readers)].kind == "dot_wait"  # the wgmma reads until its wait
    assert not [op for op in walk(k.body) if op.kind == "tma_reset"]  # each ring runs once


def test_without_the_option_or_on_other_targets_there_is_no_producer():
    assert not [op for op in walk(_lower(4, CompileOptions(warp_specialize=False)).body) if op.kind == "producer"]
    ls = load_spec(SPEC)
    for target in ("sm_80", "gfx942"):
        k = compile_kernel(ls, 0, _variant(4), {"BLOCK_M": 64, "BLOCK_N": 64}, load_target(target))
        assert not [op for op in walk(k.body) if op.kind in ("producer", "acquire", "release")]


@pytest.mark.parametrize("choice, producer", [("true", True), ("false", False), ("warps == 8", False), ("warps == 4", True)])
def test_the_spec_chooses_per_variant(tmp_path, choice, producer):
    path = tmp_path / "rings.yaml"
    path.write_text(SPEC.read_text().replace("warp_specialize: true", f"warp_specialize: {choice}"))
    k = compile_kernel(load_spec(path), 0, _variant(4), TUNABLES, load_target("sm_90"))
    assert bool([op for op in k.body.ops if op.kind == "producer"]) == producer


def test_an_expression_that_cannot_be_evaluated_is_named(tmp_path):
    path = tmp_path / "rings.yaml"
    path.write_text(SPEC.read_text().replace("warp_specialize: true", "warp_specialize: no_such_axis"))
    with pytest.raises(SpecError, match=r"warp_specialize must be true, false or an expression.*'no_such_axis'") as e:
        compile_kernel(load_spec(path), 0, _variant(4), TUNABLES, load_target("sm_90"))
    assert "rings.yaml:" in str(e.value)


def test_two_computing_warpgroups_take_turns_at_their_products():
    k = _lower(8)
    (loop,) = [op for op in k.body.ops if op.kind == "for"]
    body = [op.attrs["step"] if op.kind == "turn" else op.kind for op in loop.body.ops if op.kind in ("turn", "dot")]
    assert body == ["take", "dot", "dot", "give"]
    top = [op.attrs["step"] for op in k.body.ops if op.kind == "turn"]
    assert top == ["start", "finish"] and k.body.ops.index(loop) - 1 == [op.kind for op in k.body.ops].index("turn")
    assert not [op for op in walk(_lower(4).body) if op.kind == "turn"]  # one warpgroup: no one to alternate with
    assert not [op for op in walk(_lower(8, CompileOptions()).body) if op.kind == "turn"]  # the default


def _drop_turn(step):
    def edit(ctxs):
        for block in [ctxs] + [c["body"] for c in _flat(ctxs) if "body" in c]:
            block[:] = [c for c in block if not (c["macro"] == "turn" and c["step"] == step)]
    return edit


@pytest.mark.parametrize("step, error", [("start", "deadlock"), ("finish", "half-arrived"), ("give", "deadlock")])
def test_simulation_catches_unbalanced_turns(step, error):
    with pytest.raises(lane_sim.SimError, match=error):
        _simulate(8, _drop_turn(step))


def _first(ctxs, macro, n=0):
    return [c for c in _flat(ctxs) if c["macro"] == macro][n]


def _release_first(ctxs):
    """k's release moved to right after its wait, before the product that reads the slot."""
    loop = next(c for c in ctxs if c["macro"] == "for_loop")
    release = next(c for c in loop["body"] if c["macro"] == "release")
    loop["body"].remove(release)
    wait = next(i for i, c in enumerate(loop["body"]) if c["macro"] == "tma_wait")
    loop["body"].insert(wait + 1, release)


@pytest.mark.parametrize("edit, error", [
    # the producer waits for the phase its first use completes, not the one before: no slot is free
    (lambda cs: _first(cs, "acquire").update(parity=_first(cs, "acquire")["parity"].replace(" ^ 1", "")), "hang"),
    # k's slots given back on v's barriers: k's producer waits for releases that never come
    (lambda cs: _first(cs, "release").update(bar=_first(cs, "release", 1)["bar"]), "hang"),
    # a ring wait for parity 0 every time: the second use of a slot waits for a phase long past
    (lambda cs: _first(cs, "tma_wait", 1).update(parity="0"), "parity"),
])
def test_simulation_catches_broken_rings(edit, error):
    with pytest.raises(lane_sim.SimError, match=error):
        _simulate(4, edit)


def test_a_slot_given_back_before_its_last_read_is_overwritten():
    out, want, _ = _simulate(4, _release_first, land="at_issue")
    assert not np.array_equal(out, want)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("warps", [4, 8])
def test_gpu_matches_the_reference(warps):
    import kgen

    op = kgen.load(SPEC)
    inputs = _inputs("cuda")
    assert torch.equal(op(**inputs, d=128, warps=warps), _reference(*inputs.values()))
