"""The tile IR: typed SSA values, a fixed vocabulary of ops, structured `for` regions.

Values are tiles (shape, dtype, place) or scalars (shape ()). An Op has operands, results,
attributes, an optional body (for `for`), and the spec location it came from, so that every
error and every block of generated source can point back at the user's YAML.

Op vocabulary (main attrs in brackets; kgen/ir/attrs.py declares every attribute of each kind,
its type and default, and the verifier holds each op to it):
  const [value]                    a compile-time scalar (int, float or bool)
  size [name]                      a runtime size of the spec (int32 kernel argument)
  scalar_arg [name]                a runtime scalar argument of the spec (fp32, int32 or int64, the result's dtype)
  program_id [axis]                the program's index along a grid axis
  arange [n]                       the 1D tile 0..n-1 (int32)
  full [shape, value]              a tile filled with one value
  unary [fn]                       exp, exp2, log, log2, sqrt, rsqrt, abs, neg, not, sigmoid, tanh, erf, sin, cos, floor, ceil
  binary [fn]                      add sub mul div floordiv mod max min lt le gt ge eq ne and or pow
  where                            where(cond, a, b)
  cast [dtype]                     dtype conversion
  expand [axis]                    insert a length-1 axis (x[:, None] is expand 1, x[None, :] is expand 0)
  broadcast [shape]                broadcast length-1 axes to a shape
  trans                            transpose a 2D tile
  reduce [fn, axis]                sum / max / min along an axis, removing it
  scan [fn, axis]                  inclusive prefix sum along an axis (cumsum), same shape
  dot [deferred]                   a @ b (+ c): 2D tiles, fp32 accumulation; `deferred`
                                   (overlap_async_dots): issued only, a dot_wait completes it
  dot_wait [pending]               (inserted by a pass) the result of an asynchronous dot
                                   (operand 0), once all but `pending` later dots are done
  load [tensor, index, pred]       read a tile of a global tensor; out-of-bounds reads give `other`;
                                   `pred` (prefetch_loads): the last operand is a bool, when false
                                   the load gives `other` and touches no memory
  store [tensor, index]            write a tile; out-of-bounds elements are skipped
  atomic_add [tensor, index]       fp32 add into a global tensor
  gather [tensor, index, other]    read one element per element of the index tiles (`index`
                                   entries ("tile", operand#) or ("at", operand#)); an index out
                                   of its dim gives `other`
  scatter [tensor, index, atomic]  write (or, atomic, fp32-add) operand 0 element by element at
                                   the index tiles' positions; out-of-range elements are skipped
  cdiv                             ceil-division of two ints (scalars)
  for                              body has block args (iv, carried...) and ends in `yield`
  yield                            the carried values of the next iteration
  stage [role]                     (inserted by a pass) a register tile copied to shared memory
  stage_into [ahead]               (inserted by a pass) register tile operand 1 written into the
                                   buffer (or slot) operand 0; `ahead`: into the slot the next
                                   iteration reads (passes/staged_loads.py)
  read_shared [private]            (inserted by a pass) a register tile read from the shared
                                   buffer (or slot) operand 0, in its own layout (passes/row_loads.py);
                                   `private`: what the thread wrote itself (passes/shared_sums.py)
  convert                          (inserted by a pass) a register tile moved to another layout
  view_shared                      (inserted by a pass) a staged buffer read as its transpose
  alloc_shared [slots]             (inserted by a pass) a shared buffer that copy_async fills
  slot [slots, slot_bytes]         (inserted by a pass) slot operand1 % slots of buffer operand0
  copy_async [tensor, index, pred] (inserted by a pass) global -> shared copy of a tile into
                                   operand 0 (the buffer), one commit group; `pred`: the last
                                   operand is a bool that enables the copy; `tma`: a tensor copy
                                   (one thread, an mbarrier in place of the group)
  wait_async [pending]             (inserted by a pass) wait for all but `pending` later groups
                                   (`tma`: for the copy's mbarrier; operand 1, if any, is the
                                   iteration count whose slot it waits for)
  tma_reset                        (inserted by a pass) after a loop of tensor copies: the
                                   mbarrier phases its iterations left (operands: the loop's
                                   bounds, then the buffers)
  producer [warps, regs, ...]      (inserted by a pass) a body that a warpgroup of its own runs
                                   instead of the rest of the kernel: the loops of tensor copies
                                   that feed the consumers' rings (passes/specialize.py)
  acquire                          (inserted by a pass) the producer waits until the consumers
                                   have given back the slot of iteration operand 1 of ring operand 0
  release                          (inserted by a pass) the consumers give that slot back
  turn [step]                      (inserted by a pass) two computing warpgroups take turns
                                   issuing their dots (passes/pingpong.py)

`index` of a load/store is a tuple with one entry per tensor dim: ("at", operand#), a scalar
index; ("block", operand#, size), the block [i*size, (i+1)*size); or ("all", size), the whole
(static) dim. Operand numbers refer to the op's operand list (after the stored value for store).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ..errors import SourceLoc
from ..layout import Layout

DTYPES = ("bf16", "fp16", "fp32", "int32", "int64", "bool")
FLOAT_DTYPES = ("bf16", "fp16", "fp32")
INT_DTYPES = ("int32", "int64")
ELEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "int32": 4, "int64": 8, "bool": 1}
WRITES = ("store", "atomic_add", "scatter")  # the ops that write a global tensor

_ids = itertools.count()


@dataclass(eq=False)
class Value:
    shape: tuple[int, ...]
    dtype: str
    name: str = ""
    place: str = "reg"  # reg | shared
    layout: Layout | None = None
    id: int = field(default_factory=lambda: next(_ids))
    cname: str = ""  # how generated source spells it (kgen.codegen.render.name_values)

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    def __repr__(self) -> str:
        return f"%{self.name or 'v'}{self.id}"

    def type_str(self) -> str:
        shape = "x".join(map(str, self.shape)) if self.shape else "scalar"
        lay = f" @{self.layout.key}" if self.layout is not None else ""
        place = "" if self.place == "reg" else f" {self.place}"
        return f"{shape} {self.dtype}{place}{lay}"


@dataclass(eq=False)
class Block:
    args: list[Value] = field(default_factory=list)
    ops: list["Op"] = field(default_factory=list)


@dataclass(eq=False)
class Op:
    kind: str
    operands: list[Value]
    results: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    body: Block | None = None
    loc: SourceLoc | None = None

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, self.kind
        return self.results[0]


@dataclass(eq=False)
class Kernel:
    """One kernel of a spec, specialised for one variant and target."""

    name: str
    body: Block
    tensors: dict[str, Any]  # name -> TensorParam (kgen.spec.model), the kernel's tensor args
    sizes: list[str]  # runtime size arguments, in order
    scalars: list[str]  # runtime scalar arguments, in order
    num_warps: int
    constants: dict[str, Any]  # variant values and tunables bound into this kernel
    shared_bytes: int = 0
    notes: dict[str, Any] = field(default_factory=dict)  # decisions recorded for the manifest
    prefetch_loads: bool | int = False  # the spec's per-kernel choice: off, on, or a register budget (passes/prefetch.py)
    bulk_reductions: bool | None = None  # the spec's per-kernel choice for this variant; None: passes/bulk_reduce.py's model
    warp_specialize: bool = False  # the spec's per-kernel choice, for this variant (passes/specialize.py)
    shared_row_loads: bool | None = None  # the spec's choice (passes/row_loads.py); None: the CompileOptions'
    row_load_slots: int = 2  # slots of the buffers those copies go into (passes/row_loads.py, async_copy.py)
    shared_accumulators: bool = False  # the spec's choice for this variant (passes/shared_sums.py)
    occupancy: int = 1  # the spec's least programs a multiprocessor: registers capped to fit them (render.py)
    tma_barriers: int = 0  # mbarriers of tensor copies (passes/async_copy.py), 8 bytes each, in shared memory
    tma_barrier_offset: int = 0  # where those mbarriers start in shared memory (passes/memory.py)
    release_barriers: int = 0  # mbarriers the consumers give ring slots back on, after the tma_barriers
    producer_warps: int = 0  # warps of a producer warpgroup beside the num_warps that compute (passes/specialize.py)


def number_tma_barriers(k: Kernel) -> None:
    """One mbarrier per slot of each buffer that tensor copies fill, in program order: `bar` is
    the first's index, k.tma_barriers their number (passes/async_copy.py, passes/specialize.py)."""
    n = 0
    for op in walk(k.body):
        if op.kind == "alloc_shared" and op.attrs.get("tma"):
            op.attrs["bar"] = n
            n += op.attrs.get("slots", 1)
    k.tma_barriers = n


def walk(block: Block):
    """Every op in a block, depth first, bodies after their op."""
    for op in block.ops:
        yield op
        if op.body is not None:
            yield from walk(op.body)


def use_counts(block: Block) -> dict[int, int]:
    """How many operand slots read each value (by id), loop bodies included."""
    uses: dict[int, int] = {}
    for op in walk(block):
        for v in op.operands:
            uses[id(v)] = uses.get(id(v), 0) + 1
    return uses


def rename_operands(op: "Op", renamed: dict[int, Value]) -> None:
    """Make `op` (and the ops of its body) read renamed[id(v)] wherever they read v."""
    op.operands = [renamed.get(id(v), v) for v in op.operands]
    if op.body is not None:
        for inner in op.body.ops:
            rename_operands(inner, renamed)



def slot_view(buf: Value, count: Value, alloc: "Op", loop: "Op") -> "Op":
    """A view of slot `count % slots` of a slotted buffer (`alloc` made it; passes/async_copy.py,
    passes/staged_loads.py)."""
    view = Value(buf.shape, buf.dtype, place="shared")
    return Op("slot", [buf, count], [view], {"slots": alloc.attrs["slots"], "slot_bytes": alloc.attrs["slot_bytes"]}, loc=loop.loc)


def predicated_load(load: "Op", operands: list[Value], pred: Value) -> "Op":
    """`load` again with other index operands, skipped (giving `other`) when `pred` is false."""
    out = Value(load.result.shape, load.result.dtype, place=load.result.place, layout=load.result.layout)
    return Op("load", list(operands) + [pred], [out], {**load.attrs, "pred": True}, loc=load.loc)

def blocks(block: Block):
    """The block and every loop body nested in it, outermost first."""
    yield block
    for op in block.ops:
        if op.body is not None:
            yield from blocks(op.body)


def print_kernel(k: Kernel) -> str:
    lines = [f"kernel {k.name}(tensors={list(k.tensors)}, sizes={k.sizes}, scalars={k.scalars}) warps={k.num_warps}"]

    def emit(block: Block, depth: int):
        pad = "  " * depth
        for op in block.ops:
            res = ", ".join(f"{r!r}: {r.type_str()}" for r in op.results)
            args = ", ".join(map(repr, op.operands))
            attrs = ", ".join(f"{a}={_short(v)}" for a, v in op.attrs.items())
            head = f"{res} = " if res else ""
            lines.append(f"{pad}{head}{op.kind}({args}){' {' + attrs + '}' if attrs else ''}")
            if op.body is not None:
                bargs = ", ".join(f"{a!r}: {a.type_str()}" for a in op.body.args)
                lines.append(f"{pad}  body({bargs}):")
                emit(op.body, depth + 2)

    emit(k.body, 1)
    if k.shared_bytes:
        lines.append(f"  shared memory: {k.shared_bytes} bytes")
    return "\n".join(lines)


def _short(v: Any) -> str:
    if isinstance(v, Layout):
        return v.key
    return repr(v)
