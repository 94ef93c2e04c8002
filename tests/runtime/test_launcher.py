"""The launcher extension: builds and imports without a GPU, packs arguments like C, fails clearly.

Tests marked `gpu` load a cubin that nvcc builds at test time and launch it; they are skipped
unless torch sees a CUDA GPU of compute capability 9.0 (an H100 / H200).
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kgen.errors import LaunchError, TargetError, ToolchainError
from kgen.knobs import knobs
from kgen.runtime import launcher
from kgen.runtime.cache import read_manifest

REPO = Path(__file__).resolve().parents[2]
STRUCT_CODES = {"p": "P", "i": "i", "l": "q", "f": "f"}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """A fresh cache for this module's tests, with the launcher built into it once."""
    root = tmp_path_factory.mktemp("kgen-cache")
    saved = launcher._launcher
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KGEN_CACHE_DIR", str(root))
        mp.setattr(launcher, "_launcher", None)
        start = time.perf_counter()
        launcher.get_launcher()
        print(f"\nlauncher build + import: {time.perf_counter() - start:.2f} s "
              f"(g++ alone: {launcher.last_build_seconds:.2f} s)")
        yield root
    launcher._launcher = saved


@pytest.fixture(scope="module")
def lib(cache_dir):
    return launcher._launcher if launcher._launcher is not None else launcher.get_launcher()


def test_launcher_builds_and_imports(cache_dir, lib):
    for name in ("load_module", "get_function", "set_max_dynamic_shared", "launch", "device_arch",
                 "current_device", "pack_args_for_test", "encode_tensor_map"):
        assert callable(getattr(lib, name)), name
    assert issubclass(lib.WrongGpuError, RuntimeError)
    so = Path(lib.__file__)
    assert so.parent.parent.parent == cache_dir / "entries"
    manifest = read_manifest(so.parent)
    assert so.name in manifest["files"] and manifest["what"] == "kgen-launcher"
    assert manifest["compiler_version"]


def test_warm_import_is_fast(cache_dir, lib):
    """A new process finds the launcher in the cache: no build, just a hash check and a dlopen."""
    code = (
        "import json, time\n"
        "from kgen.runtime import launcher\n"
        "t = time.perf_counter(); m = launcher.get_launcher(); t = time.perf_counter() - t\n"
        "print(json.dumps({'seconds': t, 'built': launcher.last_build_seconds, 'file': m.__file__}))\n"
    )
    env = {**os.environ, "KGEN_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    print(f"\nwarm get_launcher(): {result['seconds'] * 1e3:.1f} ms")
    assert result["built"] is None
    assert result["file"] == lib.__file__
    assert result["seconds"] < 0.5  # a few ms in practice; loose for busy CI machines


@pytest.mark.parametrize(
    "signature,args",
    [
        ("p", (0x7F00DEADBEEF,)),
        ("i", (-7,)),
        ("l", (-(2**40),)),
        ("f", (0.1,)),
        ("pifl", (0x1000, 3, 2.5, 2**62)),
        ("ifp", (1, 2.0, 0xFFFFFFFFFFFFFFFF)),
        ("fiflp", (1.0, -2, 3.5, -4, 5)),
        ("iiiil", (1, 2, 3, 4, 5)),
        ("ilil", (2**31 - 1, -(2**63), -(2**31), 2**63 - 1)),
        ("ffp", (float("inf"), -0.0, 0)),
        ("", ()),
    ],
)
def test_pack_args_matches_c_layout(lib, signature, args):
    expected = struct.pack("@" + "".join(STRUCT_CODES[c] for c in signature), *args)
    assert lib.pack_args_for_test(signature, args) == expected
    assert lib.pack_args_for_test(signature, list(args)) == expected


def test_pack_args_edge_cases(lib):
    assert lib.pack_args_for_test("ip", (1, None)) == struct.pack("@iP", 1, 0)
    assert lib.pack_args_for_test("i", (True,)) == struct.pack("@i", 1)
    assert lib.pack_args_for_test("f", (3,)) == struct.pack("@f", 3.0)
    # a tensor map: its 128 bytes at the next 128-byte boundary (CUtensorMap's alignment)
    tmap = bytes(range(128))
    assert lib.pack_args_for_test("iT", (7, tmap)) == struct.pack("@i", 7) + bytes(124) + tmap
    sig = "pi" * 128  # 256 arguments, the most a kernel takes (ssd_bwd's widest takes 106)
    args = tuple(v for k in range(128) for v in (k * 16, k))
    assert lib.pack_args_for_test(sig, args) == struct.pack("@" + "Pi" * 128, *args)


@pytest.mark.parametrize(
    "signature,args,error,match",
    [
        ("ii", (1,), TypeError, "names 2 arguments but 1"),
        ("x", (1,), ValueError, "unknown signature character 'x'"),
        ("i", (2**31,), OverflowError, r"argument 0 \(signature 'i'\) must be an int32"),
        ("pi", (0, 1.5), TypeError, r"argument 1 \(signature 'i'\)"),
        ("l", (2**63,), OverflowError, "int64"),
        ("p", (-1,), OverflowError, "address"),
        ("p", (1.0,), TypeError, "int address"),
        ("T", (bytes(64),), TypeError, r"argument 0 \(signature 'T'\) must be the 128 bytes of a tensor map"),
        ("T" * 9, (bytes(128),) * 9, ValueError, "at most 8 tensor maps"),
        ("f", ("x",), TypeError, "must be a float"),
        ("i" * 257, (0,) * 257, ValueError, "at most 256 arguments here, got 257"),
    ],
)
def test_pack_args_errors(lib, signature, args, error, match):
    with pytest.raises(error, match=match):
        lib.pack_args_for_test(signature, args)


@pytest.mark.parametrize("args, match", [
    ((0, 2, [64, 8], [128, 256], [64, 8]), "a stride for each but the first"),
    ((0, 2, [64] * 6, [128] * 5, [64] * 6), "1 to 5 dims"),
    ((0, 3, [64, 8], [192], [64, 8]), "1, 2 or 4 bytes, not 3"),
])
def test_encode_tensor_map_checks_its_arguments_first(lib, args, match):
    """Before it looks for the driver, so that the message is the same on a machine without one."""
    with pytest.raises(ValueError, match=match):
        lib.encode_tensor_map(*args)


def test_launch_checks_its_arguments(lib):
    with pytest.raises(ValueError, match="backend must be 'cuda' or 'hip'"):
        lib.launch("metal", 0, (1, 1, 1), (1, 1, 1), 0, 0, "", ())
    with pytest.raises(TypeError, match="grid must be a tuple of 3"):
        lib.launch("cuda", 0, (1, 1), (1, 1, 1), 0, 0, "", ())
    with pytest.raises(ValueError, match="block must be 3 ints >= 1"):
        lib.launch("cuda", 0, (1, 1, 1), (0, 1, 1), 0, 0, "", ())
    with pytest.raises(TypeError, match="names 1 arguments but 0"):
        lib.launch("cuda", 0, (1, 1, 1), (1, 1, 1), 0, 0, "i", ())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error path")
def test_load_without_gpu_raises_clearly(lib):
    with pytest.raises(RuntimeError, match=r"libcuda\.so\.1|cuda error \d+ \(CUDA_ERROR_\w+\)"):
        lib.load_module("cuda", b"\x7fELF not a cubin")
    with pytest.raises(RuntimeError, match=r"libamdhip64|hip error \d+"):
        lib.load_module("hip", b"\x7fELF not a code object")
    assert lib.device_arch("hip") == ""
    kernel = launcher.LoadedKernel("cuda", b"\x7fELF", "add_one")
    with pytest.raises(LaunchError, match=r"kernel 'add_one' \(cuda\).*(libcuda\.so\.1|cuda error)"):
        kernel((1, 1, 1), (32, 1, 1), 0, 0, "pi", (0, 1))


def test_loaded_kernel_refuses_unknown_backend():
    with pytest.raises(TargetError, match="backend must be one of cuda, hip"):
        launcher.LoadedKernel("metal", b"", "k")


def test_missing_toolchain_is_one_clear_sentence(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no g++ here
    with pytest.raises(ToolchainError, match=r"g\+\+ was not found on PATH: install"):
        launcher.launcher_key_parts()
    monkeypatch.setitem(sys.modules, "pybind11", None)  # import pybind11 -> ImportError
    with pytest.raises(ToolchainError, match="pip install pybind11"):
        launcher.launcher_key_parts()


# ---- on a GPU ----------------------------------------------------------------------------------

KERNELS = r"""
extern "C" __global__ void add_one(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
// y = a * x + b, with every argument kind and padding between them (p p f l i).
extern "C" __global__ void axpb(float* y, const float* x, float a, long long n, int b) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + (float)b;
}
// Uses `nfloats` floats of dynamic shared memory (more than 48 KiB): x[i] = 2 * x[i] through it.
extern "C" __global__ void through_shared(float* x, int n, int nfloats) {
  extern __shared__ float buf[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int slot = nfloats - blockDim.x + threadIdx.x;  // the far end of the buffer
  buf[slot] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) x[i] = 2.0f * buf[slot];
}
"""


def _nvcc() -> str | None:
    configured = knobs().nvcc
    if configured is not None:
        return str(configured)
    return shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


def _hopper_gpu() -> bool:
    return (torch.cuda.is_available() and torch.version.hip is None
            and torch.cuda.get_device_capability() == (9, 0))


gpu = pytest.mark.skipif(not _hopper_gpu() or _nvcc() is None,
                         reason="needs an sm_90 CUDA GPU (H100/H200) and nvcc")


def _cubin(tmp_path: Path, arch: str = "90a") -> bytes:
    src = tmp_path / "kernels.cu"
    src.write_text(KERNELS)
    out = tmp_path / f"kernels_{arch}.cubin"
    subprocess.run([_nvcc(), "-cubin", f"-gencode=arch=compute_{arch},code=sm_{arch}", str(src),
                    "-o", str(out)], check=True, capture_output=True, text=True)
    return out.read_bytes()


@pytest.mark.gpu
@gpu
def test_gpu_add_one(lib, tmp_path):
    cubin = _cubin(tmp_path)
    n = 1000
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    kernel = launcher.LoadedKernel("cuda", cubin, "add_one")
    stream = torch.cuda.current_stream().cuda_stream
    kernel(((n + 255) // 256, 1, 1), (256, 1, 1), 0, stream, "pi", (x.data_ptr(), n))
    torch.cuda.synchronize()
    assert torch.equal(x, torch.arange(n, dtype=torch.float32, device="cuda") + 1)
    assert lib.device_arch("cuda") == "sm_90"
    assert lib.current_device("cuda") == torch.cuda.current_device()

    # every argument kind, with padding between them; and a side stream
    y = torch.empty(n, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    axpb = launcher.LoadedKernel("cuda", cubin, "axpb")
    axpb((4, 1, 1), (256, 1, 1), 0, side.cuda_stream, "ppfli", (y.data_ptr(), x.data_ptr(), 0.5, n, -3))
    side.synchronize()
    torch.testing.assert_close(y, 0.5 * x - 3)

    # 100 KiB of dynamic shared memory needs cuFuncSetAttribute (done on load)
    nbytes = 100 * 1024
    big = launcher.LoadedKernel("cuda", cubin, "through_shared", dynamic_shared_bytes=nbytes)
    big((4, 1, 1), (256, 1, 1), nbytes, stream, "pii", (x.data_ptr(), n, nbytes // 4))
    torch.cuda.synchronize()
    torch.testing.assert_close(x, 2 * (torch.arange(n, dtype=torch.float32, device="cuda") + 1))

    # timing of the warm launch path, for the record
    for _ in range(10):
        kernel(((n + 255) // 256, 1, 1), (256, 1, 1), 0, stream, "pi", (x.data_ptr(), n))
    torch.cuda.synchronize()
    count = 2000
    start = time.perf_counter()
    for _ in range(count):
        kernel(((n + 255) // 256, 1, 1), (256, 1, 1), 0, stream, "pi", (x.data_ptr(), n))
    host = (time.perf_counter() - start) / count
    torch.cuda.synchronize()
    print(f"\nLoadedKernel.__call__ host time: {host * 1e6:.2f} us per launch")


@pytest.mark.gpu
@gpu
def test_gpu_code_object_for_another_gpu(lib, tmp_path):
    cubin = _cubin(tmp_path, arch="80")
    kernel = launcher.LoadedKernel("cuda", cubin, "add_one")
    x = torch.zeros(4, device="cuda")
    with pytest.raises(TargetError, match="built for a different GPU than this one"):
        kernel((1, 1, 1), (4, 1, 1), 0, 0, "pi", (x.data_ptr(), 4))


@pytest.mark.gpu
@gpu
def test_gpu_unknown_kernel_name(lib, tmp_path):
    kernel = launcher.LoadedKernel("cuda", _cubin(tmp_path), "no_such_kernel")
    with pytest.raises(LaunchError, match=r"cuda error 500 \(CUDA_ERROR_NOT_FOUND\).*no_such_kernel"):
        kernel((1, 1, 1), (1, 1, 1), 0, 0, "", ())
