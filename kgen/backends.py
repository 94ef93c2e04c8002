"""The code generation backends, in one registry: what differs between CUDA and HIP output.

A descriptor names its backend (`backend: cuda` in kgen/hw/data/sm_90.yaml); everything that
depends on it is a field of that backend's `Backend`, so that no other module branches on the
name. A new backend (an emulator, a new GPU family) is one more entry here, plus its templates
and its toolchain module; passes and the driver are untouched.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import TargetError, ToolchainError
from .toolchain.cuda import compile_cuda, find_nvcc
from .toolchain.hip import compile_hip, find_hip_clang
from .toolchain.resources import UNKNOWN_VERSION, CompileResult, version_line


@dataclass(frozen=True)
class Backend:
    name: str  # the descriptors' `backend` field, and the launcher extension's backend argument
    skeleton: str  # the kernel template, under templates/
    headers: tuple[str, ...]  # templates/ files every kernel includes, copied beside its source
    source_suffix: str
    body_suffix: str  # a body shared by several sources, which they include (kgen.codegen.render.render_unit)
    binary_suffix: str
    find_compiler: Callable[[], Path]  # ToolchainError when there is none
    compile: Callable[..., CompileResult]  # (source, arch, include_dirs=, extra_flags=)
    report_columns: tuple[str, ...]  # `kgen build`'s resource columns (kgen.report)
    # the inline assembly's names of the 16-bit float types (a shared body's unit defines the
    # one it is for, kgen.codegen.render.render_unit); empty where the kernels write no assembly
    asm_type_names: tuple[tuple[str, str], ...] = ()
    # runs one of its kernels on CPU tensors in an emulation of the hardware, (kernel, grid,
    # tensors, sizes, scalars); None where there is none
    emulate: Callable[..., None] | None = None


CUDA = Backend("cuda", "cuda/kernel.cu.j2", ("cuda/kgen_cuda.h", "common/kgen_tile.h"), ".cu", ".cuh", ".cubin",
               find_nvcc, compile_cuda, ("regs", "smem", "spills", "HMMA"),
               (("bf16", "bf16"), ("fp16", "f16")))  # PTX ISA, "Fundamental types"


def _emulate_wave64(bk, grid, tensors, sizes, scalars) -> None:
    from .emulate.runner import run_kernel  # ctypes and a host compile: only when emulating

    run_kernel(bk, grid, tensors, sizes, scalars)


HIP = Backend("hip", "hip/kernel.hip.j2", ("hip/kgen_hip.h", "common/kgen_tile.h"), ".hip", ".h", ".hsaco",
              find_hip_clang, compile_hip, ("VGPR", "AGPR", "LDS", "scratch", "occupancy", "MFMA"),
              emulate=_emulate_wave64)
BACKENDS = {b.name: b for b in (CUDA, HIP)}


def backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise TargetError(f"unknown backend {name!r}; accepted: {', '.join(BACKENDS)}") from None


def emulator(target) -> Callable[..., None]:
    """How kernels of `target` run in emulation; a TargetError naming the targets that can."""
    b = backend(target.backend)
    if b.emulate is None:
        from .hw.descriptor import load_target, target_names

        can = [n for n in target_names() if backend(load_target(n).backend).emulate is not None]
        raise TargetError(f"no emulation for {target.name} (a {b.name} target); accepted: {', '.join(can)}")
    return b.emulate


def find_compiler(name: str) -> Path:
    """The compiler backend `name` would use; ToolchainError if there is none."""
    return backend(name).find_compiler()


def available(name: str) -> bool:
    """Whether backend `name` has a compiler here (it may still lack a disassembler)."""
    try:
        find_compiler(name)
    except ToolchainError:
        return False
    return True


def compiler_identity(name: str) -> str:
    """The compiler's version line, part of cache keys, so that a compiler upgrade rebuilds
    everything. Not its path: one release installed at two paths (a wrapper in /usr/local/bin
    here, /usr/local/cuda/bin on the H200 machine) makes the same code objects, and with the path
    in the key a cache filled on one machine missed on the other. A compiler whose version cannot
    be read is keyed by its path as well."""
    path = find_compiler(name)
    version = version_line(path)
    return version if version != UNKNOWN_VERSION else f"{path} {version}"
