"""The pipeline, stage by stage, for one kernel of one variant on one target.

    load_spec(path)                     kgen.spec        YAML -> validated Spec, file:line:col errors
    select variant, tunables            kgen.build       the tuning search: candidates in order
    compile_kernel(...)                 here             tile program -> IR -> the pass list
        kernel_ir                       kgen.lang        parse, bind the variant and tunables, type
        run_passes                      kgen.ir.pipeline every pass, the verifier between them
    render_kernel(...)                  kgen.codegen     IR -> HIP or CUDA source (the backend's templates)
    backend.compile(...)                kgen.backends    nvcc / clang -> code object + resources
    spill check, retry with options     kgen.build       spill_retry_options (CompileOptions)
    write_build / cache entry           kgen.build, kgen.runtime.compiled

`kgen build`, `kgen warm`, `kgen inspect` and the runtime all lower through compile_kernel, so
what inspect prints is what ships.
"""
from __future__ import annotations

from typing import Any, Callable

from .hw.descriptor import Target
from .ir.core import Kernel
from .ir.pipeline import run_passes
from .lang import kernel_ir
from .options import DEFAULT, CompileOptions
from .spec.load import LoadedSpec


def compile_kernel(ls: LoadedSpec, kernel_index: int, variant: dict[str, Any], tunables: dict[str, int],
                   target: Target, trace: Callable[[str, str], None] | None = None,
                   options: CompileOptions = DEFAULT) -> Kernel:
    """Kernel `kernel_index` of a spec, for one variant, tunables, target and options: parsed,
    then lowered through every pass; trace(stage, IR text) after each stage."""
    return run_passes(kernel_ir(ls, kernel_index, variant, tunables), target, options, trace)
