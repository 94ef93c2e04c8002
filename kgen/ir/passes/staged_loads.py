"""Staged loads of a loop pipelined through registers: the next iteration's tile loaded while
this one computes, then written into the other slot of a two-slot buffer.

Where a target has no copy from global to shared memory that bypasses registers (gfx942: its
LDS DMA moves 4 bytes per lane into consecutive dwords, which padded and swizzled buffers are
not; CDNA3 ISA, "buffer_load ... lds"), or where use_async_copies left a staged load in place
(a tile whose stage transposes it, as the MFMA reads V of attention's P @ V), the loop body
loads a tile, waits for it, writes it to shared memory and waits at a barrier before the dot
reads it: the load's whole latency is exposed every iteration. As the hand-written MI300X
kernels (HipKittens' 8-wave ping-pong, Composable Kernel's pipelines) and Triton's AMD stream
pipeliner do instead, a `stage(load)` in a loop becomes:

  before the loop   the first iteration's tile loaded (predicated on the loop running) and
                    written into slot 0 of a buffer allocated there (`alloc_shared`, `stage_into`)
  in the body       the next iteration's tile loaded where this iteration's was (predicated on
                    there being one, `load ... pred`); the readers read slot n % 2 (`slot`);
                    after the body's last op the loaded tile is written into slot (n + 1) % 2
                    (`stage_into ... ahead`), behind the compute that hid the load's latency

The `ahead` write needs no barrier before it: the slot it overwrites was last read in the
previous iteration, before the barrier that published that iteration's own write
(merge_stage_barriers puts one after the body's last write, which is this one), so one barrier
per iteration serves all of a loop's pipelined buffers. Where the second slot does not fit,
the buffer keeps one slot: the write then waits for this iteration's reads behind a barrier,
but the load still has the iteration's compute to arrive in.

Each buffer lives across the whole loop, so the planner can no longer place another buffer
over it between its reads. Whether a plan fits is asked of the planner's placement
(kgen.ir.placement) on a copy of the kernel, two slots first, then one, then none: it must fit
the descriptor's per-block limit and leave as many blocks per CU as shared memory allowed
before, since on a GPU without a copy engine the other resident blocks are what hides latency
(Triton's AMD stream pipeliner likewise keeps one shared buffer by default, num_stages - 1). The tile's registers stay live
from the load to the end of the body, as prefetch_loads' do; a kernel that spills with this is
retried without it (kgen.build.spill_retry_options, `CompileOptions.register_pipeline`).

Left alone, as in prefetch_loads: loads of a tensor the kernel also writes, loads whose index
is not recomputable for another iteration (analysis.index_chain), and stages in nested loops'
bodies that are not at the top level of their own loop.
"""
from __future__ import annotations

import copy

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import index_chain, read_only, recompute_chain
from ..core import WRITES, Block, Kernel, Op, Value, blocks, predicated_load, slot_view, use_counts, walk
from ..placement import planned_bytes

SLOTS = 2


def pipeline_staged_loads(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    if not options.register_pipeline:
        return k
    written = {op.attrs["tensor"] for op in walk(k.body) if op.kind in WRITES}
    blocks_now = _blocks_per_cu(planned_bytes(k), target)
    chosen: list[tuple[int, int]] = []  # (the stage's position in walk order, slots)
    for at in _candidates(k, written):
        for slots in (SLOTS, 1):
            trial = copy.deepcopy(k)
            _apply(trial, chosen + [(at, slots)])
            need = planned_bytes(trial)
            if need <= target.lds_bytes_per_block and _blocks_per_cu(need, target) >= blocks_now:
                chosen.append((at, slots))
                break
    _apply(k, chosen)
    return k


def _blocks_per_cu(shared: int, target: Target) -> int:
    """Blocks one CU (SM) can hold as far as shared memory goes."""
    return target.lds_bytes_per_cu // max(shared, 1)


def _candidates(k: Kernel, written: set[str]) -> list[int]:
    """Walk positions of the stages this pass can pipeline: at the top level of a loop body, of
    a load there that nothing else reads, of a tensor the kernel does not write, indexed by
    arithmetic recomputable for the next iteration."""
    order = {id(op): i for i, op in enumerate(walk(k.body))}
    uses = use_counts(k.body)
    reads = frozenset(k.tensors) - written  # the tensors a recomputed index may read (analysis.read_only)
    out = []
    for loop in [op for op in walk(k.body) if op.kind == "for"]:
        body = loop.body
        iv = body.args[0]
        inside = {id(v) for v in body.args} | {id(r) for op in walk(body) for r in op.results}
        loads = {id(op.result): op for op in body.ops if op.kind == "load"}
        for st in [op for op in body.ops if op.kind == "stage"]:
            load = loads.get(id(st.operands[0]))
            if (load is None or uses.get(id(load.result)) != 1 or load.attrs["tensor"] in written
                    or load.attrs.get("pred") or index_chain(load.operands, body, iv, inside, reads) is None):
                continue
            out.append(order[id(st)])
    return out


def _apply(k: Kernel, plans: list[tuple[int, int]]) -> None:
    ops = list(walk(k.body))
    stages = [(ops[at], slots) for at, slots in plans]
    where = {id(op): (loop, parent) for parent in blocks(k.body) for loop in parent.ops if loop.kind == "for"
             for op in loop.body.ops}
    reads = read_only(k)
    for st, slots in stages:
        loop, parent = where[id(st)]
        load = next(op for op in loop.body.ops if op.kind == "load" and op.result is st.operands[0])
        k.notes.setdefault("staged_loads", []).append(
            f"{load.attrs['tensor']} {'x'.join(map(str, load.result.shape))}: loaded an iteration ahead into "
            + ("the other of 2 slots" if slots > 1 else "registers, 1 slot"))
        _pipeline(st, loop, parent, slots, reads)


def _pipeline(st: Op, loop: Op, parent: Block, slots: int, reads: frozenset[str]) -> None:
    body = loop.body
    iv = body.args[0]
    start, stop, step = loop.operands[:3]
    inside = {id(v) for v in body.args} | {id(r) for op in walk(body) for r in op.results}
    load = next(op for op in body.ops if op.kind == "load" and op.result is st.operands[0])
    chain = index_chain(load.operands, body, iv, inside, reads)
    buf = st.result
    layout = {a: st.attrs[a] for a in ("role", "inner", "rows", "ld", "smem_layout") if a in st.attrs}
    alloc = Op("alloc_shared", [], [buf], {**layout, "bytes": st.attrs["bytes"] * slots, "slots": slots,
                                           "slot_bytes": st.attrs["bytes"]}, loc=st.loc)
    go = Value((), "bool")
    prologue = [Op("binary", [start, stop], [go], {"fn": "lt"}, loc=loop.loc), alloc]
    ops, operands = recompute_chain(chain, iv, start, load.operands)
    prologue += ops + [predicated_load(load, operands, go)]
    first_tile = prologue[-1].result
    nxt, more = Value((), "int32"), Value((), "bool")
    ahead = [Op("binary", [iv, step], [nxt], {"fn": "add"}, loc=load.loc),
             Op("binary", [nxt, stop], [more], {"fn": "lt"}, loc=load.loc)]
    ops, operands = recompute_chain(chain, iv, nxt, load.operands)
    ahead += ops + [predicated_load(load, operands, more)]
    next_tile = ahead[-1].result
    at = body.ops.index(load)
    body.ops[at:at + 1] = ahead
    body.ops.remove(st)
    if slots == 1:
        prologue.append(_stage_into(buf, first_tile, layout, st))
        body.ops.insert(len(body.ops) - 1, _stage_into(buf, next_tile, layout, st))
    else:
        zero = Value((), "int32")
        prologue.append(Op("const", [], [zero], {"value": 0}, loc=loop.loc))
        first_slot = slot_view(buf, zero, alloc, loop)
        prologue += [first_slot, _stage_into(first_slot.result, first_tile, layout, st)]
        off, count, one, count_next = (Value((), "int32") for _ in range(4))
        counters = [Op("binary", [iv, start], [off], {"fn": "sub"}, loc=loop.loc),
                    Op("binary", [off, step], [count], {"fn": "floordiv"}, loc=loop.loc),
                    Op("const", [], [one], {"value": 1}, loc=loop.loc),
                    Op("binary", [count, one], [count_next], {"fn": "add"}, loc=loop.loc)]
        cur = slot_view(buf, count, alloc, loop)
        for op in walk(body):  # this iteration reads slot n
            op.operands = [cur.result if v is buf else v for v in op.operands]
        body.ops[0:0] = counters + [cur]
        dst = slot_view(buf, count_next, alloc, loop)
        body.ops[len(body.ops) - 1:len(body.ops) - 1] = [dst, _stage_into(dst.result, next_tile, layout, st, ahead=True)]
    at = parent.ops.index(loop)
    parent.ops[at:at] = prologue


def _stage_into(dst: Value, src: Value, layout: dict, st: Op, ahead: bool = False) -> Op:
    return Op("stage_into", [dst, src], [], {**layout, "ahead": ahead}, loc=st.loc)
