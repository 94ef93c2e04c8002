"""Register loads in loops issued one iteration ahead.

A loop body that loads a small tile into registers (a row of a cumulative sum, a block of
scales) and computes with it right away waits for global memory every iteration: the loads the
chunked scan's loops make this way left its kernels latency-bound on the H200 (eighth session:
one or two programs per multiprocessor, each a chain of load, product and exp). Where the load's
index operands are the induction variable, values defined before the loop, or pure scalar
arithmetic of those (async_copy.index_chain), the load for the next iteration is issued where
this iteration's was, into a loop-carried value, and this iteration reads the value the previous
one loaded (the first iteration's is loaded before the loop). The loaded value then has a
whole iteration to arrive, as cp.async copies do for staged tiles (use_async_copies), at the
price of a second copy of its registers. A load whose index does not depend on the induction
variable (a row's weights, the same block every iteration) is loaded once before the loop
instead: one copy of its registers, no load in the body.

Each such load carries a predicate: the next iteration's load is skipped when there is none
(and the first when the loop runs zero times), since a scalar index computed for an iteration
that does not exist may lie outside its tensor (only block indices are bounds-tested). A skipped
load gives `other` and touches no memory.

It runs only in kernels whose spec asks for it (`prefetch_loads`: true, a budget, or an expression
of the tunables giving one, so that `kgen tune` times it). On the H200 (ninth
session, per-kernel profile of the chunked scan at g=1, b=4, S=4k) it took chunk_scan from 0.566
to 0.524 ms and chunk_state from 0.339 to 0.31, but dc from 0.70 to 0.96, db from 0.61 to 0.90
and dx from 1.16 to 1.31: in those (255 and 140 registers, 8 warps, one program per
multiprocessor) the extra live values cost more than the latency they hide. Which way it goes
depends on the kernel, as Triton's num_stages does, so the spec chooses.

Left alone: loads of a tensor the kernel also writes (the next iteration's read could overtake
this iteration's write), loads inside nested loops (their own loop handles them), and tiles of
more than MAX_TILE_REGS elements per thread or beyond MAX_LOOP_REGS per loop, so that the extra
live registers stay small beside the accumulators (numbers below).
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import WRITES, Block, Kernel, Op, Value, blocks, predicated_load, walk
from ..analysis import index_chain, recompute_chain
from ..attrs import attr

# elements per thread of one prefetched tile, and of all of one loop's: a cumulative-sum row
# fits; a 64x64 fp32 block over 8 warps (16) does not. At 16 per tile the attention backward's
# lse and delta rows were prefetched too and its D=128 dkdv (255 registers) spilled.
MAX_TILE_REGS = 8
MAX_LOOP_REGS = 16


def prefetch_budget(k: Kernel) -> tuple[int, int]:
    """Registers per thread of one prefetched tile and of one loop's: none where the spec does
    not ask for prefetching; true: the default limits; an integer: the spec's budget for both (a
    kernel whose registers have room, whose loop waits on a larger tile: dx's 32x64 fp32 CB
    block)."""
    if k.prefetch_loads is False:
        return 0, 0
    return (MAX_TILE_REGS, MAX_LOOP_REGS) if k.prefetch_loads is True else (k.prefetch_loads,) * 2


def prefetch_loads(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    if k.prefetch_loads is False:
        return k
    tile, loop_regs = prefetch_budget(k)
    written = {op.attrs["tensor"] for op in walk(k.body) if op.kind in WRITES}
    for loop, parent in [(op, b) for b in list(blocks(k.body)) for op in b.ops if op.kind == "for"]:
        _prefetch(loop, parent, written, tile, loop_regs, frozenset(k.tensors) - written)
    return k


def _prefetch(loop: Op, parent: Block, written: set[str], tile: int, budget: int, reads: frozenset[str]) -> None:
    body = loop.body
    iv = body.args[0]
    start, stop, step = loop.operands[:3]
    inside = {id(v) for v in body.args} | {id(r) for op in walk(body) for r in op.results}
    plans = []
    for load in [op for op in body.ops if op.kind == "load" and not attr(op, "pred")]:
        regs = 1 if load.result.is_scalar else load.result.layout.nregs
        if load.attrs["tensor"] in written or regs > tile or regs > budget:
            continue
        chain = index_chain(load.operands, body, iv, inside, reads)
        if chain is None:
            continue
        budget -= regs
        plans.append((load, chain))
    if not plans:
        return
    go = Value((), "bool")
    prologue = [Op("binary", [start, stop], [go], {"fn": "lt"}, loc=loop.loc)]
    yield_op = body.ops[-1]
    for load, chain in plans:
        ops, operands = recompute_chain(chain, iv, start, load.operands)
        prologue += ops + [predicated_load(load, operands, go)]
        init = prologue[-1].result
        if all(v is not iv for op in [*chain, load] for v in op.operands):
            # the same block every iteration: loaded once before the loop, one copy of its
            # registers instead of the two a value carried around the loop takes
            for op in walk(body):
                op.operands = [init if v is load.result else v for v in op.operands]
            body.ops.remove(load)
            continue
        cur = _like(load.result)
        body.args.append(cur)
        loop.operands.append(init)
        loop.results.append(_like(load.result))
        for op in walk(body):  # this iteration reads what the previous one loaded
            op.operands = [cur if v is load.result else v for v in op.operands]
        nxt, more = Value((), "int32"), Value((), "bool")
        ahead = [Op("binary", [iv, step], [nxt], {"fn": "add"}, loc=load.loc),
                 Op("binary", [nxt, stop], [more], {"fn": "lt"}, loc=load.loc)]
        ops, operands = recompute_chain(chain, iv, nxt, load.operands)
        ahead += ops + [predicated_load(load, operands, more)]
        at = body.ops.index(load)
        body.ops[at:at + 1] = ahead
        yield_op.operands.append(ahead[-1].result)
    at = parent.ops.index(loop)
    parent.ops[at:at] = prologue


def _like(v: Value) -> Value:
    return Value(v.shape, v.dtype, place=v.place, layout=v.layout)

