"""The pipeline, stage by stage, for one kernel of one variant on one target: `build_kernel`.

    load_spec(path)                        kgen.spec        YAML -> validated Spec, file:line:col errors
    variant, tunables                      kgen.build       the tuning search picks them (candidates in order)
    build_kernel(...)                      here             one kernel, through every stage:
        compile_kernel                     here             parse (kgen.lang) + the pass list (kgen.ir.pipeline),
                                                            the verifier between passes; DoesNotFit if it cannot fit
        render_kernel                      kgen.codegen     IR -> HIP or CUDA source through the backend's templates
        BuiltKernel                        here             the record: file named by content, grid, signature, ...
        compile_built                      here             CodeObjects: compiled once per distinct source and
                                                            flags (kgen.codeobjects), the code object's resources
    spill check, retry with options        kgen.build       spill_retry_options (CompileOptions)
    write_build / cache entry              kgen.build, kgen.runtime.compiled

`kgen build`, `kgen warm`, `kgen inspect` and the runtime all build through build_kernel (via
kgen.build.build_variant), so what inspect prints is the IR of what ships.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .backends import backend
from .codegen.render import kernel_params, render_kernel, render_unit
from .codegen.tma import tensor_maps
from .codeobjects import CodeObjects, source_digest
from .hw.descriptor import Target
from .ir.core import WRITES, Kernel, walk
from .ir.pipeline import run_passes
from .lang import kernel_ir, resolve_dtype
from .options import DEFAULT, CompileOptions
from .paths import display_path
from .spec.candidates import complete_tunables
from .spec.load import LoadedSpec


@dataclass
class BuiltKernel:
    name: str
    source: str  # the generated text
    file: str  # file name of the source: <kernel>__<digest of source and flags><suffix>
    grid: list[str | int]
    threads: int
    shared_bytes: int
    signature: str
    notes: dict[str, Any]
    arguments: dict[str, list[str]] = field(default_factory=dict)  # {"tensors", "sizes", "scalars"} it takes, in order
    tensor_maps: list[dict[str, Any]] = field(default_factory=list)  # {"tensor", "box"}: the kernel's 'T' args
    writes: list[str] = field(default_factory=list)  # the tensors it stores into (the others it takes it reads)
    binary: bytes | None = None
    resources: dict[str, Any] | None = None
    command: list[str] | None = None
    compiler: str | None = None
    options: CompileOptions = DEFAULT  # how it was lowered and compiled (`kgen inspect` shows that IR)
    occupancy: int = 1  # the spec's least programs a multiprocessor (spills accepted for them: build.py)
    # the bodies the source includes, (file, text): a body written for any 16-bit float type,
    # shared by the sources of the variants that differ only in that type (shared_half)
    includes: tuple[tuple[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        """Whether it takes no tensor: nothing it does can be seen (its program was emptied by a
        compile-time choice, as a block table the interval analysis makes needless), so it is
        neither compiled nor launched."""
        return not self.arguments.get("tensors")

    @property
    def text(self) -> str:
        """The source and the bodies it includes: all the kernel's text (for searching it)."""
        return "\n".join([self.source, *(t for _, t in self.includes)])


def build_kernel(ls: LoadedSpec, index: int, variant: dict[str, Any], tunables: dict[str, int], target: Target,
                 options: CompileOptions = DEFAULT, *, objects: CodeObjects | None = None,
                 lowered: Kernel | None = None) -> BuiltKernel:
    """Kernel `index` of a spec for one variant, tunables, target and options: lowered (or
    `lowered`, the same kernel already lowered with these options), rendered, packaged and, with
    `objects`, compiled."""
    kernel = lowered if lowered is not None else compile_kernel(ls, index, variant, tunables, target, options=options)
    line, _ = ls.yaml.block_origin(("kernels", index, "program"))
    be, spec_file, half = backend(target.backend), display_path(ls.path), shared_half(ls, kernel, variant)
    program_file = display_path(Path(ls.where("kernels", index, "program").file))
    program_line = line if program_file == spec_file else f"{line} of {program_file}"  # a program the spec extends
    source = render_kernel(kernel, target, spec_file=spec_file, program_line=program_line, variant=variant, half=half)
    includes: tuple[tuple[str, str], ...] = ()
    if half is not None:  # the body, named by its content, and the unit that compiles it for `half`
        body_file = f"{kernel.name}__{source_digest(source)}{be.body_suffix}"
        includes = ((body_file, source),)
        source = render_unit(kernel.name, target, spec_file=spec_file, half=half, body_file=body_file)
    _, signature = kernel_params(kernel, variant)
    built = BuiltKernel(
        name=kernel.name, source=source, includes=includes,
        file=f"{kernel.name}__{source_digest(source, options.register_flags)}{be.source_suffix}",
        grid=list(ls.spec.kernels[index].grid), threads=(kernel.num_warps + kernel.producer_warps) * target.wave_size,
        shared_bytes=kernel.shared_bytes, signature=signature,
        arguments={"tensors": list(kernel.tensors), "sizes": list(kernel.sizes), "scalars": list(kernel.scalars)},
        notes=dict(kernel.notes), writes=sorted({op.attrs["tensor"] for op in walk(kernel.body) if op.kind in WRITES}),
        tensor_maps=[{"tensor": t, "box": list(box)} for t, box in tensor_maps(kernel)],
        options=options, occupancy=kernel.occupancy)
    if objects is not None and not built.empty:
        compile_built(built, target, list(options.register_flags), objects=objects)
    return built


HALVES = frozenset(("bf16", "fp16"))


def shared_half(ls: LoadedSpec, kernel: Kernel, variant: dict[str, Any]) -> str | None:
    """The 16-bit float type whose kernels share one body, or None. A spec whose variants span
    bf16 and fp16 has kernels that differ in that type alone; one that computes in exactly one
    of them is written for either (kgen.codegen.render: HALF_TYPE), and a unit per type includes
    it, so that the body is rendered, stored and read once."""
    if not any(HALVES <= {str(x) for x in values} for values in ls.spec.variants.values()):
        return None
    used = {v.dtype for op in walk(kernel.body) for v in (*op.results, *op.operands)}
    used |= {resolve_dtype(t.dtype, variant) for t in kernel.tensors.values()}
    used &= HALVES
    return used.pop() if len(used) == 1 else None


def compile_kernel(ls: LoadedSpec, kernel_index: int, variant: dict[str, Any], tunables: dict[str, int],
                   target: Target, trace: Callable[[str, str], None] | None = None,
                   options: CompileOptions = DEFAULT) -> Kernel:
    """Kernel `kernel_index` of a spec, for one variant, tunables, target and options: parsed,
    then lowered through every pass; trace(stage, IR text) after each stage. `tunables` may
    name only some of the spec's (spec/candidates.py completes them)."""
    tunables = complete_tunables(ls, variant, tunables)
    return run_passes(kernel_ir(ls, kernel_index, variant, tunables), target, options, trace)


def compile_built(bk: BuiltKernel, target: Target, extra_flags: list[str] = (), *, objects: CodeObjects | None = None) -> None:
    """Compile one generated source (through `objects`: once per distinct source and flags) and
    record its code object, command, compiler and resources on `bk`."""
    obj = (objects or CodeObjects()).get(bk.source, bk.file, target, tuple(extra_flags), bk.includes)
    bk.binary, bk.command, bk.compiler = obj.binary, list(obj.command), obj.compiler
    bk.resources = obj.resources.get(bk.name)


