"""clang (HIP mode): generated HIP source -> AMDGPU code object (.hsaco), with its resources.

The generated HIP is self-contained (no HIP headers, no device libraries: only clang attributes
and __builtin_amdgcn_*), so any clang with the AMDGPU target works: ROCm's amdclang++ or hipcc,
or a distribution's clang++-19 with lld. One compiler run gives the code object and, through
-Rpass-analysis=kernel-resource-usage, the occupancy remarks on stderr; llvm-readelf then reads
the code object's metadata and llvm-objdump its MFMA instructions.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
import time
from pathlib import Path

from kgen.errors import TargetError, ToolchainError
from kgen.knobs import knobs
from kgen.toolchain.resources import (
    CompileResult, KernelResources, build_dir, compile_error,
    is_executable, parse_amdgpu_disasm, parse_amdgpu_metadata, parse_resource_remarks, run_tool,
    source_arg, version_line)

_ROCM_LLVM_BIN = Path("/opt/rocm/llvm/bin")
_ROCM_BIN = Path("/opt/rocm/bin")
_MIN_CLANG_FOR_GFX942 = 17  # gfx942 (MI300) arrived in LLVM 17
_INSTALL_HINT = "install ROCm, or on Debian/Ubuntu `apt-get install clang-19 lld-19`"


def _clang_major(path: Path) -> int:
    m = re.search(r"clang version (\d+)", version_line(path))
    return int(m.group(1)) if m else 0


def find_hip_clang() -> Path:
    """KGEN_HIP_CLANG, else amdclang++, hipcc, clang++-19, then clang++ if new enough."""
    override = knobs().hip_clang
    if override is not None:
        if is_executable(override):
            return override
        raise ToolchainError(
            f"no HIP compiler found (KGEN_HIP_CLANG={override} is not an executable file); "
            f"{_INSTALL_HINT}, or set KGEN_HIP_CLANG to a clang that exists")
    candidates = [shutil.which("amdclang++"), _ROCM_LLVM_BIN / "amdclang++",
                  shutil.which("hipcc"), _ROCM_BIN / "hipcc", shutil.which("clang++-19")]
    for candidate in candidates:
        if candidate and is_executable(Path(candidate)):
            return Path(candidate)
    plain = shutil.which("clang++")
    if plain and _clang_major(Path(plain)) >= _MIN_CLANG_FOR_GFX942:
        return Path(plain)
    raise ToolchainError(
        "no HIP compiler found (looked for amdclang++, hipcc, clang++-19 and clang++ "
        f"{_MIN_CLANG_FOR_GFX942} or newer); {_INSTALL_HINT}, or set KGEN_HIP_CLANG")


def find_llvm_tool(name: str, compiler: Path) -> Path | None:
    """llvm-readelf / llvm-objdump of the compiler's own LLVM, else a versioned or plain one.

    Not the compiler's folder as found: /usr/bin/clang++-19 sits beside /usr/bin/llvm-objdump of
    another LLVM (Debian's default 14), too old to know gfx942. The resolved folder
    (/usr/lib/llvm-19/bin) holds the matching tools.
    """
    for d in (compiler.resolve().parent, _ROCM_LLVM_BIN):
        if is_executable(d / name):
            return d / name
    major = _clang_major(compiler)
    for candidate in ([f"{name}-{major}"] if major else []) + [name]:
        if found := shutil.which(candidate):
            return Path(found)
    return None


def check_arch(arch: str) -> str:
    """The processor without target features: "gfx942:sramecc+:xnack-" -> "gfx942"."""
    if not re.fullmatch(r"gfx[0-9a-f]{3,4}(:[a-z0-9]+[+-])*", arch):
        raise TargetError(f"unknown AMD arch {arch!r}; expected gfx<id> with optional features, "
                          "like gfx942, gfx90a or gfx942:xnack-")
    return arch.split(":")[0]


def amd_kernel_resources(metadata: list[dict[str, str]], remarks: dict[str, dict[str, str]],
                         ) -> dict[str, KernelResources]:
    """Merge the code object's metadata (authoritative) with the remarks (arch VGPRs, occupancy).

    On gfx90a/gfx942 `.vgpr_count` is the unified total (arch VGPRs rounded up, plus AGPRs), so
    the architectural count comes from the remark when there is one.
    """
    def num(d: dict[str, str], key: str, default: int = 0) -> int:
        try:
            return int(d.get(key, default))
        except ValueError:
            return default

    out = {}
    names = [k["name"] for k in metadata if "name" in k] or list(remarks)
    by_name = {k.get("name"): k for k in metadata}
    for name in names:
        meta, rem = by_name.get(name, {}), remarks.get(name, {})
        agprs = num(meta, "agpr_count", num(rem, "AGPRs"))
        if "VGPRs" in rem:
            vgprs = num(rem, "VGPRs")
        else:
            vgprs = max(num(meta, "vgpr_count") - agprs, 0)
        occ = rem.get("Occupancy [waves/SIMD]")
        out[name] = KernelResources(
            name=name, registers=vgprs, agprs=agprs,
            sgprs=num(meta, "sgpr_count", num(rem, "SGPRs")),
            shared_bytes=num(meta, "group_segment_fixed_size", num(rem, "LDS Size [bytes/block]")),
            spill_bytes=num(meta, "private_segment_fixed_size",
                            num(rem, "ScratchSize [bytes/lane]")),
            occupancy=int(occ) if occ and occ.isdigit() else None,
            wavefront_size=num(meta, "wavefront_size") or None,
            max_workgroup_size=num(meta, "max_flat_workgroup_size") or None,
        )
    return out


def _with_matrix_instrs(resources: dict[str, KernelResources], compiler: Path, hsaco: Path,
                        mcpu: str, cwd: Path) -> tuple[dict[str, KernelResources], str]:
    objdump = find_llvm_tool("llvm-objdump", compiler)
    if objdump is None:
        return resources, "\n[kgen] no llvm-objdump found: matrix_instrs left empty\n"
    rc, text = run_tool([str(objdump), "-d", f"--mcpu={mcpu}", str(hsaco)], cwd)
    if rc != 0:
        return resources, f"\n[kgen] llvm-objdump failed, matrix_instrs left empty:\n{text}"
    found = parse_amdgpu_disasm(text)
    return {k: dataclasses.replace(r, matrix_instrs=found.get(k, ()), disasm_tool=objdump.name)
            for k, r in resources.items()}, ""


def compile_hip(source: Path, arch: str, include_dirs: list[Path] = (),
                extra_flags: list[str] = ()) -> CompileResult:
    """Compile one generated .hip to a code object for `arch` (gfx942, gfx90a, ...)."""
    source = Path(source)
    mcpu = check_arch(arch)
    clang = find_hip_clang()
    if not source.is_file():
        raise ToolchainError(f"generated source {source} does not exist")
    cwd = Path.cwd()
    started = time.monotonic()
    with build_dir("kgen-hip-") as tmp:
        out = tmp / "kernel.hsaco"
        # --cuda-device-only + --no-gpu-bundle-output: a bare code object, no host side and no
        # offload bundle. -nogpulib -nogpuinc: no ROCm device libraries or headers needed.
        # The remark pass prints occupancy and arch VGPRs during this same run (checked with
        # clang 19: the object is still written), so no second -S compile is needed.
        argv = [str(clang), "-x", "hip", f"--offload-arch={arch}", "--cuda-device-only",
                "-nogpulib", "-nogpuinc", "--no-gpu-bundle-output", "-O3", "-std=c++17",
                "-Rpass-analysis=kernel-resource-usage", *[f"-I{d}" for d in include_dirs],
                *extra_flags, source_arg(source, cwd), "-o", str(out)]
        rc, log = run_tool(argv, cwd)
        if rc != 0 or not out.is_file():
            exc = compile_error(log, source, cwd)
            if "ld.lld" in log:  # clang found, its AMDGPU linker not
                exc.message += "\n  (clang needs ld.lld to link AMDGPU code objects: install lld)"
                exc.args = (exc.message,)
            raise exc
        note = ""
        metadata: list[dict[str, str]] = []
        readelf = find_llvm_tool("llvm-readelf", clang)
        if readelf is None:
            # The remarks carry the same numbers, so the result is still complete.
            note = "\n[kgen] no llvm-readelf found: resources taken from the remarks alone\n"
        else:
            rc, notes = run_tool([str(readelf), "--notes", str(out)], cwd)
            if rc != 0:
                last = (notes.strip().splitlines() or ["no output"])[-1]
                raise ToolchainError(f"{readelf} --notes failed on the code object: {last}")
            metadata = parse_amdgpu_metadata(notes)
        resources = amd_kernel_resources(metadata, parse_resource_remarks(log))
        resources, disasm_note = _with_matrix_instrs(resources, clang, out, mcpu, cwd)
        binary = out.read_bytes()
    return CompileResult(binary=binary, binary_suffix=".hsaco", resources=resources,
                         command=argv, compiler=str(clang), compiler_version=version_line(clang),
                         log=log + note + disasm_note, seconds=time.monotonic() - started)
