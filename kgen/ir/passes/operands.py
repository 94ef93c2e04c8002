"""Where each dot reads its operands from: registers, or shared memory in an orientation.

An operand whose register layout already is the instruction's operand fragment, repeated over
the k-steps and the warp's repeats (`operand_layout`), is read straight from registers: no copy,
no barrier. Attention's forward is the case that matters: p, the softmax of a dot's
accumulator, is the A operand of the next dot, and on mma.sync the accumulator layout of
m16n8 tiles is the A layout of m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), so
p never leaves registers. Where the layouts differ (MFMA's C is the transpose of its A), the
operand is staged.

A staged operand is stored row-major with one dim contiguous (`inner`), rows padded by 16 bytes
so that the rows consecutive lanes read fall in different banks. A transposed operand (`k.T`)
stages the tile it transposes and reads it through a `view_shared` (no code), so dots of one block
that read a tile both ways share its buffer. The fragment reads that
follow (`<role>_load` on the dot) are:
  matrix        the descriptor's shared matrix load (ldmatrix), K contiguous in memory;
  matrix_trans  its transposing form, M or N contiguous: chosen when the register tile runs
                along M or N (V in attention), so that the stage is a vector store instead of
                a scalar transpose;
  vec           vector reads of the lane's consecutive K elements, K contiguous (any target).

An instruction that reads an operand from shared memory itself (wgmma: `a_from` / `b_from`
list 'shared' in the descriptor) gets it staged as core matrices instead (`smem_layout:
cores`): 8 rows of 16 bytes each, 128 contiguous bytes, the tile's cores in row-major order,
no padding (PTX ISA, "Shared Memory Matrix Layout", the no-swizzle canonical layouts), or, where
a row of the tile is a multiple of 128 bytes, in the 128-byte swizzle (`sw128`): rows of 128
bytes whose 16-byte chunks are XOR-permuted by the row's index mod 8. Copies write that layout
with 8 lanes on each 128 bytes of a global row and no bank conflicts; into plain cores the
chunks of one global row all land on the same banks (measured on the H200: 32 shared-memory
wavefronts per cp.async instruction instead of 4). The same buffer serves a read with K along the contiguous dim (`<role>_major: k`) and one with K
across it (`mn`, the instruction's transpose bit), so k and k.T still share one buffer. The
load kind is then `desc`: the dot builds matrix descriptors, no fragment reads.
"""
from __future__ import annotations

from ...errors import SpecError
from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import producers
from ..core import ELEM_BYTES, Block, Kernel, Op, Value, blocks, walk
from ...layout import Layout, log2, vector_width
from .dot_tiling import instr_of

PAD_BYTES = 16


def _along(dim: int, amount: int) -> tuple[int, int]:
    return (amount, 0) if dim == 0 else (0, amount)


CORE_ROWS, CORE_BYTES = 8, 16  # a core matrix: 8 rows of 16 bytes (PTX ISA, wgmma smem layouts)
# the 128-byte swizzle: rows of 128 bytes in atoms of 8 rows (1024 bytes, 1024-aligned), the
# 16-byte chunk c of row r stored at chunk c ^ (r % 8) (PTX ISA, "Shared Memory Matrix Layout",
# swizzling modes)
SWIZZLE_BYTES, SWIZZLE_ATOM_BYTES = 128, 1024


def operand_layout(target: Target, attrs: dict, role: str, shape: tuple[int, int]) -> Layout | None:
    """The register layout of a whole dot operand as the instruction reads it: the fragment
    (with its own warp bits, for a warpgroup instruction), then a register bit per k-step, then
    one per repeat along M (A) or N (B); groups of warps tiled as in the accumulator (N-bits
    first, kgen.ir.passes.dot_tiling.acc_layout), holding copies along the dim the operand lacks.
    Register (rep, ks, i) is element (rep * ksteps + ks) * n + i. None: the instruction never
    reads this operand from registers."""
    instr = instr_of(target, attrs["instr"])
    if "reg" not in (instr.a_from if role == "a" else instr.b_from):
        return None
    frag = instr.layout(role)
    kdim, odim = (1, 0) if role == "a" else (0, 1)
    step, reps = (instr.m, attrs["reps_m"]) if role == "a" else (instr.n, attrs["reps_n"])
    ksteps = shape[kdim] // instr.k
    reg = list(frag.reg) + [_along(kdim, instr.k << i) for i in range(log2(ksteps))]
    reg += [_along(odim, step << i) for i in range(log2(reps))]
    wn, wm = log2(attrs["warps_n"]), log2(attrs["warps_m"])
    if role == "a":
        warp = list(frag.warp) + [(0, 0)] * wn + [(instr.m * attrs["reps_m"] << i, 0) for i in range(wm)]
    else:
        warp = list(frag.warp) + [(0, instr.n * attrs["reps_n"] << i) for i in range(wn)] + [(0, 0)] * wm
    return Layout(shape=tuple(shape), reg=tuple(reg), lane=frag.lane, warp=tuple(warp))


def fragment_view(target: Target, attrs: dict, role: str) -> Layout:
    """One k-step of one warp's fragments of an operand, seen as (rows, K) with rows = M for A
    and N for B: the fragment's bits, then a register bit per repeat. Element rep * n + i."""
    instr = instr_of(target, attrs["instr"])
    frag = instr.layout(role)
    swap = (lambda v: v) if role == "a" else (lambda v: (v[1], v[0]))  # noqa: E731
    step, reps = (instr.m, attrs["reps_m"]) if role == "a" else (instr.n, attrs["reps_n"])
    reg = [swap(v) for v in frag.reg] + [(step << i, 0) for i in range(log2(reps))]
    shape = (step * reps, instr.k)
    return Layout(shape=shape, reg=tuple(reg), lane=tuple(swap(v) for v in frag.lane), warp=())


def matrix_load_fits(target: Target, view: Layout, dtype: str) -> bool:
    """Whether the descriptor's shared matrix load delivers this fragment view: the load's own
    element and lane bits, then whole matrices, at least one full 32-bit register's worth."""
    ml = target.shared_matrix_load
    if ml is None or ELEM_BYTES[dtype] != ml.elem_bytes:
        return False
    own = ml.layout()
    n = len(own.reg)
    if tuple(view.reg[:n]) != own.reg or view.lane != own.lane:
        return False
    return all(r % ml.rows == 0 and c % ml.rows == 0 for r, c in view.reg[n:])


def place_dot_operands(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    defs = producers(k.body)
    for block in blocks(k.body):
        staged: dict[tuple[int, int], Value] = {}  # (id of the tile, its contiguous dim) -> buffer
        new_ops: list[Op] = []
        for op in block.ops:
            if op.kind == "dot":
                for i, role in ((0, "a"), (1, "b")):
                    new_ops += _place(op, i, role, target, options, defs, staged)
            new_ops.append(op)
        block.ops[:] = new_ops
    _drop_unused_transposes(k.body)
    return k


def _place_cores(op: Op, i: int, role: str, base: Value, bk: int, flipped: bool, defs: dict, staged: dict,
                 instr, swizzle: bool) -> list[Op]:
    """Stage `base` as core matrices (or reuse its buffer) for an instruction that reads shared
    memory through a descriptor. The contiguous dim: a global tile's last dim (it is copied as
    it lies), else the dim the registers run along. A tile loaded from global memory takes the
    128-byte swizzle (`sw128`) when the instruction can read it and every reader's instructions
    start on whole swizzled rows (`_swizzle_fits`) and the options allow it; a later reader that
    cannot turns it back to plain cores."""
    v = op.operands[i]
    src = defs.get(id(base))
    inner = 1 if src is None or src.kind == "load" or vector_width(base.layout, 1) >= vector_width(base.layout, 0) else 0
    ops: list[Op] = []
    key = (id(base), "cores")
    elem = ELEM_BYTES[base.dtype]
    if key not in staged:
        rows, cols = base.shape[1 - inner], base.shape[inner]
        if rows % CORE_ROWS or (cols * elem) % CORE_BYTES:
            raise_cores(op, base)
        buf = Value(base.shape, base.dtype, place="shared")
        # only tiles copied from global memory: there the swizzle removes the bank conflicts of the
        # copies; a tile staged from registers keeps plain cores, whose slots are one register
        # plus immediates (with the XOR, one per fragment column: the D=128 dkdv spilled)
        copied = src is None or src.kind == "load"
        layout = "sw128" if (swizzle and copied and 128 in instr.shared_swizzle and rows % CORE_ROWS == 0
                             and (cols * elem) % SWIZZLE_BYTES == 0) else "cores"
        stage = Op("stage", [base], [buf], {"role": role, "inner": inner, "rows": rows, "ld": cols, "smem_layout": layout,
                                            "bytes": rows * cols * elem}, loc=op.loc)
        ops.append(stage)
        staged[key] = (buf, inner, stage)
    buf, inner, stage = staged[key]
    major = "k" if inner == bk else "mn"
    if stage.attrs["smem_layout"] == "sw128" and not _swizzle_fits(instr, role, major, elem):
        stage.attrs["smem_layout"] = "cores"
    if flipped:
        view = Value(v.shape, v.dtype, place="shared")
        ops.append(Op("view_shared", [buf], [view], {}, loc=op.loc))
        buf = view
    op.operands[i] = buf
    op.attrs[f"{role}_load"] = "desc"
    op.attrs[f"{role}_major"] = major
    return ops


def _swizzle_fits(instr, role: str, major: str, elem: int) -> bool:
    """Whether a descriptor of the 128-byte swizzle can start each of this reader's
    instructions. K-major, K runs along the swizzled 128-byte rows and an instruction's 16 K
    elements start inside one (the start address moves within the row; the hardware applies
    the XOR to address bits 4-6 from bits 7-9); M/N steps whole rows. MN-major, an instruction
    must start on a row and span whole rows: its M (A) or N (B) extent a multiple of 128 bytes."""
    if major == "k":
        return True
    return ((instr.m if role == "a" else instr.n) * elem) % SWIZZLE_BYTES == 0


def raise_cores(op: Op, base: Value):
    raise SpecError(f"a {base.shape[0]}x{base.shape[1]} {base.dtype} dot operand cannot be stored as 8-row x 16-byte core "
                    "matrices; use tile sides that are multiples of 8 rows and 16 bytes", op.loc)


def _drop_unused_transposes(body: Block) -> None:
    """A `trans` whose only reader was a dot that now reads a view of the untransposed tile."""
    used = {id(v) for op in walk(body) for v in op.operands}
    for block in blocks(body):
        block.ops[:] = [op for op in block.ops if not (op.kind == "trans" and id(op.result) not in used)]


def _place(op: Op, i: int, role: str, target: Target, options: CompileOptions, defs: dict, staged: dict) -> list[Op]:
    """Decide operand i of a dot; return the ops to insert before it (a stage, a view).

    The tile staged is the operand, or the tile it transposes (`k.T` stages `k`), so that two
    dots reading the same tile, one of them transposed (attention's backward reads k as k.T and
    as k), share one buffer: the second gets a `view_shared` of the first's."""
    v = op.operands[i]
    if v.layout is not None and v.layout == operand_layout(target, op.attrs, role, v.shape):
        op.attrs[f"{role}_load"] = "reg"
        return []
    src = defs.get(id(v))
    flipped = src is not None and src.kind == "trans"
    base = src.operands[0] if flipped else v
    kdim = 1 if role == "a" else 0
    bk = 1 - kdim if flipped else kdim  # the dim of `base` that is this dot's K
    instr = instr_of(target, op.attrs["instr"])
    if "shared" in (instr.a_from if role == "a" else instr.b_from):
        return _place_cores(op, i, role, base, bk, flipped, defs, staged, instr, options.swizzle)
    fits = matrix_load_fits(target, fragment_view(target, op.attrs, role), v.dtype)
    can_trans = fits and target.shared_matrix_load.transposed
    usable = [bk, 1 - bk] if can_trans else [bk]  # contiguous dims of base this dot can read
    prefer = 1 - bk if can_trans and vector_width(base.layout, 1 - bk) > vector_width(base.layout, bk) else bk
    ops: list[Op] = []
    inner = next((d for d in [prefer] + usable if (id(base), d) in staged), None)
    if inner is None:
        inner = prefer
        ld = base.shape[inner] + PAD_BYTES // ELEM_BYTES[base.dtype]
        buf = Value(base.shape, base.dtype, place="shared")
        ops.append(Op("stage", [base], [buf], {"role": role, "inner": inner, "rows": base.shape[1 - inner], "ld": ld,
                                               "bytes": base.shape[1 - inner] * ld * ELEM_BYTES[base.dtype]}, loc=op.loc))
        staged[(id(base), inner)] = buf
    buf = staged[(id(base), inner)]
    if flipped:
        view = Value(v.shape, v.dtype, place="shared")
        ops.append(Op("view_shared", [buf], [view], {}, loc=op.loc))
        buf = view
    op.operands[i] = buf
    op.attrs[f"{role}_load"] = ("matrix" if fits else "vec") if inner == bk else "matrix_trans"
    return ops
