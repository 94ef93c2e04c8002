"""Sums a loop carries kept in shared memory instead of registers, each thread's elements its own.

A row op's backward adds each row's share of a column sum (layernorm's dw and db, rmsnorm's dw)
into a tile its loop over rows carries: at 16384-wide rows over 16 warps that is 32 fp32
registers a thread per sum, beside the row itself, and the spec splits the row across programs
(SPLIT) to fit them, reading the row again for its row sums (docs/PERFORMANCE.md, session 36:
layernorm's backward at 8192x14336 reads each row 1.5 times and moves 41% of a copy's bytes a
second). Where the kernel asks (its `shared_accumulators`), a carried fp32 tile whose next value
is its sum with another tile lives in shared memory instead: written before the loop, read
and written back around its add in each iteration, read once after the loop.

The buffer is laid out by thread and register (smem_layout `threads`): register e of thread t at
element (e // V) * T * V + t * V + e % V, T the block's threads and V the registers of one
16-byte vector. Each thread reads back only what it wrote, so no access in the loop waits at a
barrier (merge_stage_barriers skips the `private` ones); a warp's vectors are consecutive (no
bank conflicts); the buffer holds each register of every thread, copies of a replicated
layout included. The write before the loop and the read after it are ordinary stages and
reads: the buffer's space may have been another's before it and may be another's after it.

A kernel that asks and whose sums do not fit the descriptor's shared memory per block does not
fit (plan_shared_memory), so a tunable that asks is timed only where it can be built.
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Block, Kernel, Op, Value, blocks, rename_operands, use_counts


def keep_sums_in_shared(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    if not k.shared_accumulators:
        return k
    threads = k.num_warps * target.wave_size
    for parent in list(blocks(k.body)):
        for loop in [op for op in parent.ops if op.kind == "for"]:
            for i in reversed(_sums(loop)):
                _to_shared(k, parent, loop, i, threads)
    return k


def _sums(loop: Op) -> list[int]:
    """Which carried values (by position) are fp32 tiles whose yielded value is their sum with
    another value, computed at the top level of the body, where the add is their only reader."""
    body = loop.body
    uses = use_counts(body)
    made = {id(r): op for op in body.ops for r in op.results}
    out = []
    for i, (arg, nxt) in enumerate(zip(body.args[1:], body.ops[-1].operands)):
        add = made.get(id(nxt))
        if (arg.dtype == "fp32" and not arg.is_scalar and arg.layout is not None and uses.get(id(arg)) == 1
                and add is not None and add.kind == "binary" and add.attrs["fn"] == "add"
                and any(v is arg for v in add.operands) and uses.get(id(nxt)) == 1):
            out.append(i)
    return out


def _to_shared(k: Kernel, parent: Block, loop: Op, i: int, threads: int) -> None:
    body = loop.body
    arg, init, result = body.args[1 + i], loop.operands[3 + i], loop.results[i]
    nxt = body.ops[-1].operands[i]
    add = next(op for op in body.ops if any(r is nxt for r in op.results))
    nbytes = arg.layout.nregs * threads * 4  # every register of every thread, fp32
    attrs = {"role": "sum", "inner": len(arg.shape) - 1, "rows": 1, "ld": nbytes // 4, "smem_layout": "threads"}
    buf = Value(arg.shape, "fp32", name=f"{arg.name}_shared" if arg.name else "", place="shared")
    alloc = Op("alloc_shared", [], [buf], {**attrs, "bytes": nbytes, "slots": 1, "slot_bytes": nbytes}, loc=loop.loc)
    first = Op("stage_into", [buf, init], [], dict(attrs), loc=loop.loc)
    # in the body: read before the add, written back after it
    cur = Value(arg.shape, "fp32", name=arg.name, layout=arg.layout)
    read = Op("read_shared", [buf], [cur], {"private": True}, loc=add.loc)
    add.operands = [cur if v is arg else v for v in add.operands]
    write = Op("stage_into", [buf, add.result], [], {**attrs, "private": True}, loc=add.loc)
    at = body.ops.index(add)
    body.ops[at:at + 1] = [read, add, write]
    # the loop carries it no more
    loop.operands.pop(3 + i)
    body.args.pop(1 + i)
    body.ops[-1].operands.pop(i)
    loop.results.pop(i)
    final = Value(result.shape, "fp32", name=result.name, layout=result.layout)
    after = Op("read_shared", [buf], [final], {}, loc=loop.loc)
    at = parent.ops.index(loop)
    for later in parent.ops[at + 1:]:
        rename_operands(later, {id(result): final})
    parent.ops[at:at + 1] = [alloc, first, loop, after]
    k.notes.setdefault("shared_sums", []).append(
        f"{arg.name or 'sum'} {'x'.join(map(str, arg.shape))}: carried in shared memory, {nbytes} bytes")
