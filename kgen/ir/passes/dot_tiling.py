"""Choose, for each dot, the matrix instruction and how the warps split the output tile.

Facts come from the descriptor: the instruction shapes the target has for the operand dtype,
the warps that issue one instruction together (1, or a warpgroup of 4 for wgmma), and the wave
size. Among the instructions that tile the dot exactly, the largest (fewest instructions,
fewest operand reads) is taken; then the block's warps, in groups of the instruction's warps,
are spread along M first, since rows of a tile share the A reads (each group then reads a
different strip of A). `warps_m` x `warps_n` counts those groups.
"""
from __future__ import annotations

from ...errors import DoesNotFit
from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Kernel, walk
from ...layout import Layout, log2


def choose_dot_tiling(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    for op in walk(k.body):
        if op.kind != "dot" or "instr" in op.attrs:
            continue
        a, b, _ = op.operands
        (m_, k_), n_ = a.shape, b.shape[1]
        fits = [i for i in target.matrix_instrs if i.ab_dtype == a.dtype and m_ % i.m == 0 and n_ % i.n == 0 and k_ % i.k == 0
                and k.num_warps % i.warps == 0]
        if not fits:
            shapes = ", ".join(f"{i.m}x{i.n}x{i.k}" for i in target.matrix_instrs if i.ab_dtype == a.dtype)
            raise DoesNotFit(f"dot of {m_}x{k_} by {k_}x{n_} {a.dtype} tiles fits no matrix instruction of {target.name} ({shapes}); use tile sizes that are multiples of one", op.loc,
                             resource="matrix_instruction")
        splits = [(i, _split(i, m_, n_, k.num_warps // i.warps)) for i in sorted(fits, key=lambda i: -(i.m * i.n * i.k))]
        splits = [(i, s) for i, s in splits if s is not None]
        if not splits:
            raise DoesNotFit(f"dot of {m_}x{n_} cannot be split over {k.num_warps} warps with any matrix instruction of {target.name}; use fewer warps or a larger tile", op.loc,
                             resource="warp_split")
        instr, (warps_m, warps_n) = splits[0]
        op.attrs.update(instr=instr.name, warps_m=warps_m, warps_n=warps_n,
                        reps_m=m_ // (instr.m * warps_m), reps_n=n_ // (instr.n * warps_n))
        if options.constant_groups and several_groups(k, instr):
            op.attrs["group_branches"] = True
        k.notes.setdefault("dots", []).append(
            f"{m_}x{n_}x{k_} {a.dtype}: {instr.name}, {'warps' if instr.warps == 1 else 'warpgroups'} {warps_m}x{warps_n}, "
            f"{op.attrs['reps_m']}x{op.attrs['reps_n']} instructions per warp per k-step")
    return k


def _split(instr, m: int, n: int, warps: int) -> tuple[int, int] | None:
    """Warps (or warpgroups) along M as far as M allows, the rest along N; None if N cannot
    take the rest."""
    warps_m = 1
    while warps_m < warps and m % (instr.m * warps_m * 2) == 0:
        warps_m *= 2
    warps_n = warps // warps_m
    return (warps_m, warps_n) if n % (instr.n * warps_n) == 0 else None


def several_groups(k: Kernel, instr) -> bool:
    """Whether several groups of warps issue each instruction of a dot together (wgmma over more
    than one warpgroup): what CompileOptions.constant_groups changes."""
    return 1 < instr.warps < k.num_warps


def instr_of(target: Target, name: str):
    return next(i for i in target.matrix_instrs if i.name == name)


def acc_layout(target: Target, attrs: dict) -> Layout:
    """The output tile's layout: the instruction's C fragment (with its own warp bits, for a
    warpgroup instruction), repeated over the group's sub-tile (registers), and tiled over the
    groups (M-major group order; warp = group * instr.warps + warp in the group)."""
    instr = instr_of(target, attrs["instr"])
    c = instr.layout("c")
    reg = list(c.reg)
    reg += [(0, instr.n << i) for i in range(log2(attrs["reps_n"]))]
    reg += [(instr.m << i, 0) for i in range(log2(attrs["reps_m"]))]
    warp = list(c.warp) + [(0, instr.n * attrs["reps_n"] << i) for i in range(log2(attrs["warps_n"]))]
    warp += [(instr.m * attrs["reps_m"] << i, 0) for i in range(log2(attrs["warps_m"]))]
    shape = (instr.m * attrs["reps_m"] * attrs["warps_m"], instr.n * attrs["reps_n"] * attrs["warps_n"])
    return Layout(shape=shape, reg=tuple(reg), lane=c.lane, warp=tuple(warp))
