"""Tensor copies (TMA, sm_90): the tensor maps a kernel takes and the context of each copy.

A copy marked `tma` (kgen.ir.passes.async_copy) reads a box of its tensor through a tensor map,
a 128-byte descriptor the host encodes before the launch (cuTensorMapEncodeTiled: the tensor's
address, dims and byte strides, the box, the 128-byte swizzle) and passes as a
`__grid_constant__` kernel parameter. Dims are listed innermost first, as the driver and the
PTX coordinates want them (CUDA driver API, "Tensor Map Object Management"; PTX ISA,
"cp.async.bulk.tensor"). With the 128-byte swizzle a box spans at most 128 bytes of its inner
dim, so a tile row of 256 bytes is two boxes, one per column panel of the buffer (the panels of
the `sw128` layout, kgen.codegen.coords.shared_slot).
"""
from __future__ import annotations

from ..ir.core import ELEM_BYTES, Kernel, Op, walk
from .cexpr import add, mod, sym
from .coords import shared_slot
from ..ir.attrs import attr

PANEL_BYTES = 128  # the swizzle's row: a box's inner extent


def box_of(op: Op) -> tuple[int, ...]:
    """The box of a tensor copy, innermost dim first: the panel's columns, the rows, 1 per
    scalar index."""
    elem = ELEM_BYTES[op.operands[0].dtype]
    box = []
    for d, entry in enumerate(op.attrs["index"]):
        if d == len(op.attrs["index"]) - 1:
            box.append(PANEL_BYTES // elem)
        else:
            box.append(1 if entry[0] == "at" else entry[-1])
    return tuple(reversed(box))


def tensor_maps(k: Kernel) -> list[tuple[str, tuple[int, ...]]]:
    """(tensor, box) of each tensor map the kernel takes, in order of first use."""
    out: list[tuple[str, tuple[int, ...]]] = []
    for op in walk(k.body):
        if op.kind == "copy_async" and attr(op, "tma"):
            key = (op.attrs["tensor"], box_of(op))
            if key not in out:
                out.append(key)
    return out


def map_param(i: int, tensor: str) -> str:
    return f"tmap{i}_{tensor}"


def copy_ctx(emitter, op: Op, name_of) -> dict:
    """What the tma_copy macro needs: the barrier, the bytes it expects, and per column panel
    the destination slot and the coordinates (innermost first)."""
    k = emitter.k
    buf = op.operands[0]
    alloc = emitter.stage_of(buf)
    elem = ELEM_BYTES[buf.dtype]
    rows, cols = op.attrs["shape"]
    box = box_of(op)
    i = tensor_maps(k).index((op.attrs["tensor"], box))
    coords = []
    for entry in op.attrs["index"]:
        if entry[0] == "at":
            coords.append(name_of(op.operands[entry[1]]))
        elif entry[0] == "block":
            coords.append(f"{name_of(op.operands[entry[1]])} * {entry[2]}")
        else:
            coords.append("0")
    panel = PANEL_BYTES // elem
    pred = name_of(op.operands[-1]) if op.attrs["pred"] else "true"
    boxes = []
    for p in range(cols // panel):
        c = list(coords)
        c[-1] = str(p * panel)
        boxes.append({"slot": str(shared_slot(alloc.attrs, 0, p * panel, elem)), "coords": list(reversed(c))})
    return {"macro": "tma_copy", "tensor": op.attrs["tensor"], "box": list(box), "elem": elem,
            "dst": name_of(buf), "map": map_param(i, op.attrs["tensor"]), "rank": len(coords),
            "bar": barrier(emitter, buf, name_of), "bytes": rows * cols * elem, "boxes": boxes,
            "pred": pred, "guard": _issue_guard(pred, emitter.in_producer),
            "sync_before": attr(op, "sync_before")}


def _issue_guard(pred: str, in_producer: bool) -> str:
    """When the copy is issued: by thread 0 where its predicate holds; in a producer's program,
    which one thread runs already (producer_ctx), where the predicate holds."""
    if in_producer:
        return pred
    return f"({pred}) && kg::thread_id() == 0"


def barrier(emitter, buf, name_of) -> str:
    """The index of the mbarrier of the slot `buf` is (a slot view: its count mod slots)."""
    alloc = emitter.stage_of(buf)
    slot = emitter.producer.get(id(buf))
    return slot_barrier(alloc, name_of(slot.operands[1]) if slot is not None and slot.kind == "slot" else None)


def slot_barrier(alloc: Op, count: str | None) -> str:
    """The mbarrier of the slot iteration `count` uses (None: the buffer's only one)."""
    bar, slots = alloc.attrs["bar"], attr(alloc, "slots")
    return str(add(bar, mod(sym(count), slots))) if count is not None and slots > 1 else str(bar)


def wait_ctx(emitter, op: Op, name_of) -> dict:
    """The barrier a wait is for and the parity of the phase it waits for: in a pipelined loop,
    iteration n uses slot n % slots for the (n // slots)-th time in this run of the loop (each
    run starts every barrier at an even phase: reset_ctx); outside loops, once."""
    alloc = emitter.stage_of(op.operands[0])
    if len(op.operands) == 1:
        return {"macro": "tma_wait", "bar": slot_barrier(alloc, None), "parity": "0"}
    n = name_of(op.operands[1])
    return {"macro": "tma_wait", "bar": slot_barrier(alloc, n), "parity": f"({n} / {attr(alloc, 'slots')}) & 1"}


def reset_ctx(emitter, op: Op, name_of) -> dict:
    """After a pipelined loop of n iterations, slot s of a buffer completed ceil((n - s) / slots)
    phases; where that is odd, one more arrival (no bytes) completes a phase, so that the next
    run's first wait is for parity 0. Every thread has passed its last wait of the loop (a block
    barrier follows each wait), so none still waits for a phase this flips."""
    start, stop, step = (name_of(v) for v in op.operands[:3])
    flips = []
    for buf in op.operands[3:]:
        alloc = emitter.stage_of(buf)
        slots = attr(alloc, "slots")
        flips += [{"bar": alloc.attrs["bar"] + s, "uses": f"(n_ + {slots - 1 - s}) / {slots}"} for s in range(slots)]
    return {"macro": "tma_reset", "n": f"kg::cdiv(kg::max_({stop} - {start}, 0), {step})", "flips": flips}


def ring_ctx(emitter, op: Op, name_of) -> dict:
    """A ring slot's side (kgen.ir.passes.specialize): iteration n's slot is n % slots, its
    empty barrier `empty_bar` + that, used for the (n // slots)-th time. The producer (acquire)
    waits for the phase before that use, parity ((n // slots) & 1) ^ 1, which a fresh barrier
    reports complete; the consumers (release) arrive once per warp."""
    alloc = emitter.stage_of(op.operands[0])
    n, slots = name_of(op.operands[1]), attr(alloc, "slots")
    return {"macro": op.kind, "bar": str(add(alloc.attrs["empty_bar"], mod(sym(n), slots))),
            "parity": f"(({n} / {slots}) & 1) ^ 1"}


def producer_ctx(emitter, op: Op) -> dict:
    """The producer warpgroup's branch: its registers dropped, one thread running its program,
    the other warps done; the consumers' registers raised after it (PTX ISA, setmaxnreg)."""
    emitter.in_producer = True
    try:
        body = emitter.ops(op.body)
    finally:
        emitter.in_producer = False
    return {"macro": "producer", "first_warp": emitter.k.num_warps, "regs": op.attrs["regs"],
            "consumer_regs": op.attrs["consumer_regs"], "body": body}
