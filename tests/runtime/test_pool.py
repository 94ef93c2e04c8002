"""The build worker pool: results in order, errors propagate, a dead worker is one clear error."""
from __future__ import annotations

import math
import os

import pytest

from kgen.runtime.pool import WorkerDied, run_in_workers


def test_results_in_job_order_and_progress():
    done = []
    assert run_in_workers(math.factorial, [(5,), (3,), (4,)], 2, on_done=lambda i, r: done.append((i, r))) == [120, 6, 24]
    assert sorted(done) == [(0, 120), (1, 6), (2, 24)]


def test_an_error_in_a_job_propagates():
    with pytest.raises(ValueError, match="invalid literal"):
        run_in_workers(int, [("12",), ("x",)], 2)


def test_a_worker_that_dies_is_one_clear_error():
    """os.abort kills the worker with SIGABRT, as the OOM killer would with SIGKILL."""
    with pytest.raises(WorkerDied) as e:
        run_in_workers(os.abort, [()], 1)
    assert str(e.value) == ("a build worker died (killed by a signal, perhaps out of memory); 1 of 1 builds did not finish; "
                            "try fewer parallel builds with --jobs")
