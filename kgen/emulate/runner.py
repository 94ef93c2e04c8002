"""Compile one generated HIP kernel for the host and run launches of it on CPU tensors.

The source and the bodies it includes are compiled as they ship, with the real kgen_hip.h and
kgen_tile.h; `-include kgen_emu_prelude.h` first defines what the GPU compile gets from clang:
the kernel attributes as host C++ (LDS as static arrays in one section, shared by the fibers of
the workgroup that runs) and the builtins as calls into templates/emu/kgen_emu_rt.cpp. There
every thread of a workgroup is a fiber; a cross-lane builtin (ds_bpermute, readfirstlane, MFMA)
is a rendezvous of its wave's 64 lanes, `s_barrier` one of the workgroup's threads, and
workgroups run one after another. Every load and store of the kernel's code is checked
(kgen_emu_memcheck.cpp): against the launch's tensors, the LDS allocation and the thread's
private memory, and in LDS for races between barriers and reads of bytes never written.
A rendezvous some threads never reach, readfirstlane of a value that differs between lanes, or
a failed memory check is an EmulationError naming the kernel, the thread and, through the
library's line tables, the generated line and its spec position.
"""
from __future__ import annotations

import ctypes
import re
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from ..backends import compiler_identity
from ..errors import KgenError
from ..paths import templates_dir
from ..runtime.cache import Cache, cache_key
from ..toolchain.hip import find_hip_clang, find_llvm_tool
from ..toolchain.resources import first_error, spec_location_for

HEADERS = ("hip/kgen_hip.h", "common/kgen_tile.h", "emu/kgen_emu_prelude.h", "emu/kgen_emu_rt.h")
RUNTIME = ("emu/kgen_emu_rt.cpp", "emu/kgen_emu_memcheck.cpp")
C_TYPES = {"p": ctypes.c_void_p, "l": ctypes.c_longlong, "i": ctypes.c_int, "f": ctypes.c_float}
# The kernel's own code calls the memory checks (kgen_emu_memcheck.cpp) before every load, store
# and block copy: AddressSanitizer's instrumentation as calls, without its shadow memory, stack
# or global redzones, or runtime (LLVM's AddressSanitizer.cpp options)
INSTRUMENT = ("-fsanitize=address", "-fsanitize-address-use-after-return=never",
              "-mllvm", "-asan-instrumentation-with-call-threshold=0",
              "-mllvm", "-asan-stack=0", "-mllvm", "-asan-globals=0",
              # also the accesses it can prove in bounds of a global (LDS at a constant offset)
              "-mllvm", "-asan-opt-globals=0")


class EmulationError(KgenError):
    """A kernel did something the hardware would hang on or that the emulation checks refuse."""


def _compile(cmd: list[str], cwd: Path, what: str) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EmulationError(f"{what}: the host compile for emulation failed: {first_error(proc.stderr).text}")


def _texts(files: tuple[str, ...]) -> dict[str, str]:
    return {Path(rel).name: (templates_dir() / rel).read_text() for rel in files}


@lru_cache(maxsize=None)
def _compiler() -> tuple[str, str]:
    """The host compiler (the HIP backend's clang) and its identity, for the cache keys."""
    return str(find_hip_clang()), compiler_identity("hip")


def _cached(parts: dict[str, Any], files: dict[str, str], cmd: list[str], what: str, output: str) -> Path:
    """`output`, built by `cmd` in a folder holding `files`, through kgen's on-disk cache (keyed
    by every input): each library is compiled once, whichever process (a pytest-xdist worker, a
    later `kgen check`) asks first."""
    def build(folder: Path) -> None:
        for name, text in files.items():
            (folder / name).write_text(text)
        _compile(cmd, folder, what)

    key = cache_key({"emulation": parts, "files": files, "command": cmd, "compiler": _compiler()[1]})
    return Cache().get_or_build(key, build) / output


@lru_cache(maxsize=None)
def _runtime() -> ctypes.CDLL:
    """The emulation runtime (the builtins, the memory checks' entry points, the scheduler) as one
    library, compiled without the instrumentation, and loaded with its symbols global: every
    kernel's library takes them from it, so its state (the threads' stacks) is one."""
    cmd = [_compiler()[0], "-x", "c++", "-std=c++17", "-O1", "-fPIC", "-shared", "-w",
           *(Path(rel).name for rel in RUNTIME), "-o", "libkgemu.so"]
    library = _cached({"runtime": 1}, _texts((*HEADERS, *RUNTIME)), cmd, "the emulation runtime", "libkgemu.so")
    return ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)


@dataclass
class Library:
    """A kernel built for the host: the loaded library and what its errors are read against."""
    lib: ctypes.CDLL
    runtime: ctypes.CDLL  # libkgemu.so, which the kernel's library calls
    path: Path
    sources: dict[str, str]  # file name -> text: the kernel's source and the bodies it includes


@lru_cache(maxsize=None)
def compiled(source: str, file: str, kernel: str, includes: tuple[tuple[str, str], ...] = ()) -> Library:
    """The kernel's source (and the bodies it includes; a header given there replaces kgen's own)
    built into a shared library that calls the emulation runtime; once per content."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined)
    files = {**_texts(HEADERS), file: source, **dict(includes),
             "launch.cpp": env.get_template("emu/launch.cpp.j2").render(source=file, kernel=kernel)}
    # -O0: a fifth of -O1's compile time, which bounds a check, and as fast to run. Line tables,
    # so that an error names the generated line (and through it the spec's).
    cmd = [_compiler()[0], "-x", "c++", "-std=c++17", "-O0", "-fPIC", "-shared", "-w", "-gline-tables-only",
           *INSTRUMENT, "-include", "kgen_emu_prelude.h", "launch.cpp", "-o", f"{kernel}.so"]
    library = _cached({"kernel": kernel}, files, cmd, file, f"{kernel}.so")
    runtime = _runtime()
    lib = ctypes.CDLL(str(library))
    lib.kgemu_run.restype = ctypes.c_char_p
    lib.kgemu_run.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_void_p),
                              ctypes.POINTER(ctypes.c_longlong)]
    runtime.kgemu_error_pc.restype = ctypes.c_void_p
    return Library(lib, runtime, library, {file: source, **dict(includes)})


def _where(built: Library) -> str:
    """' at FILE:LINE (spec L:C)' for the kernel code the last error arose in, when the
    symbolizer can tell."""
    pc = built.runtime.kgemu_error_pc()
    symbolizer = find_llvm_tool("llvm-symbolizer", find_hip_clang())
    if not pc or symbolizer is None:
        return ""
    base = _load_base(built.path)
    if base is None:
        return ""
    proc = subprocess.run([str(symbolizer), f"--obj={built.path}", "--inlining", hex(pc - base - 1)],
                          capture_output=True, text=True)
    for line in proc.stdout.splitlines():  # innermost frame first: the first in a generated file
        m = re.match(r"(.+):(\d+):\d+$", line.strip())
        if m and Path(m.group(1)).name in built.sources and int(m.group(2)) > 0:
            name, number = Path(m.group(1)).name, int(m.group(2))
            spec = spec_location_for(built.sources[name], number)
            return f" at {name}:{number}" + (f" (spec {spec})" if spec else "")
    return ""


def _load_base(path: Path) -> int | None:
    """Where the dynamic loader put the library (its first mapping, /proc/self/maps)."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    starts = [int(line.split("-")[0], 16) for line in maps if line.endswith(str(path.resolve()))]
    return min(starts) if starts else None


def launch(bk: Any, grid: tuple[int, ...], args: list[Any], regions: dict[str, tuple[int, int]] | None = None) -> None:
    """Run kernel `bk` (a kgen.driver.BuiltKernel for a HIP target) over `grid` workgroups with
    `args` in its signature's order (pointers as integers). `regions`: name -> (address, bytes)
    of the memory the kernel may access besides its LDS and private memory."""
    if len(args) != len(bk.signature):
        raise EmulationError(f"{bk.file}: {len(args)} arguments for a signature of {len(bk.signature)} ({bk.signature})")
    values = [C_TYPES[kind](a) for kind, a in zip(bk.signature, args)]
    argv = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
    regions = regions or {}
    names = (ctypes.c_char_p * max(1, len(regions)))(*[n.encode() for n in regions])
    ptrs = (ctypes.c_void_p * max(1, len(regions)))(*[a for a, _ in regions.values()])
    sizes = (ctypes.c_longlong * max(1, len(regions)))(*[b for _, b in regions.values()])
    gx, gy, gz = (*grid, 1, 1)[:3]
    built = compiled(bk.source, bk.file, bk.name, tuple(bk.includes))
    error = built.lib.kgemu_run(argv, gx, gy, gz, bk.threads, len(regions), names, ptrs, sizes)
    if error:
        raise EmulationError(f"{bk.name} ({bk.file}): {error.decode()}{_where(built)}")


def extent(x: Any) -> int:
    """The bytes a strided tensor's elements span, from its first to past its last."""
    if x.numel() == 0:
        return 0
    return (1 + sum((n - 1) * abs(st) for n, st in zip(x.shape, x.stride()))) * x.element_size()


def run_kernel(bk: Any, grid: tuple[int, ...], tensors: dict[str, Any], sizes: dict[str, int],
               scalars: dict[str, float | int]) -> None:
    """Launch `bk` on CPU tensors (contiguous or strided), its arguments taken as a GPU launch
    takes them (kgen.runtime.op): each tensor's pointer and leading strides, then sizes, scalars."""
    args: list[Any] = []
    regions = {}
    for name in bk.arguments["tensors"]:
        x = tensors[name]
        args += [x.data_ptr(), *x.stride()[:-1]]
        regions[name] = (x.data_ptr(), extent(x))
    args += [int(sizes[s]) for s in bk.arguments["sizes"]]
    at = len(args)  # the scalars' signature letters: 'i' int32, 'l' int64, 'f' fp32
    args += [float(scalars[s]) if bk.signature[at + j] == "f" else int(scalars[s]) for j, s in enumerate(bk.arguments["scalars"])]
    launch(bk, grid, args, regions)
