"""The kernel launcher: a small pybind11 extension (`_launcher.cpp`) built once per machine.

`get_launcher()` builds the extension through the cache (kgen/runtime/cache.py) the first time,
then imports it from the cache entry; later processes only import it (the warm path: a stat, a
hash of the ~300 KB .so and a dlopen, a few ms). The extension needs no CUDA or ROCm to build: it
dlopen()s the driver library when a kernel is first loaded, so it builds and imports on any machine
with g++ and pybind11.

The extension's functions (backend is "cuda" or "hip"; handles are ints; driver errors raise
RuntimeError "cuda error N (NAME): text in function", and its subclass WrongGpuError when the code
object was built for another GPU):
  load_module(backend, image) -> module   copies the cubin / hsaco and keeps it for the process
  get_function(backend, module, name) -> func
  set_max_dynamic_shared(backend, func, nbytes)   needed above 48 KiB on CUDA; a no-op on AMD
  launch(backend, func, grid, block, shared_bytes, stream, signature, args)
      signature: one char per argument: p = pointer (int address or None), i = int32,
      l = int64, f = float32, T = tensor map (128 bytes); stream 0 is the legacy default stream
  encode_tensor_map(address, elem_bytes, dims, strides, box) -> bytes   (CUDA) a tensor map for
      tensor copies, dims and byte strides innermost first (kgen.codegen.tma)
  current_device(backend) -> int   (CUDA: makes device 0's primary context current if none is)
  device_arch(backend) -> "sm_90"... on CUDA; always "" on HIP (use torch's gcnArchName)
  pack_args_for_test(signature, args) -> bytes   the packed argument storage, for tests

`LoadedKernel` wraps one kernel of one code object: it loads the code object lazily on its first
call on each device and launches with `launch(grid, block, shared_bytes, stream, signature, args)`.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

from ..errors import KgenError, LaunchError, TargetError, ToolchainError
from .cache import Cache, cache_key

MODULE_NAME = "_kgen_launcher"
SOURCE = Path(__file__).with_name("_launcher.cpp")
CXXFLAGS = ("-O2", "-shared", "-fPIC", "-std=c++17", "-fvisibility=hidden")
LIBS = ("-ldl",)
BACKENDS = ("cuda", "hip")
# Above this much dynamic shared memory a CUDA kernel must opt in (cuFuncSetAttribute).
CUDA_DEFAULT_DYNAMIC_SHARED = 48 * 1024

_lock = threading.Lock()
_launcher: ModuleType | None = None
last_build_seconds: float | None = None
"""How long this process's build of the launcher took (None if it found one in the cache)."""
last_load_seconds: float | None = None
"""How long this process's get_launcher() took the first time (build included, if any)."""


def _compiler() -> str:
    gxx = shutil.which("g++")
    if gxx is None:
        raise ToolchainError(
            "g++ was not found on PATH: install a C++17 compiler (for example `apt-get install g++`) "
            "so that kgen can build its kernel launcher."
        )
    return gxx


def _pybind11() -> ModuleType:
    try:
        import pybind11
    except ImportError as e:
        raise ToolchainError(
            "pybind11 is not installed: run `pip install pybind11` so that kgen can build its "
            "kernel launcher."
        ) from e
    return pybind11


def _includes(pybind11: ModuleType) -> list[str]:
    """What `python -m pybind11 --includes` prints, computed in-process."""
    dirs: list[str] = []
    for d in (sysconfig.get_path("include"), sysconfig.get_path("platinclude"), pybind11.get_include()):
        if d and d not in dirs:
            dirs.append(d)
    return [f"-I{d}" for d in dirs]


def _ext_suffix() -> str:
    """What `python3-config --extension-suffix` prints."""
    return sysconfig.get_config_var("EXT_SUFFIX") or importlib.machinery.EXTENSION_SUFFIXES[0]


def _compiler_identity(gxx: str) -> dict[str, Any]:
    """Names the compiler without running it (keeps the warm path free of subprocesses): the
    resolved path (g++ -> x86_64-linux-gnu-g++-12 names the major version) plus its size and mtime,
    which change whenever the package is upgraded. The version text goes into the manifest."""
    real = os.path.realpath(gxx)
    st = os.stat(real)
    return {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def launcher_key_parts() -> dict[str, Any]:
    pybind11 = _pybind11()
    gxx = _compiler()
    return {
        "what": "kgen-launcher",
        "source_sha256": hashlib.sha256(SOURCE.read_bytes()).hexdigest(),
        "python": sys.version,
        "ext_suffix": _ext_suffix(),
        "pybind11": pybind11.__version__,
        "compiler": _compiler_identity(gxx),
        "flags": [*CXXFLAGS, *LIBS],
    }


def _build(tmpdir: Path) -> None:
    global last_build_seconds
    pybind11 = _pybind11()
    gxx = _compiler()
    out = tmpdir / f"{MODULE_NAME}{_ext_suffix()}"
    cmd = [gxx, *CXXFLAGS, *_includes(pybind11), str(SOURCE), "-o", str(out), *LIBS]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise ToolchainError(
            f"g++ could not build kgen's kernel launcher (exit {proc.returncode}): "
            f"{' '.join(cmd)}\n{proc.stderr.strip()[-4000:]}"
        )
    version = subprocess.run([gxx, "--version"], capture_output=True, text=True).stdout
    last_build_seconds = elapsed
    manifest = {
        "what": "kgen-launcher",
        "module": out.name,
        "command": [*cmd[:-2], out.name, *LIBS],  # -o <the module>, relative to the entry
        "compiler_version": version.splitlines()[0] if version else "",
        "pybind11": pybind11.__version__,
        "python": sys.version,
        "build_seconds": round(elapsed, 3),
    }
    (tmpdir / "manifest.json").write_text(json.dumps(manifest, indent=1))


def launcher_path(cache: Cache | None = None) -> Path:
    """The launcher's .so in the cache, built first if it is not there (or not intact)."""
    cache = cache or Cache()
    entry = cache.get_or_build(cache_key(launcher_key_parts()), _build)
    return entry / f"{MODULE_NAME}{_ext_suffix()}"


def import_launcher(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def get_launcher() -> ModuleType:
    """The launcher extension, built (once per machine) and imported (once per process)."""
    global _launcher, last_load_seconds
    if _launcher is not None:
        return _launcher
    with _lock:
        if _launcher is None:
            start = time.perf_counter()
            module = import_launcher(launcher_path())
            last_load_seconds = time.perf_counter() - start
            _launcher = module
    return _launcher


def _as_kgen_error(e: BaseException, what: str, lib: ModuleType | None) -> KgenError:
    """A code object built for another GPU is a TargetError; any other driver error a LaunchError."""
    wrong_gpu = lib is not None and isinstance(e, lib.WrongGpuError)
    return (TargetError if wrong_gpu else LaunchError)(f"{what}: {e}")


class LoadedKernel:
    """One kernel of a code object, loaded lazily (once per device) on its first call there.

    `dynamic_shared_bytes` is the most dynamic shared memory the kernel will be launched with; on
    CUDA, above 48 KiB, the kernel is allowed that much (cuFuncSetAttribute) when it is loaded, and
    again if a call asks for more.
    """

    __slots__ = ("backend", "image", "name", "dynamic_shared_bytes", "_lib", "_funcs")

    def __init__(self, backend: str, image: bytes, name: str, dynamic_shared_bytes: int = 0):
        if backend not in BACKENDS:
            raise TargetError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
        self.backend = backend
        self.image = bytes(image)
        self.name = name
        self.dynamic_shared_bytes = int(dynamic_shared_bytes)
        self._lib: ModuleType | None = None
        self._funcs: dict[int, list[int]] = {}  # device -> [function handle, shared bytes allowed]

    def _load(self, device: int) -> list[int]:
        lib = self._lib
        assert lib is not None
        module = lib.load_module(self.backend, self.image)
        func = lib.get_function(self.backend, module, self.name)
        slot = [func, CUDA_DEFAULT_DYNAMIC_SHARED]
        self._funcs[device] = slot
        self._allow_shared(slot, self.dynamic_shared_bytes)
        return slot

    def _allow_shared(self, slot: list[int], nbytes: int) -> None:
        if nbytes > slot[1]:  # the extension raises CUDA's 48 KiB default; a no-op on HIP
            assert self._lib is not None
            self._lib.set_max_dynamic_shared(self.backend, slot[0], nbytes)
            slot[1] = nbytes

    def __call__(
        self,
        grid: Sequence[int],
        block: Sequence[int],
        shared_bytes: int,
        stream: int,
        signature: str,
        args: Sequence[Any],
    ) -> None:
        try:
            lib = self._lib
            if lib is None:
                lib = self._lib = get_launcher()
            device = lib.current_device(self.backend)
            slot = self._funcs.get(device)
            if slot is None:
                slot = self._load(device)
            if shared_bytes > slot[1]:
                self._allow_shared(slot, shared_bytes)
            lib.launch(self.backend, slot[0], grid, block, shared_bytes, stream, signature, args)
        except RuntimeError as e:
            raise _as_kgen_error(e, f"kernel {self.name!r} ({self.backend})", self._lib) from e
