"""Every environment variable kgen reads, in one place.

Nothing else in kgen touches os.environ: a knob is read here, typed, and documented, so that a
person can see every switch that changes kgen's behaviour by reading this file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple


def _path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else None


_TRUE = frozenset({"1", "true", "yes", "on"})


def _flag(name: str) -> bool:
    value = os.environ.get(name)
    return value is not None and value.strip().lower() in _TRUE


@dataclass(frozen=True)
class Knobs:
    cache_dir: Path | None
    """KGEN_CACHE_DIR: where compiled code objects and the launcher live (default: the platform's
    user cache directory for 'kgen', from platformdirs)."""
    nvcc: Path | None
    """KGEN_NVCC: the nvcc to use (default: `nvcc` on PATH, then /usr/local/cuda/bin/nvcc)."""
    hip_clang: Path | None
    """KGEN_HIP_CLANG: the clang that compiles HIP (default: ROCm's amdclang++/hipcc, then clang++-19)."""
    target: str | None
    """KGEN_TARGET: the target to build for at run time instead of the one detected from the GPU."""
    debug_keep_temps: bool
    """KGEN_KEEP_TEMPS=1: keep the temporary build folders of failed builds, for debugging."""
    poison: bool
    """KGEN_POISON=1: fill every freshly allocated output with NaN before the kernels run, so
    that an element a kernel forgets to write shows up (tests set it)."""
    ci: bool
    """CI=true: set by the CI runner; tests then refuse to skip compiler checks for missing tools."""


def knobs() -> Knobs:
    """Read the environment now (tests change it between calls, so nothing is cached)."""
    return Knobs(
        cache_dir=_path("KGEN_CACHE_DIR"),
        nvcc=_path("KGEN_NVCC"),
        hip_clang=_path("KGEN_HIP_CLANG"),
        target=os.environ.get("KGEN_TARGET") or None,
        debug_keep_temps=_flag("KGEN_KEEP_TEMPS"),
        poison=_flag("KGEN_POISON"),
        ci=_flag("CI"),
    )


class CallKnobs(NamedTuple):
    target: str | None
    """KGEN_TARGET, as in Knobs."""
    poison: bool
    """KGEN_POISON, as in Knobs."""


def call_knobs() -> CallKnobs:
    """The two knobs every op call reads, without the paths knobs() parses (on the H200 knobs()
    was about a quarter of an op call's host time, cProfile, docs/PERFORMANCE.md); a named tuple,
    as a frozen dataclass's __init__ costs more than the two reads."""
    return CallKnobs(os.environ.get("KGEN_TARGET") or None, _flag("KGEN_POISON"))
