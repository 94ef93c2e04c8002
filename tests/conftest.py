"""Suite-wide settings.

Under pytest-xdist (the README's `-n auto`) each worker is one process per core, and
tests/test_build.py runs its builds in more: torch's intra-op threads would then oversubscribe the
cores (each worker's torch starts one thread per core), so every worker computes on one thread.
"""
import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """tests/test_build.py first: it builds every variant of every spec for both targets in a pool
    of its own, the longest chain of work in the suite, so under `--dist loadfile` its worker
    starts those builds at once while the other worker runs every other module."""
    items.sort(key=lambda item: item.path.name != "test_build.py")
