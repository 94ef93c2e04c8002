"""Ping-pong: two computing warpgroups take turns at the tensor cores, as FlashAttention-3's
warp scheduler barriers have them.

In a warp-specialized kernel (passes/specialize.py) with two computing warpgroups, each works on
its own rows, and both would issue their matrix products at the same time and then both do
their elementwise work (attention's softmax) while the tensor cores idle. With `pingpong`
(CompileOptions) each iteration of a ring loop issues its products only in its warpgroup's turn
and hands the turn over once they are issued: one warpgroup's elementwise work then runs while
the other's products run.

  turn [start]   before the first ring loop: warpgroup 1 gives warpgroup 0 the first turn
  turn [take]    before the iteration's first dot: wait for this warpgroup's turn
  turn [give]    after its last dot: the other warpgroup's turn
  turn [finish]  after the last ring loop: warpgroup 0 takes the turn warpgroup 1 gave last, so
                 that no barrier is left half-arrived

Each turn is a named barrier per warpgroup (PTX ISA, bar.sync / bar.arrive, both warpgroups'
threads counted: the owner syncs, the other arrives). Every iteration takes and gives once in
both warpgroups, which run the same loops, so the arrivals balance across loops. A loop whose
body needs a barrier of all computing warps (a staged tile, a cross-warp reduction) is left
alone: its warpgroups meet there anyway.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import scratch_bytes
from ..attrs import attr
from ..core import Kernel, Op, walk
from .dot_tiling import instr_of

WARPGROUP_WARPS = 4


def alternate_warpgroups(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    if not options.pingpong or not k.producer_warps or k.num_warps != 2 * WARPGROUP_WARPS:
        return k
    loops = [op for op in k.body.ops if op.kind == "for" and _takes_turns(op, target)]
    if not loops:
        return k
    for loop in loops:
        body = loop.body.ops
        dots = [i for i, op in enumerate(body) if op.kind == "dot"]
        body.insert(dots[-1] + 1, Op("turn", [], [], {"step": "give"}, loc=body[dots[-1]].loc))
        body.insert(dots[0], Op("turn", [], [], {"step": "take"}, loc=body[dots[0]].loc))
    first, last = k.body.ops.index(loops[0]), k.body.ops.index(loops[-1])
    k.body.ops.insert(last + 1, Op("turn", [], [], {"step": "finish"}, loc=loops[-1].loc))
    k.body.ops.insert(first, Op("turn", [], [], {"step": "start"}, loc=loops[0].loc))
    k.notes["pingpong"] = f"2 warpgroups take turns issuing their products in {len(loops)} loop(s)"
    return k


def _takes_turns(loop: Op, target: Target) -> bool:
    """A ring loop (its waits are a ring's) whose dots are warpgroup products split by rows
    between the warpgroups, with nothing in it that needs every computing warp at a barrier."""
    ops = list(walk(loop.body))
    dots = [op for op in loop.body.ops if op.kind == "dot"]
    return (any(op.kind == "wait_async" and attr(op, "ring") for op in ops) and bool(dots)
            and all(instr_of(target, d.attrs["instr"]).scope == "warpgroup" and d.attrs["warps_n"] == 1 for d in dots)
            and not any(op.kind in ("stage", "stage_into") or op.body is not None or (scratch_bytes(op) and op.kind != "atomic_add")
                        for op in ops))
