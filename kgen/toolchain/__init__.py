"""Compile generated kernel sources to code objects and report what each kernel costs.

    compile_cuda(source, "sm_90a")  -> CompileResult (.cubin bytes, per-kernel KernelResources)
    compile_hip(source, "gfx942")   -> CompileResult (.hsaco bytes, per-kernel KernelResources)

Nothing is written outside a private temporary folder: callers write `result.binary` where they
want it. A missing compiler or a rejected source raises ToolchainError. Which compiler serves which
backend is kgen.backends' business (find_compiler, available, compiler_identity there).
"""
from __future__ import annotations

from kgen.toolchain.cuda import compile_cuda
from kgen.toolchain.hip import compile_hip
from kgen.toolchain.resources import CompileResult, KernelResources, spec_location_for, version_line

__all__ = ["CompileResult", "KernelResources", "compile_cuda", "compile_hip", "spec_location_for", "version_line"]
