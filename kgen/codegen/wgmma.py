"""Warpgroup matrix instructions (Hopper wgmma): the dot's context and the C++ wrappers.

A wgmma dot reads B, and A unless A is in registers, from core-matrix buffers
(kgen.codegen.coords.shared_slot) through 64-bit matrix descriptors (PTX ISA, "Matrix
Descriptor Format"): bits 0-13 the start address >> 4, 16-29 the leading byte offset >> 4 (the
distance between core matrices adjacent along K), 32-45 the stride byte offset >> 4 (between
core matrices adjacent along M or N), 62-63 the swizzle mode (0: none). With the cores of a
buffer in row-major order, the core to the right is 128 bytes on and the one below
(row length / 8 elements) x 128 bytes: which of the two is "along K" depends on whether the
dot reads the buffer K-major or MN-major (the instruction's transpose bit). A k-step or
repeat moves the start address only, so the dot adds (byte offset >> 4) to one descriptor.

A dot from a zero accumulator runs its first k-step with scale-d = 0 (D = A B) and its zero
tile is declared, never written (kgen.codegen.emit: _zero_start).

The instructions are asynchronous: `wgmma.fence` before the first (the accumulator registers
were written by ordinary instructions), `commit_group` after the last, then `wait_group 0`, so
that to the rest of the kernel the dot is synchronous. Shared memory written by ordinary stores
or cp.async is made visible to the instruction's (async proxy) reads by `fence.proxy.async`
in the writing threads before the barrier (templates: stage, wait_async).
"""
from __future__ import annotations

from ..backends import CUDA
from ..ir.attrs import attr
from ..ir.core import ELEM_BYTES
from ..ir.passes.operands import CORE_BYTES, CORE_ROWS, SWIZZLE_ATOM_BYTES, SWIZZLE_BYTES
from .cexpr import add, div, lit, mod, mul, sym
from .coords import register_operand_ptr, rep_index, shared_slot


def descriptor_strides(stage_attrs: dict, major: str, elem_bytes: int) -> tuple[int, int]:
    """(leading, stride) byte offsets of a core-matrix buffer read K-major or MN-major.
    128-byte swizzle (PTX ISA, "Matrix Descriptor Format", strides of the swizzled layouts):
    the stride offset steps 8 rows, one 1024-byte atom, either way; the leading offset is unused
    K-major (K stays within a 128-byte row; 16 encodes as 1) and steps to the next 128-byte
    block of the contiguous dim MN-major (`rows` rows of 128 bytes on)."""
    if stage_attrs.get("smem_layout") == "sw128":
        return (CORE_BYTES if major == "k" else stage_attrs["rows"] * SWIZZLE_BYTES, SWIZZLE_ATOM_BYTES)
    right = CORE_ROWS * CORE_BYTES  # the next core along the contiguous dim
    down = stage_attrs["ld"] * elem_bytes // CORE_BYTES * right  # the next core row
    return (right, down) if major == "k" else (down, right)


def swizzle_mode(stage_attrs: dict) -> int:
    """Descriptor bits 62-63: 0 no swizzle, 1 the 128-byte swizzle (PTX ISA)."""
    return 1 if stage_attrs.get("smem_layout") == "sw128" else 0


def operand_ctx(emitter, op, role: str, instr, name_of) -> dict:
    """Operand `role` of a wgmma dot: registers (A only), or a descriptor and, per k-step `ks`
    and repeat (`rm` / `rn`), the 16-byte units to add to it."""
    v = op.operands[0 if role == "a" else 1]
    kind = op.attrs[f"{role}_load"]
    ksteps = op.operands[0].shape[1] // instr.k
    if kind == "reg":
        return {"kind": "reg", "ptr": register_operand_ptr(name_of(v), rep_index("rm", op.attrs["reps_m"]), ksteps,
                                                           instr.layout("a").nregs), "trans": 0}
    st = emitter.stage_of(v)
    elem = ELEM_BYTES[v.dtype]
    major = op.attrs[f"{role}_major"]
    lead, stride = descriptor_strides(st.attrs, major, elem)
    # the group's strip along M (A) or N (B): groups are numbered M-major (dot_tiling.acc_layout);
    # `wg_` is the group index (group_index: the constant 0 when the kernel has one group)
    group = lit(0) if group_index(emitter.k.num_warps, instr) == "0" else sym("wg_")
    wn = op.attrs["warps_n"]
    if role == "a":
        step, reps, rep, gidx = instr.m, op.attrs["reps_m"], "rm", div(group, wn)
    else:
        step, reps, rep, gidx = instr.n, op.attrs["reps_n"], "rn", mod(group, wn)
    mn0 = add(mul(gidx, step * reps), mul(rep_index(rep, reps), step))
    k0 = mul(sym("ks"), instr.k)
    outer, inner = (mn0, k0) if major == "k" else (k0, mn0)
    offset = f"({div(mul(shared_slot(st.attrs, outer, inner, elem), elem), 16)})"
    return {"kind": "desc", "desc": f"d{role}_", "src": name_of(v), "lead": lead, "stride": stride,
            "mode": swizzle_mode(st.attrs), "offset": offset, "trans": int(major == "mn")}


PTX_TYPE = dict(CUDA.asm_type_names)  # PTX's names of the element types
HALF_PTX = "KG_HALF_PTX"  # a shared source's unit defines it: the PTX name of its 16-bit type


def wrapper_name(instr, a_kind: str) -> str:
    return f"{instr.call}_{'rs' if a_kind == 'reg' else 'ss'}"


def spelling(instr, half: str | None) -> str:
    """The instruction as the wrapper's asm string writes it: the descriptor's spelling, or in a
    source shared across 16-bit types, the same text with the types from KG_HALF_PTX (string
    literals the compiler joins back into the descriptor's spelling)."""
    if half is None:
        return instr.spelling
    text = f'wgmma.mma_async.sync.aligned.m{instr.m}n{instr.n}k{instr.k}.f32." {HALF_PTX} "." {HALF_PTX} "'
    joined = text.replace(f'" {HALF_PTX} "', PTX_TYPE[instr.ab_dtype])
    assert joined == instr.spelling, (joined, instr.spelling)
    return text


def wrapper_source(instr, a_kind: str, half: str | None = None) -> str:
    """The C++ function issuing one instruction: D (n / 2 floats per thread, in place: `nd`, a
    multiple of 4 since n is of 8), A as
    4 registers or a descriptor, B a descriptor, scale-d a runtime flag (0: D = A B, the first
    k-step of a dot from zero; 1: D += A B); no negation; the transpose bits are template
    arguments (immediates in PTX)."""
    nd = instr.n // 2
    d_list = ", ".join(f"%{i}" for i in range(nd))
    # the D operands by 16 and by 4 (KG_D16 / KG_D4 in kgen_cuda.h; n is a multiple of 8)
    outs = ", ".join([f"KG_D16({i})" for i in range(0, nd - nd % 16, 16)] + [f"KG_D4({i})" for i in range(nd - nd % 16, nd, 4)])
    if a_kind == "reg":
        a_ops, a_text, first = '"r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3])', f"{{%{nd}, %{nd + 1}, %{nd + 2}, %{nd + 3}}}", nd + 4
        b_text, one, imm = f"%{first}", first + 1, f"p, 1, 1, %{first + 2}"
        ins = f'{a_ops}, "l"(db), "r"(scale_d), "n"(TB)'
        head, sig, pre = "template <int TB>", "float* d, const void* a, uint64_t db, int scale_d", \
            "  const uint32_t* A = reinterpret_cast<const uint32_t*>(a);\n"
    else:
        a_text, b_text, one, imm = f"%{nd}", f"%{nd + 1}", nd + 2, f"p, 1, 1, %{nd + 3}, %{nd + 4}"
        ins = '"l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB)'
        head, sig, pre = "template <int TA, int TB>", "float* d, uint64_t da, uint64_t db, int scale_d", ""
    return (f"{head} KG_DEVICE void {wrapper_name(instr, a_kind)}({sig}) {{\n{pre}"
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{one}, 0;\\n"\n'
            f'               "{spelling(instr, half)} {{{d_list}}}, {a_text}, {b_text}, {imm};\\n}}\\n"\n'
            f"               : {outs}\n"
            f"               : {ins});\n}}\n")


def group_index(num_warps: int, instr) -> str:
    """The warpgroup's index. With one group it is the constant 0, so that every descriptor
    offset folds to a constant and nvcc builds the descriptors in uniform registers (measured on
    the H200, D=128 forward: +3%; from `warp / 4`, a per-thread register to nvcc, they were
    built in vector registers and moved over, R2UR and UMOV). A lane-0 broadcast (shfl) for two
    groups cost the D=64 forward 3%, so several groups keep `warp / 4`."""
    return "0" if num_warps == instr.warps else f"(warp / {instr.warps})"


def dot_ctx(emitter, op, instr, name_of) -> dict:
    a = operand_ctx(emitter, op, "a", instr, name_of)
    b = operand_ctx(emitter, op, "b", instr, name_of)
    emitter.helpers.setdefault(wrapper_name(instr, a["kind"]), wrapper_source(instr, a["kind"], emitter.half))
    group = group_index(emitter.k.num_warps, instr)
    # with group_branches each warpgroup issues the products in a branch where `wg_` is its
    # constant index (warp-uniform: the whole group takes it), so the offsets fold to immediates
    # (choose_dot_tiling sets it only where there are several groups)
    branches = list(range(emitter.k.num_warps // instr.warps)) if attr(op, "group_branches") else []
    return {"macro": "wgmma_dot", "fn": wrapper_name(instr, a["kind"]), "a": a, "b": b,
            "group": group, "branches": branches,
            "targs": f"<{b['trans']}>" if a["kind"] == "reg" else f"<{a['trans']}, {b['trans']}>"}
