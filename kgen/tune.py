"""`kgen tune`: time a spec's tunable candidates on the local GPU for a size bucket and keep the
winner in the tuning database (kgen/runtime/tuning.py), which the runtime then uses for that
bucket instead of the first candidate that fits.

Each candidate is built as the first choice of its variant (build_variant with it first); one
that does not fit the target or spills in every form falls to another candidate's build and is
reported as not fitting. The op runs the candidate's kernels on inputs drawn from the spec's
domains at the given sizes; the time is the median of CUDA-event times of `runs` calls after a
warm-up, each after the L2 is flushed (as the benches' do_bench), every candidate on the same
inputs.
"""
from __future__ import annotations

import statistics
from time import perf_counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .spec.candidates import tunable_candidates
from .check.emulated import INT_SCALAR, SCALAR
from .check.samples import derive_sizes, random_inputs
from .errors import KgenError, LaunchError, UsageError
from .hw.descriptor import Target
from .runtime.binding import bind
from .runtime.tuning import entries, record, size_bucket, tuning_key
from .spec.expr import eval_expr
from .spec.load import LoadedSpec, backward_spec, load_spec, variant_id


@dataclass
class Tuned:
    variant: dict[str, Any]
    sizes: dict[str, int] = field(default_factory=dict)  # as the op binds them: the bucket's key
    times: list[tuple[dict[str, int], float | None, str]] = field(default_factory=list)  # (tunables, ms or None, note)

    @property
    def winner(self) -> tuple[dict[str, int], float] | None:
        timed = [(t, ms) for t, ms, _ in self.times if ms is not None]
        return min(timed, key=lambda x: x[1]) if timed else None

    @property
    def default(self) -> tuple[dict[str, int], float] | None:
        """The first candidate that fits: what runs without a tune."""
        return next(((t, ms) for t, ms, _ in self.times if ms is not None), None)


FLUSH_BYTES = 256 * 2**20  # triton.testing.do_bench's cache buffer: above every L2 kgen targets (H100/H200 50 MB)


def l2_flush(device: str = "cuda") -> Callable[[], None]:
    """A call that writes a buffer larger than the GPU's L2 (at least FLUSH_BYTES, twice the L2
    torch reports), so that the next kernel finds none of its inputs there: what
    triton.testing.do_bench (kgen.bench's timer) and Triton's autotuner do before each timed
    call. Without it a form that rereads its inputs from the L2 between back-to-back calls times
    faster than it runs after other work (docs/PERFORMANCE.md, session 38: head_dim 64's forward
    on 64 x 64 tiles, 2.60 ms back to back, 3.01 ms in the bench)."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    buf = torch.empty(max(FLUSH_BYTES, 2 * l2), dtype=torch.int8, device=device)
    return buf.zero_


def cuda_timer(runs: int, flush: Callable[[], Any] | None = None) -> Callable[[list[Callable[[], Any]]], list[float]]:
    """Each call's median over `runs` rounds, a round calling every one of them once, in turn
    (forward, then backward the next round), each between two CUDA events; the rounds are
    issued back to back with no synchronisation (as triton.testing.do_bench) behind a
    device-side wait (torch.cuda._sleep) as long as the host takes to issue them all, so that a
    call's time is its kernels' and not the host's path to them (a kgen call's ~80 us of Python
    at the H200's row-op sizes, as long as its kernels, made one candidate 1.8x apart in two
    tunes). Interleaved, every candidate runs under the same clocks and power state: timed one
    after another, each in a burst of its own after an idle wait, kernels ran 3-11% faster than
    in the bench's sustained loop, by different amounts, and the tune ranked two tile forms and
    two launch orders the bench timed the other way or equal (docs/PERFORMANCE.md, session 39).
    `flush` (l2_flush) runs before each timed call, outside its events."""
    def time(fns: list[Callable[[], Any]]) -> list[float]:
        for fn in fns:
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        started = perf_counter()
        for fn in fns:
            if flush is not None:
                flush()
            fn()
        host = perf_counter() - started
        torch.cuda.synchronize()
        pairs = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in fns]
                 for _ in range(runs)]
        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is not None:  # cycles at up to 3 GHz, for 1.5x the host's time and 1 ms
            sleep(int(3e9 * (1.5 * host * runs + 1e-3)))
        for r, events in enumerate(pairs):
            order = range(len(fns)) if r % 2 == 0 else range(len(fns) - 1, -1, -1)
            for i in order:
                if flush is not None:
                    flush()
                start, end = events[i]
                start.record()
                fns[i]()
                end.record()
        torch.cuda.synchronize()
        return [statistics.median(events[i][0].elapsed_time(events[i][1]) for events in pairs) for i in range(len(fns))]
    return time


def chosen_candidates(ls: LoadedSpec, variant: dict[str, Any], where: Sequence[str] = ()) -> list[dict[str, int]]:
    """The variant's tunable candidates, in order, for which every expression of `where` (of its
    tunables and variant axes) holds: a tune of part of a large space, as Triton's
    prune_configs_by, where building every candidate would take longer than the tune is worth."""
    out = []
    for cand in tunable_candidates(ls, variant):
        env = {**variant, **cand}
        holds = []
        for expr in where:  # every one evaluated, so that a mistaken one fails whatever the others say
            try:
                holds.append(bool(eval_expr(expr, env)))
            except Exception as e:  # an unknown name or a malformed expression
                raise UsageError(f"--where '{expr}' could not be evaluated ({e}); it may name {ls.spec.name}'s "
                                 f"tunables and variant axes: {', '.join([*cand, *variant])}") from None
        if all(holds):
            out.append(cand)
    if not out:
        raise UsageError(f"no tunable candidate of {ls.spec.name} ({variant_id(variant)}) meets --where "
                         f"{' and '.join(where)}; its tunables: {ls.spec.tunables}")
    return out


def prebuild(spec: Path, backward: bool, variant: dict[str, Any], target: Target, cands: list[dict[str, int]],
             workers: int, on_done: Callable[[int, Any], None] | None = None) -> None:
    """Build every candidate into the cache in `workers` processes, as `kgen warm` builds
    variants: the tune's own builds, one after another in this process, then find them there.
    A candidate that cannot be built is left for the tune, which reports it."""
    from .runtime.pool import run_in_workers

    run_in_workers(_build_candidate, [(str(spec), backward, variant, target.name, c) for c in cands], workers, on_done=on_done)


def _build_candidate(spec: str, backward: bool, variant: dict[str, Any], target_name: str, cand: dict[str, int]) -> str:
    from .hw.descriptor import load_target
    from .runtime.compiled import _entry

    ls = load_spec(spec)
    try:
        return str(_entry(backward_spec(ls) if backward else ls, variant, load_target(target_name), cand))
    except KgenError as e:
        return str(e)


def tune_variant(op, variant: dict[str, Any], target: Target, sizes: dict[str, int], device: str,
                 time: Callable[[list[Callable[[], Any]]], list[float]], scalars: dict[str, Any] | None = None,
                 candidates: list[dict[str, int]] | None = None) -> Tuned:
    """Time every candidate of `variant` (or those given) through `op` (a KgenOp of the spec) on
    one draw of inputs: each built and run once, then those that fit timed together (`time`:
    interleaved)."""
    ls: LoadedSpec = op.ls
    env = derive_sizes(ls, sizes, variant)
    inputs = {n: t.to(device) for n, t in random_inputs(ls, variant, {**variant, **env}).items()}
    given = {n: INT_SCALAR if p.dtype != "fp32" else SCALAR for n, p in ls.spec.scalars.items() if p.default is None}
    args = op._positional((), {**inputs, **given, **(scalars or {}), **{a: variant[a] for a in op.options}})
    out = Tuned(variant, {n: v for n, v in bind(ls, inputs, variant, inputs[next(iter(inputs))].device).items()
                          if n in ls.spec.sizes})
    results: list[tuple[dict[str, int], float | None, str]] = []
    runnable: list[int] = []
    for cand in tunable_candidates(ls, variant) if candidates is None else candidates:
        op.force_tunables(cand)
        try:
            op.run(*args)
            used = op.last_tunables
            if used != cand:
                results.append((cand, None, f"does not fit {target.name} (built {used} instead)"))
            else:
                runnable.append(len(results))
                results.append((cand, None, ""))
        except LaunchError as e:
            results.append((cand, None, str(e)))
        finally:
            op.force_tunables(None)

    def as_forced(cand: dict[str, int]) -> Callable[[], Any]:
        def call():
            op.force_tunables(cand)
            try:
                return op.run(*args)
            finally:
                op.force_tunables(None)
        return call

    if runnable:
        for at, ms in zip(runnable, time([as_forced(results[at][0]) for at in runnable])):
            results[at] = (results[at][0], ms, "")
    out.times.extend(results)
    return out


def store(ls: LoadedSpec, target: Target, tuned: Tuned) -> dict[str, Any] | None:
    """Record the winner of `tuned` for its size bucket; the entry (None if nothing ran)."""
    won, default = tuned.winner, tuned.default
    if won is None or default is None:
        return None
    entry = {"spec": ls.spec.name, "variant": variant_id(tuned.variant), "target": target.name,
             "bucket": size_bucket(tuned.sizes), "sizes": dict(tuned.sizes), "tunables": won[0], "ms": won[1],
             "default": default[0], "default_ms": default[1], "date": date.today().isoformat(),
             "device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
             "timed": [{"tunables": t, "ms": ms, "note": note} for t, ms, note in tuned.times]}
    record(tuning_key(ls, tuned.variant, target, tuned.sizes), entry)
    return entry


def show_rows(target: str | None = None) -> list[dict[str, Any]]:
    """Every entry as a row, with the speedup of the winner over the default candidate (below 1:
    the tune made that bucket slower than no tune, e.g. timed under other load)."""
    rows = []
    for key, e in sorted(entries(target).items(), key=lambda kv: (kv[1].get("spec", ""), kv[1].get("variant", ""))):
        speedup = e["default_ms"] / e["ms"] if e.get("ms") else float("nan")
        rows.append({"key": key, "spec": e.get("spec"), "variant": e.get("variant"), "target": e.get("target"),
                     "bucket": e.get("bucket"), "tunables": e.get("tunables"), "ms": e.get("ms"),
                     "default_ms": e.get("default_ms"), "speedup": speedup, "source": e.get("source"), "device": e.get("device"),
                     "regressed": speedup < 1.0})
    return rows
