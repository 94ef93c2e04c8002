"""Register loads of a loop body that are too large to prefetch in registers go through shared
memory, copied a whole iteration ahead.

A loop body that loads a row into registers and computes with it right away waits for global
memory every iteration. prefetch_loads issues such a load one iteration early into registers,
but only for tiles of a few registers per thread: attention's backward reads a 64-float row of
lse and of delta per query block, 16 registers per thread in a wgmma accumulator's column
layout, and its D=128 dkdv has no 32 registers to spare (docs/PERFORMANCE.md). The load's
latency then sat in front of every iteration's first product (Nsight Compute: long-scoreboard
stalls, the kernel's largest). FlashAttention-3 copies these rows into shared memory with the
tiles they go with.

Where the target copies global memory to shared memory asynchronously (`cp.async`), such a load
becomes `stage(load)` and a `read_shared` of the staged buffer into the load's layout, at the
load's place: use_async_copies then makes the stage an asynchronous copy, pipelined one
iteration ahead into two slots as it does for dot operands (or `row_load_slots` - 1 iterations
ahead into that many), and the read costs one shared load per element instead of a global one.
The registers are live exactly as before; the buffer costs its slots of the row's bytes.
Where every element a thread holds lies in a 16-byte chunk the same thread copies (a row op's
blocked layout: 8 consecutive bf16 columns a thread, threads along the row), the copy, its wait
and its read are `private`: a thread's cp.async.wait_group makes its own copies visible to it,
so no block barrier follows the wait or precedes the copy that reuses the slot
(passes/barriers.py). A row read by other threads than copied it (attention's lse in a wgmma
accumulator's column layout) keeps them.

A load qualifies when it is not staged for a dot already (use_async_copies copies those), when
prefetch_loads would not take it (more registers per thread than its
tile budget), it sits directly in a loop body with an index the loop can recompute for another
iteration (async_copy.index_chain), its tensor is not written by the kernel, its tile is one or
two dims with the tensor's last dim contiguous and whole 16-byte chunks, and it reads zeros out
of bounds; and when its two slots leave the kernel within the descriptor's shared memory per
block and holding as many blocks per multiprocessor (the passes up to plan_shared_memory run on
a copy of the kernel).

It runs where the spec asks (the kernel's `shared_row_loads`), else with
CompileOptions.shared_row_loads, off by default: on the H200 the attention
backward at head_dim 64 (whose rows are read after the scores' dot, their latency already
behind it) and the chunked scan ran 1-3% slower with it, each copy adding a wait and a barrier
to the loop; at head_dim 128, where lse is the scores' start, the copies' addresses make the
dkdv kernel spill and the build drops them (docs/PERFORMANCE.md). A producer warpgroup that
issues the copies would take them off the computing warps' registers.
"""
from __future__ import annotations

import copy

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import index_chain, read_only
from ..attrs import attr
from ..core import ELEM_BYTES, WRITES, Kernel, Op, Value, walk
from .async_copy import CHUNK_BYTES
from .prefetch import prefetch_budget


def copy_row_loads(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    asked = k.shared_row_loads  # the spec's choice for this kernel, else the options'
    if not (options.shared_row_loads if asked is None else asked) or "cp.async" not in target.async_copy:
        return k
    # one at a time, kept where the kernel still fits and, unless the spec asked for the copies,
    # holds as many blocks per multiprocessor as before once the later passes have made their
    # slots and scratch (a spec that asks, as the row ops' tunables do, has its forms timed)
    candidates = _candidates(k)
    if not candidates:
        return k
    base = _shared_after_copies(k, target, options)
    blocks_now = target.lds_bytes_per_cu // max(base, 1)
    chosen: list[int] = []
    for at in candidates:
        trial = copy.deepcopy(k)
        _apply(trial, chosen + [at], target.wave_size)
        need = _shared_after_copies(trial, target, options)
        if need <= target.lds_bytes_per_block and (asked or target.lds_bytes_per_cu // need >= blocks_now):
            chosen.append(at)
    _apply(k, chosen, target.wave_size)
    return k


def _shared_after_copies(k: Kernel, target: Target, options: CompileOptions) -> int:
    """The block's shared bytes once the passes from use_async_copies on have added their slots,
    rings and scratch (kgen/ir/pipeline.py `planned_shared_bytes`)."""
    from ..pipeline import planned_shared_bytes  # the pass list imports this pass

    return planned_shared_bytes(k, target, options, "use_async_copies")


def _candidates(k: Kernel) -> list[int]:
    """Walk positions of the loads this pass may copy (_qualifies), loop by loop."""
    tile_budget, _ = prefetch_budget(k)
    written = {op.attrs["tensor"] for op in walk(k.body) if op.kind in WRITES}
    order = {id(op): i for i, op in enumerate(walk(k.body))}
    out = []
    for loop in [op for op in walk(k.body) if op.kind == "for"]:
        body = loop.body
        iv = body.args[0]
        inside = {id(v) for v in body.args} | {id(r) for op in walk(body) for r in op.results}
        staged = {id(op.operands[0]) for op in walk(body) if op.kind == "stage"}  # use_async_copies' own
        for load in [op for op in body.ops if op.kind == "load" and id(op.result) not in staged]:
            chain = index_chain(load.operands, body, iv, inside, read_only(k))
            if _qualifies(load, written, tile_budget) and chain is not None and _varies(load, chain, iv):
                out.append(order[id(load)])
    return out


def _varies(load: Op, chain: list[Op], iv: Value) -> bool:
    """Whether the load's index depends on the induction variable: a load of the same tile every
    iteration (a row op's weights) gains nothing from a copy an iteration ahead."""
    return any(v is iv for op in (load, *chain) for v in op.operands)


def _apply(k: Kernel, positions: list[int], wave: int) -> None:
    ops = list(walk(k.body))
    where = {id(op): loop.body for loop in ops if loop.kind == "for" for op in loop.body.ops}
    for load in [ops[at] for at in positions]:
        _through_shared(load, where[id(load)], k.row_load_slots, _copied_by_its_reader(load.result, k, wave))
        k.notes.setdefault("row_loads", []).append(
            f"{load.attrs['tensor']} {'x'.join(map(str, load.result.shape))}: copied an iteration ahead into shared memory")


def _qualifies(load: Op, written: set[str], tile_budget: int) -> bool:
    v = load.result
    if v.is_scalar or attr(load, "pred") or attr(load, "other") != 0 or load.attrs["tensor"] in written:
        return False
    if v.layout.nregs <= tile_budget:  # prefetch_loads holds it in registers instead
        return False
    index = load.attrs["index"]
    tile = [e for e in index if e[0] != "at"]
    return (len(tile) in (1, 2) and index[-1][0] != "at" and len(v.shape) == len(tile)
            and (v.shape[-1] * ELEM_BYTES[v.dtype]) % CHUNK_BYTES == 0)


def _copied_by_its_reader(v: Value, k: Kernel, wave: int) -> bool:
    """Whether every element of tile `v` that a thread holds lies in a 16-byte chunk the same
    thread copies: the copy gives thread t chunks t, t + threads, ... of the row-major tile
    (kgen/codegen/emit.py op_copy_async). Then no thread reads what another copied, and a thread
    sees its own copies once its wait_group returns (PTX ISA, cp.async.wait_group): the copy
    needs no block barrier after its wait, nor before the copy that reuses the slot (its last
    reads were the same thread's, an iteration earlier)."""
    lay = v.layout
    threads = k.num_warps * wave
    if lay.nlanes != wave or lay.nwarps != k.num_warps:
        return False
    vec = CHUNK_BYTES // ELEM_BYTES[v.dtype]
    per_row = v.shape[-1] // vec
    for c, held in lay.owners().items():
        row, col = (0, c[0]) if len(c) == 1 else c
        if any((row * per_row + col // vec) % threads != lane + w * wave for _, lane, w in held):
            return False
    return True


def _through_shared(load: Op, body, slots: int, private: bool) -> None:
    """load -> stage(load) and read_shared, the readers reading the read's value; the buffer
    asks use_async_copies for `slots` slots (the kernel's row_load_slots). `private`: each
    thread reads back only what it copied (_copied_by_its_reader)."""
    v = load.result
    rows, cols = (1, v.shape[0]) if len(v.shape) == 1 else v.shape
    buf = Value(v.shape, v.dtype, place="shared")
    stage = Op("stage", [v], [buf], {"role": "row", "inner": 1, "rows": rows, "ld": cols,
                                     "bytes": rows * cols * ELEM_BYTES[v.dtype], "smem_layout": "rows",
                                     "slots_asked": slots, "private": private}, loc=load.loc)
    out = Value(v.shape, v.dtype, place="reg", layout=v.layout)
    read = Op("read_shared", [buf], [out], {"private": private}, loc=load.loc)
    for op in walk(body):
        op.operands = [out if x is v else x for x in op.operands]
    at = body.ops.index(load)
    body.ops[at + 1:at + 1] = [stage, read]
