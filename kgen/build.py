"""`kgen build`: a spec, a target and its variants -> sources, code objects and a manifest.

    build_spec(spec, target)                       one BuiltVariant per variant
      choose_tunables   the first candidate combination whose IR fits the target (descriptor limits;
                        a pass raises DoesNotFit otherwise) and, when compiled, does not spill
                        (spill_retry_options: the CompileOptions a spilling kernel is retried with)
      compile_kernel    the pass pipeline (kgen.ir.pipeline)
      render_kernel     templates -> HIP or CUDA source
      compile_source    the toolchain -> .hsaco / .cubin and its resource report

Sources go to `out/<spec>/<target>/` with the headers they include copied beside them, so each
compiles standalone with the command its manifest records. Every file is written to a temporary
name and renamed, so a failed build leaves no half-written file.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from . import __version__
from .backends import backend
from .codegen.render import kernel_params, render_kernel, template_hash
from .codegen.tma import tensor_maps
from .errors import DoesNotFit, KgenError, SpecError
from .hw.descriptor import Target
from .ir.core import Kernel
from .driver import compile_kernel
from .options import DEFAULT, CompileOptions
from .paths import templates_dir
from .spec.expr import eval_expr
from .spec.load import LoadedSpec, variant_id
from .spec.refs import tunable_constraints


@dataclass
class BuiltKernel:
    name: str
    source: str  # the generated text
    file: str  # file name of the source
    grid: list[str | int]
    threads: int
    shared_bytes: int
    signature: str
    notes: dict[str, Any]
    tensor_maps: list[dict[str, Any]] = field(default_factory=list)  # {"tensor", "box"}: the kernel's 'T' args
    binary: bytes | None = None
    resources: dict[str, Any] | None = None
    command: list[str] | None = None
    compiler: str | None = None
    options: CompileOptions = DEFAULT  # how it was lowered, rendered and compiled (`kgen inspect` shows that IR)


@dataclass
class BuiltVariant:
    variant: dict[str, Any]
    tunables: dict[str, int]
    kernels: list[BuiltKernel] = field(default_factory=list)

    @property
    def id(self) -> str:
        return variant_id(self.variant)


def tunable_candidates(ls: LoadedSpec, variant: dict[str, Any] | None = None) -> list[dict[str, int]]:
    """Every combination of tunable values, in order; with a variant, those its constraints on
    tunables allow (refs.tunable_constraints)."""
    names = list(ls.spec.tunables)
    lists = [v if isinstance(v, list) else [v] for v in ls.spec.tunables.values()]
    combos = [dict(zip(names, combo)) for combo in itertools.product(*lists)]
    if variant is None:
        return combos
    rules = tunable_constraints(ls.spec)
    allowed = [t for t in combos if all(eval_expr(c, {**variant, **t}) for c in rules)]
    if not allowed:
        raise SpecError(f"no tunable choice of variant {variant} meets the constraints {', '.join(rules)}", ls.where("constraints"))
    return allowed


def lower_variant(ls: LoadedSpec, variant: dict[str, Any], target: Target,
                  candidates: list[dict[str, int]] | None = None) -> tuple[dict[str, int], list[Kernel]]:
    """The IR of every kernel with the first tunables that fit the target; the reasons the
    others did not fit (DoesNotFit, raised by the passes) are kept for the error message."""
    failures = []
    for tunables in tunable_candidates(ls, variant) if candidates is None else candidates:
        try:
            kernels = [compile_kernel(ls, i, variant, tunables, target) for i in range(len(ls.spec.kernels))]
        except DoesNotFit as e:
            failures.append(f"{tunables}: {e.message}")
            continue
        return tunables, kernels
    raise SpecError(f"no tunable choice fits {target.name}: " + "; ".join(failures), ls.where("tunables"))


def build_variant(ls: LoadedSpec, variant: dict[str, Any], target: Target, compile: bool) -> BuiltVariant:
    """Lower, render and (optionally) compile one variant. Candidates are tried in the spec's
    order: the first whose IR fits the target's limits is rendered; when compiling, a kernel
    that spills registers (or needs scratch) is retried alone with the options of
    `spill_retry_options` in turn; the other kernels of the variant keep their first form. A
    candidate with a kernel that spills in every form gives way to the next one, and only if
    every candidate spills is the first kept."""
    candidates = tunable_candidates(ls, variant)
    first: BuiltVariant | None = None
    while candidates:
        try:
            tunables, kernels = lower_variant(ls, variant, target, candidates)
        except SpecError:
            if first is None:
                raise
            break  # no later candidate fits at all: keep the first, spills and all
        candidates = candidates[candidates.index(tunables) + 1:]
        out = _render_variant(ls, variant, target, tunables, kernels)
        if not compile:
            return out
        for bk in out.kernels:
            compile_built(bk, target)
        built = _without_spills(ls, variant, target, tunables, kernels, out)
        if built is not None:
            return built
        first = first or out
    assert first is not None
    return first


def spill_retry_options(target: Target) -> list[CompileOptions]:
    """The forms a spilling kernel is retried in, in order: the same code with the target's
    frugal register flags (also without bulk reductions); then plain core matrices instead of
    the swizzle (fewer address registers), then also per-chunk copy addresses (fewer registers
    kept across loops); then both again with atomic adds per element instead of bulk reductions
    (passes/bulk_reduce.py: the causal D=128 dkdv has two, and spills with them). A form that
    would build the same code as the default on this target is left out."""
    frugal = tuple(target.frugal_register_flags)
    bulk = target.shared_bulk_fp32_add
    plain = CompileOptions(swizzle=False) if any(mi.shared_swizzle for mi in target.matrix_instrs) else DEFAULT
    forms = []
    if frugal:
        forms.append(CompileOptions(register_flags=frugal))
        if bulk:
            forms.append(CompileOptions(bulk_reductions=False, register_flags=frugal))
    forms += [plain, replace(plain, stepped_copies=False)]
    if bulk:
        forms += [replace(plain, bulk_reductions=False), replace(plain, bulk_reductions=False, stepped_copies=False)]
    return [f for f in forms if f != DEFAULT]


def _without_spills(ls: LoadedSpec, variant: dict[str, Any], target: Target, tunables: dict[str, int],
                    kernels: list[Kernel], out: BuiltVariant) -> BuiltVariant | None:
    """`out` with each kernel that spills replaced by its first form (spill_retry_options) that
    does not; None if one spills in every form. A kernel is lowered once per distinct lowering
    choice (swizzle, bulk reductions): forms that differ in flags or copy addresses alone
    re-render and recompile the same IR."""
    for i, bk in enumerate(out.kernels):
        if not _spills(bk):
            continue
        lowered = {(DEFAULT.swizzle, DEFAULT.bulk_reductions): kernels[i]}
        for options in spill_retry_options(target):
            how = (options.swizzle, options.bulk_reductions)
            if how not in lowered:
                lowered[how] = compile_kernel(ls, i, variant, tunables, target, options=options)
            retry = _render_variant(ls, variant, target, tunables, [lowered[how]], options, first_index=i).kernels[0]
            compile_built(retry, target, list(options.register_flags))
            if not _spills(retry):
                out.kernels[i] = retry
                break
        else:
            return None
    return out


def _spills(bk: BuiltKernel) -> bool:
    r = bk.resources or {}
    return bool(r.get("spill_bytes") or r.get("stack_bytes"))


def _render_variant(ls: LoadedSpec, variant: dict[str, Any], target: Target, tunables: dict[str, int],
                    kernels: list[Kernel], options: CompileOptions = DEFAULT, first_index: int = 0) -> BuiltVariant:
    """Sources of `kernels` (lowered with `options`), the spec's kernels from index `first_index` on."""
    out = BuiltVariant(variant, tunables)
    vid = variant_id(variant)
    for i, k in enumerate(kernels, start=first_index):
        line, _ = ls.yaml.block_origin(("kernels", i, "program"))
        source = render_kernel(k, target, spec_file=_display(ls.path), program_line=line, variant=variant,
                              stepped_copies=options.stepped_copies)
        _, sig = kernel_params(k, variant)
        out.kernels.append(BuiltKernel(
            name=k.name, source=source, file=f"{k.name}__{vid}{backend(target.backend).source_suffix}", grid=list(ls.spec.kernels[i].grid),
            threads=k.num_warps * target.wave_size, shared_bytes=k.shared_bytes, signature=sig, notes=dict(k.notes),
            tensor_maps=[{"tensor": t, "box": list(box)} for t, box in tensor_maps(k)], options=options))
    return out


def compile_built(bk: BuiltKernel, target: Target, extra_flags: list[str] = ()) -> None:
    """Compile one generated source in a private folder with the headers beside it (and
    `extra_flags` on the compiler's command line, recorded in bk.command)."""
    be = backend(target.backend)
    with tempfile.TemporaryDirectory(prefix="kgen-src-") as tmp:
        src = Path(tmp) / bk.file
        src.write_text(bk.source)
        for h in be.headers:
            shutil.copy(templates_dir() / h, Path(tmp) / Path(h).name)
        fn = be.compile
        cwd = os.getcwd()
        os.chdir(tmp)  # so the recorded command names the source as it sits beside its headers
        try:
            res = fn(Path(bk.file), target.compiler_arch, include_dirs=[], extra_flags=list(extra_flags))
        finally:
            os.chdir(cwd)
    bk.binary = res.binary
    # record the command as it runs standalone beside the source: no temporary output path
    obj = bk.file.rsplit(".", 1)[0] + res.binary_suffix
    cmd = [Path(res.command[0]).name] + list(res.command[1:])
    bk.command = [obj if i > 0 and cmd[i - 1] == "-o" else c for i, c in enumerate(cmd)]
    bk.compiler = res.compiler_version
    r = res.resources.get(bk.name)
    bk.resources = r.as_dict() if r else None


def build_spec(ls: LoadedSpec, target: Target, variants: list[dict[str, Any]], *, compile: bool = True,
               on_variant: Callable[[BuiltVariant], None] | None = None) -> list[BuiltVariant]:
    built = []
    for v in variants:
        bv = build_variant(ls, v, target, compile)
        built.append(bv)
        if on_variant:
            on_variant(bv)
    return built


def manifest(ls: LoadedSpec, target: Target, built: list[BuiltVariant]) -> dict[str, Any]:
    return {
        "kgen": __version__, "spec": _display(ls.path), "op": ls.spec.name, "target": target.name,
        "backend": target.backend, "compiler_arch": target.compiler_arch, "templates": template_hash(target.backend),
        "variants": [{
            "variant": bv.variant, "id": bv.id, "tunables": bv.tunables,
            "kernels": [{"name": k.name, "source": k.file, "grid": k.grid, "threads": k.threads,
                         "shared_bytes": k.shared_bytes, "signature": k.signature, "tensor_maps": k.tensor_maps, "decisions": k.notes,
                         "command": k.command, "compiler": k.compiler, "resources": k.resources}
                        for k in bv.kernels]} for bv in built],
    }


def write_build(out_dir: Path, ls: LoadedSpec, target: Target, built: list[BuiltVariant], keep_binaries: bool = False) -> Path:
    """Write sources, headers and manifest.json under out_dir/<op>/<target>/, atomically: the
    folder is assembled beside its final place and swapped in."""
    final = out_dir / ls.spec.name / target.name
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=final.parent))
    try:
        be = backend(target.backend)
        for h in be.headers:
            shutil.copy(templates_dir() / h, tmp / Path(h).name)
        for bv in built:
            for k in bv.kernels:
                (tmp / k.file).write_text(k.source)
                if keep_binaries and k.binary:
                    (tmp / (k.file.rsplit(".", 1)[0] + be.binary_suffix)).write_bytes(k.binary)
        (tmp / "manifest.json").write_text(json.dumps(manifest(ls, target, built), indent=1, sort_keys=False) + "\n")
        if final.exists():
            old = final.with_name(f".{target.name}-old")
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _display(path: Path) -> str:
    """The spec's path as written in generated files: relative to the working directory when
    under it, so generated/ does not depend on where the repository is checked out."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


__all__ = ["BuiltKernel", "BuiltVariant", "KgenError", "build_spec", "lower_variant", "manifest", "write_build"]
