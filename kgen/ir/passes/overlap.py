"""Asynchronous dots: a matrix instruction that returns before its result is ready (Hopper's
wgmma: PTX ISA, "wgmma.wait_group") is waited for where its result is first needed, not where
it is issued, so that the work in between overlaps the tensor cores.

Written as one op, such a dot is issue, commit and `wait_group 0`: the warpgroup idles until
the product lands. This pass splits it into the dot (issue and commit) and a `dot_wait`
placed just before the first op that reads the dot's result; everything after the dot reads
the wait's result instead. The attention backward computes s^T = k q^T and dp^T = v do^T back
to back: with the waits deferred, dp^T runs while the exponentials of s^T are computed, and the
dv and dk products run while ds is formed and staged.

A wait goes no later than:
  - the first reader of the dot's result (the loop's `yield` included);
  - the next asynchronous dot whose accumulator ordinary instructions write (anything but a
    zero tile, which the dot's first step ignores, or a value only matrix instructions wrote):
    ptxas waits there itself (its note C7517: writes to accumulator registers while a matrix
    instruction is in flight), so the wait is written where it happens;
  - an op with a body (a nested loop: its own dots count their groups from zero);
  - a write to shared memory the dot may still be reading (a `stage` or `copy_async` into the
    same buffer; the other slot of a two-slot buffer is not the same memory: iteration n reads
    slot n % 2 and copies into slot (n + 1) % 2, passes/async_copy.py).

`pending` of a wait counts the dots issued after its own dot before it: commit groups complete
in order, so `wait_group pending` leaves exactly those in flight. The wait's operands are the
dot's result, its register A operand (its registers must not be reused while the instruction
reads them) and its shared operands (they stay live, for plan_shared_memory and the barriers,
until the wait).
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import is_lone_zero, producers
from ..core import Block, Kernel, Op, Value, blocks, rename_operands, use_counts
from .dot_issue import is_async_dot

WRITES_SHARED = ("stage", "stage_into", "copy_async")


def overlap_async_dots(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    producer = producers(k.body)
    uses = use_counts(k.body)
    for block in list(blocks(k.body)):
        _defer_waits(block, target, producer, uses)
    return k


def _written_accumulator(dot: Op, producer: dict, uses: dict, before: dict[int, bool]) -> bool:
    """Whether ordinary instructions write the dot's accumulator registers while the dot being
    deferred may be in flight: not for a zero tile read only here (declared, never written:
    codegen's zero start), a loop-carried value (block argument), another dot's result, or a
    tile made in this block before the deferred dot was issued and read only here (`before`: op
    id -> True; passes/dot_issue.py moves starts there)."""
    if len(dot.operands) < 3:
        return False
    acc = dot.operands[2]
    op = producer.get(id(acc))
    if op is None or op.kind in ("dot", "dot_wait", "for"):
        return False
    if before.get(id(op)) and uses.get(id(acc)) == 1:  # read only here: the dot takes its registers
        return False
    return not is_lone_zero(op, acc, uses)


def _defer_waits(block: Block, target: Target, producer: dict, uses: dict) -> None:
    ops = block.ops
    dots = [i for i, op in enumerate(ops) if is_async_dot(op, target)]
    # a wait goes before op `at`, after the waits already there (`seq` orders them); dots are
    # taken last to first, so that every later dot's wait is placed when an earlier one looks
    # whether such a wait already completes it
    placed: list[tuple[int, int, int, Op]] = []  # (at, seq, pending, wait)
    for i in reversed(dots):
        dot = ops[i]
        res = dot.result
        shared = [v for v in dot.operands[:2] if v.place == "shared"]
        before = {id(op): True for op in ops[:i]}
        at = next((j for j in range(i + 1, len(ops)) if _must_wait(ops[j], res, shared, producer)
                   or (is_async_dot(ops[j], target) and _written_accumulator(ops[j], producer, uses, before))), len(ops))
        seq, pending = 0, _issued(dots, i, at)
        # commit groups complete in order: a later dot's `wait_group n` with at least n dots
        # issued after this one completes this one too; its registers are free from there
        # (the same wait again, which returns at once, then pins them)
        for w_at, w_seq, w_pending, _ in sorted(placed, key=lambda w: (w[0], w[1])):
            if i < w_at < at and _issued(dots, i, w_at) >= w_pending:
                at, seq, pending = w_at, w_seq + 1, w_pending
                break
        done = Value(res.shape, res.dtype, place=res.place, layout=res.layout)
        regs_a = [dot.operands[0]] if dot.operands[0].place == "reg" else []
        wait = Op("dot_wait", [res, *regs_a, *shared], [done], {"pending": pending}, loc=dot.loc)
        dot.attrs["deferred"] = True
        placed.append((at, seq, pending, wait))
        for op in ops[at:]:
            rename_operands(op, {id(res): done})
    for at, _, _, wait in sorted(placed, key=lambda w: (-w[0], -w[1])):
        ops.insert(at, wait)


def _issued(dots: list[int], i: int, at: int) -> int:
    """Asynchronous dots issued after op i and before op `at`."""
    return sum(1 for j in dots if i < j < at)


def _must_wait(op: Op, res: Value, shared: list[Value], producer: dict) -> bool:
    if op.kind == "yield" or op.body is not None or res in op.operands:
        return True
    if op.kind in WRITES_SHARED:
        dst = op.result if op.kind == "stage" else op.operands[0]
        return any(_may_alias(dst, v, producer) for v in shared)
    return False


def _root(v: Value, producer: dict) -> Value:
    op = producer.get(id(v))
    while op is not None and op.kind in ("slot", "view_shared"):
        v = op.operands[0]
        op = producer.get(id(v))
    return v


def _may_alias(a: Value, b: Value, producer: dict) -> bool:
    """Whether two shared views may share bytes: views of different buffers never do (live
    buffers get disjoint offsets); two slots of a two-slot buffer whose counts differ by one
    never do; anything else of one buffer may."""
    if _root(a, producer) is not _root(b, producer):
        return False
    sa, sb = producer.get(id(a)), producer.get(id(b))
    if sa is None or sb is None or sa.kind != "slot" or sb.kind != "slot" or sa.attrs["slots"] != 2:
        return True
    return not (_next_of(sa.operands[1], sb.operands[1], producer) or _next_of(sb.operands[1], sa.operands[1], producer))


def _next_of(n: Value, m: Value, producer: dict) -> bool:
    """n is m + 1 (a constant one)."""
    op = producer.get(id(n))
    if op is None or op.kind != "binary" or op.attrs["fn"] != "add" or m not in op.operands:
        return False
    other = op.operands[1] if op.operands[0] is m else op.operands[0]
    one = producer.get(id(other))
    return one is not None and one.kind == "const" and one.attrs["value"] == 1
