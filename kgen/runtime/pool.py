"""Build processes that stop with their parent: Ctrl-C, a kill, or a worker the system killed.

`run_in_workers(fn, jobs, workers)` runs `fn(*job)` for every job in spawned processes (torch may
be loaded in the parent: no fork). Three things a plain ProcessPoolExecutor gets wrong for a
command-line build are handled here:

- Each worker starts its own session (setsid), so a Ctrl-C at the terminal reaches the parent
  only; the parent then kills each worker's whole process group (the worker and the nvcc or
  clang it is running) at once, instead of the compilers dying of SIGINT mid-file and the pool
  waiting for the workers to finish their queue.
- Each worker watches its parent: when the parent is gone (killed with SIGKILL, say), the worker
  kills its own process group, so no orphan stays blocked on the pool's pipe.
- A worker that dies (the OOM killer) is one WorkerDied naming the job it was running.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Sequence

from ..errors import KgenError

PARENT_POLL_SECONDS = 0.5


class WorkerDied(KgenError):
    """A build worker process ended without a result (killed by a signal, out of memory)."""


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_POLL_SECONDS)
        if os.getppid() != parent:
            os.killpg(0, signal.SIGKILL)


def _start_worker(parent: int) -> None:
    os.setsid()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="kgen-watch-parent").start()


def _kill_workers() -> None:
    """Each worker's process group (the worker and its compiler), and the worker itself in case
    it has not reached setsid yet (then its group is still ours and it has no compiler)."""
    for child in multiprocessing.active_children():
        for kill, target in ((os.killpg, child.pid), (os.kill, child.pid)):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def run_in_workers(fn: Callable[..., Any], jobs: Sequence[tuple], workers: int,
                   on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """fn(*job) for every job, in up to `workers` processes; results in the order of `jobs`;
    on_done(index, result) as each finishes.

    An exception raised by fn propagates (the other workers are stopped first); a worker that
    dies raises WorkerDied saying how many jobs did not finish (the pool cannot tell which job
    the dead worker held); KeyboardInterrupt in the parent kills every worker and propagates.
    """
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=max(1, min(workers, len(jobs) or 1)), mp_context=ctx,
                               initializer=_start_worker, initargs=(os.getpid(),))
    results: list[Any] = [None] * len(jobs)
    finished = 0
    try:
        futures = {pool.submit(fn, *job): i for i, job in enumerate(jobs)}
        for f in as_completed(futures):
            i = futures[f]
            try:
                results[i] = f.result()
            except BrokenProcessPool:
                raise WorkerDied(f"a build worker died (killed by a signal, perhaps out of memory); {len(jobs) - finished} "
                                 f"of {len(jobs)} builds did not finish; try fewer parallel builds with --jobs") from None
            finished += 1
            if on_done:
                on_done(i, results[i])
    except BaseException:
        _kill_workers()
        pool.shutdown(wait=True, cancel_futures=True)  # joins the pool's manager thread: no wake-up at exit on a closed pipe
        raise
    pool.shutdown(wait=True)
    return results
