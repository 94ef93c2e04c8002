"""What a compile produced, the parsers that read it out of the tools' reports, and the helpers
both backends share (running a tool, its version, a private build folder, error messages).

The parsers are pure functions of text, so they are tested on captured samples without a
compiler; cuda.py and hip.py run the tools and hand the text to them.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from kgen.errors import SourceLoc, ToolchainError
from kgen.knobs import knobs


@dataclass(frozen=True)
class KernelResources:
    """What one kernel costs on the GPU, as the compiler reported it."""

    name: str
    registers: int  # NVIDIA: registers/thread; AMD: arch VGPRs (AGPRs counted apart)
    agprs: int = 0  # AMD accumulation VGPRs (where MFMA results live on gfx90a/gfx942)
    sgprs: int = 0  # AMD scalar registers
    shared_bytes: int = 0  # static smem (NVIDIA) or LDS group_segment_fixed_size (AMD), per block
    spill_bytes: int = 0  # NVIDIA spill stores + loads; AMD private_segment_fixed_size (scratch)
    stack_bytes: int = 0  # NVIDIA stack frame per thread (AMD's stack is inside the scratch)
    occupancy: int | None = None  # AMD waves/SIMD from the resource-usage remark; NVIDIA None
    # sorted distinct v_mfma_*/HMMA.*/HGMMA.* opcodes, or the PTX's mma.sync.*/wgmma.mma_async.*
    matrix_instrs: tuple[str, ...] = ()
    disasm_tool: str | None = None  # what produced matrix_instrs ("ptx": the PTX); None: empty
    wavefront_size: int | None = None  # AMD .wavefront_size; NVIDIA None (always 32)
    max_workgroup_size: int | None = None  # AMD .max_flat_workgroup_size; NVIDIA None
    # NVIDIA: ptxas's wgmma performance notes for this kernel (C7514/C7515: the instructions are
    # serialized; C7517/C7519: a wait or arrive was injected), sorted distinct codes
    mma_notes: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        d = asdict(self)
        d["matrix_instrs"] = list(self.matrix_instrs)
        d["mma_notes"] = list(self.mma_notes)
        return d


@dataclass(frozen=True)
class CompileResult:
    """One code object in memory: callers write `binary` where they want it (never half-written)."""

    binary: bytes
    binary_suffix: str  # ".cubin" or ".hsaco"
    resources: dict[str, KernelResources]  # per kernel, by symbol (the extern "C" name)
    command: list[str]  # the exact argv; the source relative to the working dir when under it
    compiler: str
    compiler_version: str
    log: str  # everything the compiler printed: warnings, ptxas info, remarks
    seconds: float = 0.0  # wall time of the compile, disassembly included
    ptx: str | None = None  # CUDA: the PTX on the way, kept where no SASS disassembler is found


# ---------------------------------------------------------------------------------------------
# NVIDIA: ptxas -v / --resource-usage
#
#   ptxas info    : Compiling entry function 'mma_tile' for 'sm_90a'
#   ptxas info    : Function properties for mma_tile
#       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
#   ptxas info    : Used 20 registers, used 1 barriers, 512 bytes smem, 360 bytes cmem[0]
#
# Non-entry functions get "Function properties" but no "Compiling entry function", so only entry
# functions (kernels) end up in the result.

_PTX_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTX_PROPS = re.compile(r"Function properties for (\S+)")
_PTX_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTX_USED = re.compile(r"Used (\d+) registers")
_PTX_SMEM = re.compile(r"(\d+) bytes smem")
#   ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized
#                   due to ... in the function 'fwd'
#   ptxas info    : (C7519) warpgroup.arrive is injected in around line 5269 by compiler to allow
#                   use of registers in GMMA in function 'fwd'
_PTX_MMA_NOTE = re.compile(r"\((C75\d\d)\).*in (?:the )?function '([^']+)'")


def parse_ptxas_info(text: str) -> dict[str, KernelResources]:
    entries: set[str] = set()
    regs: dict[str, int] = {}
    smem: dict[str, int] = {}
    frame: dict[str, tuple[int, int, int]] = {}
    notes: dict[str, set[str]] = {}
    current: str | None = None  # the function that the following lines describe
    for line in text.splitlines():
        if m := _PTX_MMA_NOTE.search(line):
            notes.setdefault(m.group(2), set()).add(m.group(1))
        elif m := _PTX_ENTRY.search(line):
            current = m.group(1)
            entries.add(current)
        elif m := _PTX_PROPS.search(line):
            current = m.group(1)
        elif current and (m := _PTX_FRAME.search(line)):
            frame[current] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif current and (m := _PTX_USED.search(line)):
            regs[current] = int(m.group(1))
            s = _PTX_SMEM.search(line)
            smem[current] = int(s.group(1)) if s else 0
    out = {}
    for name in sorted(entries):
        stack, stores, loads = frame.get(name, (0, 0, 0))
        out[name] = KernelResources(name=name, registers=regs.get(name, 0),
                                    shared_bytes=smem.get(name, 0), spill_bytes=stores + loads,
                                    stack_bytes=stack, mma_notes=tuple(sorted(notes.get(name, ()))))
    return out


# ---------------------------------------------------------------------------------------------
# AMD: `llvm-readelf --notes` prints the NT_AMDGPU_METADATA note as YAML. Only the flat keys of
# each entry of amdhsa.kernels are needed, so a line scan is enough (and needs no YAML loader
# that would choke on the readelf banner around the document).

_META_KEY = re.compile(r"^\s*(-\s+)?\.([a-z_]+):\s+(\S+)\s*$")
_META_INDENT = re.compile(r"^(\s*)-\s+\.")


def parse_amdgpu_metadata(text: str) -> list[dict[str, str]]:
    """One dict per kernel of amdhsa.kernels, holding its scalar keys without the dot."""
    kernels: list[dict[str, str]] = []
    in_kernels = False
    kernel_indent: int | None = None  # the column of the "- " that starts each kernel entry
    for line in text.splitlines():
        if line.startswith("amdhsa.kernels:"):
            in_kernels = True
            continue
        if in_kernels and line and not line[0].isspace() and not line.startswith("-"):
            in_kernels = False  # the next top-level key (amdhsa.target, ...)
        if not in_kernels:
            continue
        start = _META_INDENT.match(line)
        if start and (kernel_indent is None or len(start.group(1)) == kernel_indent):
            kernel_indent = len(start.group(1))
            kernels.append({})
        m = _META_KEY.match(line)
        if m and kernels:
            # Keys of .args entries are deeper and repeat names like .size: keep the kernel's own
            # (first seen at the kernel's indentation) by not letting nested ones overwrite.
            depth = len(line) - len(line.lstrip(" -"))
            if depth <= (kernel_indent or 0) + 2:
                kernels[-1][m.group(2)] = m.group(3).strip("'\"")
    return kernels


# `-Rpass-analysis=kernel-resource-usage` remarks, one block per kernel:
#   k.hip:6:1: remark: Function Name: mfma_tile [-Rpass-analysis=kernel-resource-usage]
#   k.hip:6:1: remark:     VGPRs: 6 [-Rpass-analysis=kernel-resource-usage]
_REMARK = re.compile(r"remark:\s+(.+?):\s+(\S+)\s+\[-Rpass-analysis=kernel-resource-usage\]")


def parse_resource_remarks(text: str) -> dict[str, dict[str, str]]:
    """{kernel: {"VGPRs": "6", "AGPRs": "16", "Occupancy [waves/SIMD]": "8", ...}}."""
    out: dict[str, dict[str, str]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _REMARK.search(line)
        if not m:
            continue
        key, value = m.group(1).strip(), m.group(2)
        if key == "Function Name":
            current = value
            out[current] = {}
        elif current is not None:
            out[current][key] = value
    return out


# ---------------------------------------------------------------------------------------------
# Matrix instructions in disassembly, per function.

# llvm-objdump -d: "0000000000001700 <mfma_tile>:" then tab-indented instructions.
_OBJDUMP_FUNC = re.compile(r"^[0-9a-f]+ <([^>]+)>:\s*$")
_AMD_MATRIX = re.compile(r"^\s+(v_(?:mfma|smfmac)_\w+)")


def _opcodes_per_function(text: str, function: re.Pattern, instr: re.Pattern,
                          keep=lambda opcode: True) -> dict[str, tuple[str, ...]]:
    """The distinct opcodes `instr` matches (its first group), kept by `keep`, under each
    function header `function` matches (its first group that matched), sorted."""
    found: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if m := function.match(line):
            current = next(g for g in m.groups() if g)
            found.setdefault(current, set())
        elif current and (m := instr.match(line)) and keep(m.group(1)):
            found[current].add(m.group(1))
    return {k: tuple(sorted(v)) for k, v in found.items()}


def parse_amdgpu_disasm(text: str) -> dict[str, tuple[str, ...]]:
    return _opcodes_per_function(text, _OBJDUMP_FUNC, _AMD_MATRIX)


# PTX names entries ".visible .entry NAME(" and device functions ".func ... NAME(";
# the matrix instructions are mma.sync.aligned.* (HMMA once assembled) and wgmma.mma_async.*
# (HGMMA), optionally predicated ("@%p1 mma.sync...").
_PTX_FUNC = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?(?:\.entry|\.func)\s+(?:\([^)]*\)\s*)?(\w+)")
_PTX_MATRIX = re.compile(r"^\s*(?:@!?%\w+\s+)?((?:mma\.sync\.aligned|wgmma\.mma_async)(?:\.\w+)*)")


def parse_ptx_matrix(text: str) -> dict[str, tuple[str, ...]]:
    """The distinct matrix-instruction opcodes of each function of a PTX text: where no SASS
    disassembler is installed, what shows which tensor-core instructions the front end chose."""
    return _opcodes_per_function(text, _PTX_FUNC, _PTX_MATRIX)


# cuobjdump -sass names functions with "Function : NAME"; nvdisasm with ".text.NAME:" sections.
# Instructions: "/*01a0*/   @P0 HMMA.16816.F32.BF16 R12, R12, R16, RZ ;".
_SASS_FUNC = re.compile(r"^\s*(?:Function\s*:\s*(\S+)|\.section\s+\.text\.([^,\s]+))")
_SASS_INSTR = re.compile(
    r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.\w+)*)")
# Tensor-core opcodes: HMMA (mma.sync f16/bf16/tf32), HGMMA (wgmma), and their integer, fp8,
# fp64 and 1-bit relatives, which a generated kernel may use too.
_SASS_MATRIX = {"HMMA", "HGMMA", "IMMA", "IGMMA", "QGMMA", "DMMA", "BMMA", "BGMMA"}


def parse_sass(text: str) -> dict[str, tuple[str, ...]]:
    return _opcodes_per_function(text, _SASS_FUNC, _SASS_INSTR,
                                 keep=lambda opcode: opcode.split(".")[0] in _SASS_MATRIX)


# ---------------------------------------------------------------------------------------------
# Compile errors: point at the generated line and, through its `// spec:` comment, the YAML.

# `// spec: FILE:LINE:COL` ending a line, or `// spec: LINE:COL` in the spec the kernel's first line names
# (templates/*/kernel.*.j2: "// Generated by kgen VERSION from FILE (kernel ...")
_SPEC_COMMENT = re.compile(r"//\s*spec:\s*(?:(\S+?):)?(\d+):(\d+)\s*$")
_KERNEL_SPEC = re.compile(r"^// Generated by kgen \S+ from (.+) \(kernel ")
# clang: "k.hip:3:16: error: expected ';'"; nvcc: "k.cu(4): error: ..." or "k.cu(4): error #20-D:";
# ptxas: "ptxas /tmp/x.ptx, line 29; error   : Unknown modifier".
_CLANG_ERR = re.compile(r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):\d+: (?:fatal )?error: ")
_NVCC_ERR = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?:catastrophic )?error\b")
_PTXAS_ERR = re.compile(r"^ptxas (?P<file>.+?), line (?P<line>\d+); error\b")
_ANY_ERR = re.compile(r"\berror\b|\bfatal\b", re.IGNORECASE)


def spec_location_for(source_text: str, line: int) -> str | None:
    """The spec position of the nearest `// spec:` comment at or above 1-based `line`, as
    FILE:LINE:COL (a comment without a file names the kernel's own spec)."""
    lines = source_text.splitlines()
    for i in range(min(line, len(lines)) - 1, -1, -1):
        if m := _SPEC_COMMENT.search(lines[i]):
            file = m.group(1)
            if file is None:
                own = _KERNEL_SPEC.match(lines[0]) if lines else None
                if own is None:
                    return None
                file = own.group(1)
            return f"{file}:{m.group(2)}:{m.group(3)}"
    return None


@dataclass(frozen=True)
class FirstError:
    text: str  # the compiler's first error line, as printed
    file: str | None = None
    line: int | None = None
    ptx: bool = False  # file:line is in the PTX that nvcc generated, not in the source


def first_error(log: str) -> FirstError:
    lines = log.splitlines()
    for text in lines:
        for pattern, ptx in ((_CLANG_ERR, False), (_NVCC_ERR, False), (_PTXAS_ERR, True)):
            if m := pattern.match(text):
                return FirstError(text.strip(), m.group("file"), int(m.group("line")), ptx)
    for text in lines:
        if _ANY_ERR.search(text):
            return FirstError(text.strip())
    tail = [t for t in lines if t.strip()]
    return FirstError(tail[-1].strip() if tail else "the compiler failed without a message")


def _read_line(path: Path, line: int) -> str | None:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    return lines[line - 1] if 0 < line <= len(lines) else None


def compile_error(log: str, source: Path, cwd: Path,
                  source_line: tuple[str, int] | None = None) -> ToolchainError:
    """The error to raise when a compile fails.

    Its message: the compiler's first error line, then the generated source line it names, then
    the spec location from the nearest `// spec:` comment above it (and that spec line's text
    when the spec file can be read). `source_line` overrides the location for errors that name
    a PTX line (the caller maps it back to the source through .loc).
    """
    err = first_error(log)
    parts = [err.text]
    where = None
    loc = source_line or ((err.file, err.line) if err.file and not err.ptx else None)
    if loc:
        file = Path(loc[0]) if Path(loc[0]).is_absolute() else cwd / loc[0]
        text = _read_line(file, loc[1])
        if text is not None:
            parts.append(f"  generated source {source_arg(file, cwd)}:{loc[1]}: {text.strip()}")
        if file.parent.resolve() == source.parent.resolve() and file.exists():  # the source or a body it includes
            spec = spec_location_for(file.read_text(errors="replace"), loc[1])
            if spec:
                spec_file, spec_line, spec_col = spec.rsplit(":", 2)
                where = SourceLoc(spec_file, int(spec_line), int(spec_col))
                candidates = [Path(spec_file), cwd / spec_file, source.parent / spec_file]
                spec_text = next((t for c in candidates
                                  if (t := _read_line(c, int(spec_line))) is not None), None)
                parts.append(f"  from spec {spec}" + (f": {spec_text.strip()}" if spec_text
                                                        is not None else ""))
    exc = ToolchainError("\n".join(parts))
    # Set after construction so that str(exc) keeps the compiler's line first; the CLI can still
    # jump to exc.where. The full log rides along for callers that want to show it.
    exc.where = where
    exc.log = log  # type: ignore[attr-defined]
    return exc


# ---------------------------------------------------------------------------------------------
# Running the tools: shared by both backends.

def run_tool(argv: list[str], cwd: Path, timeout: float = 900) -> tuple[int, str]:
    """Run a tool; return its exit status and its stdout and stderr interleaved as printed."""
    try:
        proc = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    except OSError as e:
        raise ToolchainError(f"could not run {argv[0]}: {e.strerror or e}") from e
    except subprocess.TimeoutExpired as e:
        raise ToolchainError(f"{Path(argv[0]).name} did not finish within {timeout:.0f} s") from e
    return proc.returncode, proc.stdout.decode(errors="replace")


UNKNOWN_VERSION = "unknown version"


@functools.lru_cache(maxsize=32)
def _version_line(path: str, _mtime_ns: int) -> str:
    try:
        _, out = run_tool([path, "--version"], Path.cwd(), timeout=60)
    except ToolchainError:
        return UNKNOWN_VERSION
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    # nvcc's first line is "nvcc: NVIDIA (R) Cuda compiler driver" for every release, which is
    # useless in a cache key: take its "Cuda compilation tools, release 13.0, V13.0.88" line.
    for line in lines:
        if "release" in line and "V" in line:
            return line
    return lines[0] if lines else UNKNOWN_VERSION


def version_line(path: Path) -> str:
    """The compiler's version line, read once per (path, modification time)."""
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        mtime = 0
    return _version_line(str(path), mtime)


def is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def source_arg(source: Path, cwd: Path) -> str:
    """The source as it goes on the command line: relative to cwd when it is under it."""
    try:
        return str(source.resolve().relative_to(cwd.resolve()))
    except ValueError:
        return str(source.resolve())


@contextlib.contextmanager
def build_dir(prefix: str) -> Iterator[Path]:
    """A private temporary folder for one compile, removed afterwards.

    With KGEN_KEEP_TEMPS=1 the folder of a failed compile is kept and its path added to the error.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix))
    keep = False
    try:
        yield path
    except ToolchainError as e:
        if keep := knobs().debug_keep_temps:
            e.message += f"\n  build folder kept at {path}"
            e.args = (e.message,)
        raise
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
