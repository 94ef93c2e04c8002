"""Compile generated kernel sources to code objects and report what each kernel costs.

    compile_cuda(source, "sm_90a")  -> CompileResult (.cubin bytes, per-kernel KernelResources)
    compile_hip(source, "gfx942")   -> CompileResult (.hsaco bytes, per-kernel KernelResources)

Nothing is written outside a private temporary folder: callers write `result.binary` where they
want it. A missing compiler or a rejected source raises ToolchainError.
"""
from __future__ import annotations

from pathlib import Path

from kgen.errors import TargetError, ToolchainError
from kgen.toolchain.cuda import compile_cuda, find_nvcc
from kgen.toolchain.hip import compile_hip, find_hip_clang
from kgen.toolchain.resources import CompileResult, KernelResources, spec_location_for, version_line

__all__ = [
    "CompileResult", "KernelResources", "available", "compile_cuda", "compile_hip",
    "compiler_identity", "find_compiler", "spec_location_for",
]

_FINDERS = {"cuda": find_nvcc, "hip": find_hip_clang}


def find_compiler(backend: str) -> Path:
    """The compiler that `backend` ("cuda" or "hip") would use; ToolchainError if there is none."""
    try:
        finder = _FINDERS[backend]
    except KeyError:
        raise TargetError(f"unknown backend {backend!r}; expected one of: cuda, hip") from None
    return finder()


def available(backend: str) -> bool:
    """Whether `backend` has a compiler here (it may still lack a disassembler)."""
    try:
        find_compiler(backend)
    except ToolchainError:
        return False
    return True


def compiler_identity(backend: str) -> str:
    """"<path> <version line>": part of cache keys, so a compiler upgrade rebuilds everything."""
    path = find_compiler(backend)
    return f"{path} {version_line(path)}"
