"""nvcc: generated CUDA source -> cubin, with ptxas's resource report and the tensor-core
opcodes: from the SASS when cuobjdump or nvdisasm is installed (the pip/conda nvcc often comes
without them), else from the PTX nvcc made on the way, which the result then carries.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import shutil
import time
from pathlib import Path

from kgen.errors import TargetError, ToolchainError
from kgen.knobs import knobs
from kgen.toolchain.resources import (
    CompileResult, KernelResources, build_dir, compile_error, first_error, is_executable,
    parse_ptx_matrix, parse_ptxas_info, parse_sass, run_tool, source_arg, version_line)

_DEFAULT_NVCC = Path("/usr/local/cuda/bin/nvcc")


def find_nvcc() -> Path:
    override = knobs().nvcc
    if override is not None:
        if is_executable(override):
            return override
        raise ToolchainError(
            f"no CUDA compiler found (KGEN_NVCC={override} is not an executable file); "
            "install the CUDA toolkit or set KGEN_NVCC to an nvcc that exists")
    on_path = shutil.which("nvcc")
    for candidate in ([Path(on_path)] if on_path else []) + [_DEFAULT_NVCC]:
        if is_executable(candidate):
            return candidate
    raise ToolchainError(
        f"no CUDA compiler found (looked for KGEN_NVCC, nvcc on PATH and {_DEFAULT_NVCC}); "
        "install the CUDA toolkit or set KGEN_NVCC")


def gencode_flag(arch: str) -> str:
    """"sm_90a" -> "-gencode=arch=compute_90a,code=sm_90a": SASS only, no PTX to JIT later."""
    m = re.fullmatch(r"sm_(\d+[af]?)", arch)
    if not m:
        raise TargetError(f"unknown CUDA arch {arch!r}; expected sm_<NN> with an optional a or "
                          "f suffix, like sm_80 or sm_90a")
    return f"-gencode=arch=compute_{m.group(1)},code=sm_{m.group(1)}"


@functools.lru_cache(maxsize=8)
def _cuda_bin_dir(nvcc: str) -> Path | None:
    """The toolkit's bin folder as nvcc itself sees it (_HERE_ in its dry run).

    nvcc is often a wrapper script (/usr/local/bin/nvcc -> exec /usr/local/cuda-13.0/bin/nvcc),
    so its own folder need not hold cuobjdump; a dry run costs ~20 ms and is done once.
    """
    try:
        _, out = run_tool([nvcc, "-dryrun", "-cubin", "-x", "cu", "/dev/null", "-o", "/dev/null"],
                          Path.cwd(), timeout=60)
    except ToolchainError:
        return None
    m = re.search(r"^#\$ _HERE_=(.+)$", out, re.MULTILINE)
    return Path(m.group(1).strip()) if m else None


def find_disassembler(nvcc: Path) -> list[str] | None:
    """argv prefix of cuobjdump -sass (preferred: it names functions plainly), else nvdisasm."""
    dirs = [nvcc.parent, nvcc.resolve().parent, _cuda_bin_dir(str(nvcc)), _DEFAULT_NVCC.parent]
    for tool, args in (("cuobjdump", ["-sass"]), ("nvdisasm", [])):
        for d in dirs:
            if d is not None and is_executable(d / tool):
                return [str(d / tool), *args]
        if found := shutil.which(tool):
            return [found, *args]
    return None


def ptx_line_to_source(ptx_text: str, ptx_line: int) -> tuple[str, int] | None:
    """Follow the nearest `.loc FILE LINE COL` above a PTX line back to (source file, line)."""
    files = {m.group(1): m.group(2)
             for m in re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx_text, re.MULTILINE)}
    lines = ptx_text.splitlines()
    for i in range(min(ptx_line, len(lines)) - 1, -1, -1):
        if m := re.match(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+", lines[i]):
            if m.group(1) in files and int(m.group(2)) > 0:
                return files[m.group(1)], int(m.group(2))
    return None


def _nvcc_argv(nvcc: Path, gencode: str, include_dirs, extra_flags, src: str, out: Path,
               output_kind: str = "-cubin") -> list[str]:
    # -Xptxas -v prints registers, smem, stack and spills per function; --resource-usage adds
    # nothing to it today but keeps the report if nvcc's defaults change. -lineinfo lets ptxas
    # errors (and profiles) be mapped back to generated lines.
    report = ["-Xptxas", "-v", "--resource-usage"] if output_kind == "-cubin" else []
    return [str(nvcc), output_kind, "-O3", "-std=c++17", gencode, *report, "-lineinfo",
            *[f"-I{d}" for d in include_dirs], *extra_flags, src, "-o", str(out)]


def _ptxas_error_source_line(argv: list[str], ptx_line: int, cwd: Path) -> tuple[str, int] | None:
    """ptxas names a line of the PTX that nvcc generated and threw away. Regenerate that PTX
    (same front-end flags, so the same text) and map the line back through -lineinfo's .loc.
    Only done after a failure, so a good compile stays one invocation. nvcc 13 still runs ptxas
    on -ptx output and fails the same way, but only after writing the PTX: the status is moot."""
    run_tool(argv, cwd)
    ptx = Path(argv[-1])
    if not ptx.is_file():
        return None
    return ptx_line_to_source(ptx.read_text(errors="replace"), ptx_line)


def _with_sass_instrs(resources: dict[str, KernelResources], tool: list[str], cubin: Path,
                      cwd: Path) -> tuple[dict[str, KernelResources], str]:
    rc, text = run_tool([*tool, str(cubin)], cwd)
    if rc != 0:
        return resources, f"\n[kgen] {' '.join(tool)} failed, matrix_instrs left empty:\n{text}"
    found = parse_sass(text)
    name = Path(tool[0]).name
    return {k: dataclasses.replace(r, matrix_instrs=found.get(k, ()), disasm_tool=name)
            for k, r in resources.items()}, ""


def _with_ptx_instrs(resources: dict[str, KernelResources], ptx: str | None) -> tuple[dict[str, KernelResources], str]:
    if ptx is None:
        return resources, "\n[kgen] no cuobjdump or nvdisasm found and no PTX kept: matrix_instrs left empty\n"
    found = parse_ptx_matrix(ptx)
    return {k: dataclasses.replace(r, matrix_instrs=found.get(k, ()), disasm_tool="ptx")
            for k, r in resources.items()}, "\n[kgen] no cuobjdump or nvdisasm found: matrix_instrs from the PTX\n"


def _prepare(source: Path, arch: str, include_dirs, extra_flags):
    """The source as a Path (checked to exist), nvcc, the leading arguments of _nvcc_argv, and
    the working directory the command runs in."""
    source = Path(source)
    gencode = gencode_flag(arch)
    nvcc = find_nvcc()
    if not source.is_file():
        raise ToolchainError(f"generated source {source} does not exist")
    cwd = Path.cwd()
    return source, nvcc, (nvcc, gencode, include_dirs, extra_flags, source_arg(source, cwd)), cwd


def compile_cuda(source: Path, arch: str, include_dirs: list[Path] = (),
                 extra_flags: list[str] = ()) -> CompileResult:
    """Compile one generated .cu to a cubin for `arch` (sm_80, sm_90a, ...)."""
    source, nvcc, flags, cwd = _prepare(source, arch, include_dirs, extra_flags)
    disassembler = find_disassembler(nvcc)
    started = time.monotonic()
    with build_dir("kgen-cuda-") as tmp:
        out = tmp / "kernel.cubin"
        argv = _nvcc_argv(*flags, out)
        # Without a SASS disassembler the PTX shows which instructions the front end chose: nvcc
        # keeps what it makes on the way (--keep), so nothing is compiled twice. The flags change
        # no output, so the recorded command leaves them out.
        keep = [] if disassembler else ["--keep", f"--keep-dir={tmp}"]
        rc, log = run_tool(argv[:-2] + keep + argv[-2:], cwd)
        if rc != 0 or not out.is_file():
            err = first_error(log)
            mapped = None
            if err.ptx and err.line:
                ptx_argv = _nvcc_argv(*flags, tmp / "kernel.ptx", output_kind="-ptx")
                mapped = _ptxas_error_source_line(ptx_argv, err.line, cwd)
            raise compile_error(log, source, cwd, source_line=mapped)
        ptx = None
        if disassembler:
            resources, note = _with_sass_instrs(parse_ptxas_info(log), disassembler, out, cwd)
        else:
            kept = tmp / f"{source.stem}.ptx"
            ptx = kept.read_text(errors="replace") if kept.is_file() else None
            resources, note = _with_ptx_instrs(parse_ptxas_info(log), ptx)
        binary = out.read_bytes()
    return CompileResult(binary=binary, binary_suffix=".cubin", resources=resources,
                         command=argv, compiler=str(nvcc), compiler_version=version_line(nvcc),
                         log=log + note, seconds=time.monotonic() - started, ptx=ptx)
