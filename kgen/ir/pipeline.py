"""The pass list: a parsed kernel's IR (kgen.lang), one target, one set of options -> IR ready
for codegen. kgen.driver runs the parse and then these, in this order:

         choose_dot_tiling    matrix instruction and warp split per dot, from the descriptor
      -> assign_layouts       which lane holds which element (linear layouts), converts inserted
      -> accumulate_into_dots x + dot(a, b) becomes dot(a, b, x) for small accumulators
      -> keep_sums_in_shared  sums a loop carries kept in shared memory, where the kernel asks
      -> place_dot_operands   each dot operand read from registers, or staged in shared memory
      -> hoist_invariant_stages  copies of loop-invariant operands moved out of their loops
      -> copy_row_loads       loop loads too large to prefetch in registers staged, read from shared memory
      -> use_async_copies     global tiles copied straight to shared memory, prefetched in loops
      -> pipeline_staged_loads   staged loads still in loops issued one iteration ahead, into slots
      -> issue_copies_early   one-shot copies issued as soon as their operands allow, together
      -> prefetch_loads       register loads in loops issued one iteration ahead
      -> sink_to_first_use    register arithmetic moved down to just before its first reader
      -> issue_dots_together  a later asynchronous dot's start computed before the earlier dot
      -> overlap_async_dots   an asynchronous dot (wgmma) waited for where its result is read
      -> specialize_warps     loops of tensor copies fed by a producer warpgroup through rings
      -> alternate_warpgroups two computing warpgroups take turns issuing their products
      -> plan_bulk_reductions tile atomic adds through shared memory, one bulk reduction per row
      -> group_warp_sums      sums across warps side by side share one barrier
      -> merge_stage_barriers    barriers only where a shared write could overtake a read
      -> plan_shared_memory   offsets from the interference graph; the descriptor's limit checked
      -> drop_scratch_barriers  no barrier before a scratch write that no pending read overlaps
      -> choose_copy_addressing  how each thread steps through its chunks of a cp.async copy
      -> mark_zero_starts     warpgroup dots that start from zero, their accumulators unwritten
      -> keep_used_arguments  the kernel takes only the tensors, sizes and scalars it reads

Before them, a block of more threads than the target launches does not fit (DoesNotFit). The
verifier runs after each pass. `kgen inspect` prints the IR after each of them.
"""
from __future__ import annotations

import copy
from typing import Callable

from ..errors import DoesNotFit
from ..hw.descriptor import Target
from ..options import DEFAULT, CompileOptions
from .core import Kernel, print_kernel
from .passes.accumulate import accumulate_into_dots
from .passes.arguments import keep_used_arguments
from .passes.async_copy import use_async_copies
from .passes.barriers import merge_stage_barriers
from .passes.copy_addressing import choose_copy_addressing
from .passes.bulk_reduce import plan_bulk_reductions
from .passes.dead_code import drop_dead_code
from .passes.dot_tiling import choose_dot_tiling
from .passes.dot_issue import issue_dots_together
from .passes.early_copies import issue_copies_early
from .passes.hoist import hoist_invariant_stages
from .passes.layouts import assign_layouts
from .passes.memory import plan_shared_memory
from .passes.operands import place_dot_operands
from .passes.overlap import overlap_async_dots
from .passes.pingpong import alternate_warpgroups
from .passes.prefetch import prefetch_loads
from .passes.row_loads import copy_row_loads
from .passes.scratch_barriers import drop_scratch_barriers
from .passes.shared_sums import keep_sums_in_shared
from .passes.sink import sink_to_first_use
from .passes.sum_groups import group_warp_sums
from .passes.staged_loads import pipeline_staged_loads
from .passes.specialize import specialize_warps
from .passes.zero_starts import mark_zero_starts
from .verify import verify

Pass = Callable[[Kernel, Target, CompileOptions], Kernel]  # facts and choices, never a doctored Target
PASSES: list[tuple[str, Pass]] = [
    ("choose_dot_tiling", choose_dot_tiling),
    ("assign_layouts", assign_layouts),
    ("accumulate_into_dots", accumulate_into_dots),
    ("keep_sums_in_shared", keep_sums_in_shared),
    ("place_dot_operands", place_dot_operands),
    ("hoist_invariant_stages", hoist_invariant_stages),
    ("copy_row_loads", copy_row_loads),
    ("use_async_copies", use_async_copies),
    ("pipeline_staged_loads", pipeline_staged_loads),
    ("issue_copies_early", issue_copies_early),
    ("prefetch_loads", prefetch_loads),
    ("sink_to_first_use", sink_to_first_use),
    ("issue_dots_together", issue_dots_together),
    ("overlap_async_dots", overlap_async_dots),
    ("specialize_warps", specialize_warps),
    ("alternate_warpgroups", alternate_warpgroups),
    ("plan_bulk_reductions", plan_bulk_reductions),
    ("group_warp_sums", group_warp_sums),
    ("merge_stage_barriers", merge_stage_barriers),
    ("plan_shared_memory", plan_shared_memory),
    ("drop_scratch_barriers", drop_scratch_barriers),
    ("choose_copy_addressing", choose_copy_addressing),
    ("mark_zero_starts", mark_zero_starts),
    ("drop_dead_code", drop_dead_code),
    ("keep_used_arguments", keep_used_arguments),
]


def planned_shared_bytes(k: Kernel, target: Target, options: CompileOptions, first: str) -> int:
    """The block's shared bytes as plan_shared_memory places them, the passes from `first` on
    run on a copy of `k` (a pass that weighs adding shared memory asks this); beyond the
    target's limit per block where the planner refuses it."""
    trial, started = copy.deepcopy(k), False
    for name, run in PASSES:
        started = started or name == first
        if started:
            try:
                trial = run(trial, target, options)
            except DoesNotFit:
                return target.lds_bytes_per_block + 1
        if name == "plan_shared_memory":
            return trial.shared_bytes
    raise AssertionError("plan_shared_memory is not in the pass list")


def run_passes(k: Kernel, target: Target, options: CompileOptions = DEFAULT,
               trace: Callable[[str, str], None] | None = None) -> Kernel:
    """Every pass of PASSES on a parsed kernel, the verifier after each (its layouts checked from
    assign_layouts on); trace(name, IR text) after the parse and after each pass."""
    verify(k, "parse")
    if trace:
        trace("parse", print_kernel(k))
    threads = k.num_warps * target.wave_size
    if threads > target.max_threads_per_block:  # a launch of more fails at run time, on every target
        raise DoesNotFit(f"kernel {k.name} has {k.num_warps} warps of {target.wave_size} threads, {threads} threads, more "
                         f"than {target.name}'s {target.max_threads_per_block} per block; use fewer warps", resource="threads",
                         needed=threads, available=target.max_threads_per_block)
    done: set[str] = set()
    for name, run in PASSES:
        k = run(k, target, options)
        done.add(name)
        verify(k, name, frozenset(done))
        if trace:
            trace(name, print_kernel(k))
    return k
