"""Choices of how a kernel is built, kept apart from the facts about the hardware.

A `Target` (kgen.hw.descriptor) says what a GPU has; a `CompileOptions` says which of the ways
kgen can build for it a given build takes. The tuning search in kgen.build picks them (a kernel
that spills is retried with other options), passes and the renderer read them, and they are
hashable, so that they can key a cache. A pass never reads a Target altered to express a choice.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompileOptions:
    swizzle: bool = True
    """Stage copied dot operands in the 128-byte swizzle where the matrix instruction reads it
    (passes/operands.py); plain core matrices need fewer address registers."""
    bulk_reductions: bool = True
    """Tile atomic adds as bulk reductions from shared memory where the target has them
    (passes/bulk_reduce.py); off, one atomic per element group."""
    stepped_copies: bool = True
    """cp.async copy addresses advanced by whole steps where the geometry allows, rather than
    recomputed per chunk (ir/passes/copy_addressing.py)."""
    warp_specialize: bool = True
    """Loops of tensor copies fed by a producer warpgroup through a ring of mbarriers, the
    consumers' registers raised (ir/passes/specialize.py), where the target can move registers
    between warpgroups; off, the consumers issue their own copies behind block barriers."""
    ring_slots: int = 2
    """Slots of each ring a producer warpgroup fills (ir/passes/specialize.py), where shared
    memory allows without losing a block per multiprocessor. Two by default: three measured no
    faster on the attention forward (docs/PERFORMANCE.md)."""
    pingpong: bool = False
    """Two computing warpgroups of a warp-specialized kernel take turns issuing their products
    in its ring loops (ir/passes/pingpong.py), so that one's elementwise work overlaps the
    other's products. Off by default: on the attention forward it measured no faster
    (docs/PERFORMANCE.md)."""
    register_pipeline: bool = True
    """A staged load in a loop issued one iteration ahead into registers and written into the
    other slot of a two-slot buffer after the body's compute (ir/passes/staged_loads.py); off,
    each iteration loads, writes and waits before its dots read."""
    shared_row_loads: bool = False
    """A register load in a loop that is too large to prefetch in registers is copied an
    iteration ahead into shared memory and read from there (ir/passes/row_loads.py), where the
    target has cp.async. Off by default: on the H200 it measured slower on the attention
    backward at head_dim 64 and the chunked scan, and at head_dim 128 it spills
    (docs/PERFORMANCE.md)."""
    dots_together: bool = True
    """An asynchronous dot whose start ordinary instructions write has that start computed before
    the asynchronous dot issued ahead of it, so that both are in flight at once
    (ir/passes/dot_issue.py); off, it waits for the earlier one."""
    constant_groups: bool = False
    """Where several warpgroups issue a warpgroup dot (wgmma), each issues it in a branch of its
    own whose group index is a constant, so that every descriptor offset folds to an immediate
    and the descriptors stay in uniform registers (kgen/codegen/wgmma.py `group_index`). Off by
    default, and the last form a spilling kernel is retried in (kgen/build.py
    spill_retry_options): it takes head_dim 256's 64 x 64 dkdv with dk and dv whole from 255
    registers and spills to 204-230 without, the form that made that backward 1.2-1.3x FA2
    (docs/PERFORMANCE.md, sessions 39-40)."""
    register_flags: tuple[str, ...] = ()
    """Extra compiler flags: the descriptor's frugal register flags when a kernel spills."""


DEFAULT = CompileOptions()
