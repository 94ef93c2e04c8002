"""Compile one generated HIP kernel for the host and run launches of it on CPU tensors.

The source and the bodies it includes are compiled as they ship, with the real kgen_hip.h and
kgen_tile.h; `-include kgen_emu_prelude.h` first defines what the GPU compile gets from clang:
the kernel attributes as host C++ (LDS as one static array per kernel, shared by the fibers of
the workgroup that runs) and the builtins as calls into templates/emu/kgen_emu_rt.cpp. There
every thread of a workgroup is a fiber; a cross-lane builtin (ds_bpermute, readfirstlane, MFMA)
is a rendezvous of its wave's 64 lanes, `s_barrier` one of the workgroup's threads, and
workgroups run one after another. A rendezvous some threads never reach, or readfirstlane of a
value that differs between lanes, is an EmulationError naming the kernel and the thread.
"""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from ..errors import KgenError
from ..paths import templates_dir
from ..toolchain.hip import find_hip_clang

HEADERS = ("hip/kgen_hip.h", "common/kgen_tile.h", "emu/kgen_emu_prelude.h")
RUNTIME = "emu/kgen_emu_rt.cpp"
C_TYPES = {"p": ctypes.c_void_p, "l": ctypes.c_longlong, "i": ctypes.c_int, "f": ctypes.c_float}


class EmulationError(KgenError):
    """A kernel did something the hardware would hang on or that the emulation checks refuse."""


_workdir = tempfile.TemporaryDirectory(prefix="kgen-emu-")


@lru_cache(maxsize=None)
def compiled(source: str, file: str, kernel: str, includes: tuple[tuple[str, str], ...] = ()) -> ctypes.CDLL:
    """The kernel's source (and the bodies it includes) built into a shared library with the
    emulation runtime; once per process and content."""
    digest = hashlib.sha256("\0".join([source, file, kernel, *(t for _, t in includes)]).encode()).hexdigest()[:16]
    folder = Path(_workdir.name) / digest
    folder.mkdir(parents=True, exist_ok=True)
    (folder / file).write_text(source)
    for name, text in includes:
        (folder / name).write_text(text)
    for rel in (*HEADERS, RUNTIME):
        shutil.copy(templates_dir() / rel, folder / Path(rel).name)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined)
    (folder / "launch.cpp").write_text(env.get_template("emu/launch.cpp.j2").render(source=file, kernel=kernel))
    library = folder / f"{kernel}.so"
    cmd = [str(find_hip_clang()), "-x", "c++", "-std=c++17", "-O1", "-fPIC", "-shared", "-w",
           "-include", "kgen_emu_prelude.h", "launch.cpp", Path(RUNTIME).name, "-o", library.name]
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EmulationError(f"{file}: the host compile for emulation failed: "
                             f"{(proc.stderr.strip().splitlines() or ['no message'])[0]}")
    lib = ctypes.CDLL(str(library))
    lib.kgemu_run.restype = ctypes.c_char_p
    lib.kgemu_run.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return lib


def launch(bk: Any, grid: tuple[int, ...], args: list[Any]) -> None:
    """Run kernel `bk` (a kgen.driver.BuiltKernel for a HIP target) over `grid` workgroups with
    `args` in its signature's order (pointers as integers)."""
    if len(args) != len(bk.signature):
        raise EmulationError(f"{bk.file}: {len(args)} arguments for a signature of {len(bk.signature)} ({bk.signature})")
    values = [C_TYPES[kind](a) for kind, a in zip(bk.signature, args)]
    argv = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
    gx, gy, gz = (*grid, 1, 1)[:3]
    error = compiled(bk.source, bk.file, bk.name, tuple(bk.includes)).kgemu_run(argv, gx, gy, gz, bk.threads)
    if error:
        raise EmulationError(f"{bk.name} ({bk.file}): {error.decode()}")


def run_kernel(bk: Any, grid: tuple[int, ...], tensors: dict[str, Any], sizes: dict[str, int],
               scalars: dict[str, float]) -> None:
    """Launch `bk` on CPU tensors (contiguous or strided), its arguments taken as a GPU launch
    takes them (kgen.runtime.op): each tensor's pointer and leading strides, then sizes, scalars."""
    args: list[Any] = []
    for name in bk.arguments["tensors"]:
        x = tensors[name]
        args += [x.data_ptr(), *x.stride()[:-1]]
    args += [int(sizes[s]) for s in bk.arguments["sizes"]]
    args += [float(scalars[s]) for s in bk.arguments["scalars"]]
    launch(bk, grid, args)
