"""`kgen build`: a spec, a target and its variants -> sources, code objects and a manifest.

    build_spec(spec, target)      one BuiltVariant per variant (build_variant), compiles shared
      build_variant               the tuning search: lower_variant gives the first candidate
                                  whose kernels all fit the target (a pass raises DoesNotFit
                                  otherwise); each kernel goes through kgen.driver.build_kernel
                                  (render, package, compile once per distinct source); a kernel
                                  that spills is retried with spill_retry_options, and a
                                  candidate with a kernel that spills in every form gives way
                                  to the next (unless the kernel asked for an occupancy its
                                  registers do not allow: its least-spilling form is kept)

A kernel's file is named by its content (`<kernel>__<digest>.cu`), so a kernel several variants
share is one file; the manifest lists each distinct kernel once and each variant by the files
it launches, with the tunable candidates it passed over and why.

Sources go to `<out>/<op>/<target>/` (write_build) with the bodies and headers they include beside them, so each
compiles standalone with the command its manifest records. Every file is written to a temporary
name and renamed, so a failed build leaves no half-written file.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from . import __version__
from .backends import backend
from .codegen.render import template_hash
from .codeobjects import CodeObjects
from .errors import DoesNotFit, KgenError, SpecError
from .hw.descriptor import Target
from .ir.core import Kernel, walk
from .ir.passes.dot_tiling import instr_of, several_groups
from .driver import BuiltKernel, build_kernel, compile_kernel, display_path
from .options import DEFAULT, CompileOptions
from .paths import templates_dir
from .spec.load import LoadedSpec, variant_id
from .spec.candidates import complete_tunables, tunable_candidates


@dataclass
class BuiltVariant:
    variant: dict[str, Any]
    tunables: dict[str, int]
    kernels: list[BuiltKernel] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)  # {"tunables", "why"}: candidates passed over

    @property
    def id(self) -> str:
        return variant_id(self.variant)


def lower_variant(ls: LoadedSpec, variant: dict[str, Any], target: Target,
                  candidates: list[dict[str, int]] | None = None,
                  rejected: list[dict[str, Any]] | None = None) -> tuple[dict[str, int], list[Kernel]]:
    """The IR of every kernel with the first tunables that fit the target. Each candidate that
    does not (a pass raised DoesNotFit) is appended to `rejected` with the reason, and the
    reasons make the error if none fits."""
    failures = []
    for tunables in tunable_candidates(ls, variant) if candidates is None else candidates:
        try:
            kernels = [compile_kernel(ls, i, variant, tunables, target) for i in range(len(ls.spec.kernels))]
        except DoesNotFit as e:
            failures.append(f"{tunables}: {e.message}")
            if rejected is not None:
                rejected.append({"tunables": tunables, "why": e.message})
            continue
        return tunables, kernels
    raise SpecError(f"no tunable choice fits {target.name}: " + "; ".join(failures), ls.where("tunables"))


def build_variant(ls: LoadedSpec, variant: dict[str, Any], target: Target, compile: bool,
                  objects: CodeObjects | None = None, first: dict[str, int] | None = None) -> BuiltVariant:
    """Lower, render and (optionally) compile one variant. Candidates are tried in the spec's
    order: the first whose IR fits the target's limits is rendered; when compiling, a kernel
    that spills registers (or needs scratch) is retried alone with the options of
    `spill_retry_options` in turn; the other kernels of the variant keep their first form. A
    candidate with a kernel that spills in every form gives way to the next one, and only if
    every candidate spills is the first kept. `objects` compiles (a fresh CodeObjects if None:
    pass one to share compiles between variants). `first`: a candidate tried before the others
    (the tuning database's choice, kgen/runtime/tuning.py)."""
    objects = objects if objects is not None else CodeObjects()
    candidates = tunable_candidates(ls, variant)
    first = None if first is None else complete_tunables(ls, variant, first)
    if first in candidates:
        candidates = [first] + [c for c in candidates if c != first]
    first: BuiltVariant | None = None
    rejected: list[dict[str, Any]] = []
    while candidates:
        try:
            tunables, kernels = lower_variant(ls, variant, target, candidates, rejected)
        except SpecError:
            if first is None:
                raise
            break  # no later candidate fits at all: keep the first, spills and all
        candidates = candidates[candidates.index(tunables) + 1:]
        out = BuiltVariant(variant, tunables, [build_kernel(ls, i, variant, tunables, target, lowered=k,
                                                            objects=objects if compile else None)
                                               for i, k in enumerate(kernels)], rejected)
        if not compile:
            return out
        built = _without_spills(ls, variant, target, tunables, kernels, out, objects)
        if built is not None:
            return built
        spilled = [f"{bk.name} spills {_spill_bytes(bk)} bytes in every form" for bk in out.kernels if _spills(bk)]
        rejected.append({"tunables": tunables, "why": "; ".join(spilled)})
        first = first or out
    assert first is not None
    return first


def spill_retry_options(target: Target, specialized: bool = False, staged: bool = False,
                        together: bool = False, bulk: bool = False, grouped: bool = False) -> list[CompileOptions]:
    """The forms a spilling kernel is retried in, in order: a `specialized` kernel (one with a
    producer warpgroup, whose computing warps get at most the registers the producer leaves
    them) without it; one with `bulk` reductions (passes/bulk_reduce.py: the staged tile and its
    address live across the add) with per-element atomics; one with a dot's start computed
    `together` with an earlier dot (live one dot longer, ir/passes/dot_issue.py) without that; a
    `staged` one (loads of the next iteration held in registers across the loop body,
    ir/passes/staged_loads.py) without those; the same code with the target's frugal register
    flags; then plain core matrices instead of the swizzle (fewer address registers), then also
    per-chunk copy addresses (fewer registers kept across loops); then those without bulk
    reductions; last, one whose warpgroup dots are `grouped` (several warpgroups issue each) with
    constant group indices (the same code, its descriptor offsets immediates instead of vector
    registers: last, so that a kernel one of the measured forms above fits keeps that form).
    A form that would build the same code as the default on this target is left
    out."""
    frugal = tuple(target.frugal_register_flags)
    plain = CompileOptions(swizzle=False) if any(mi.shared_swizzle for mi in target.matrix_instrs) else DEFAULT
    forms = [CompileOptions(warp_specialize=False)] if specialized else []
    if bulk:
        forms.append(CompileOptions(bulk_reductions=False))
    if together:
        forms.append(CompileOptions(dots_together=False))
        if bulk:
            forms.append(CompileOptions(dots_together=False, bulk_reductions=False))
    if staged:
        forms.append(CompileOptions(register_pipeline=False))
    if frugal:
        forms.append(CompileOptions(register_flags=frugal))
        if bulk:
            forms.append(CompileOptions(bulk_reductions=False, register_flags=frugal))
    forms += [plain, replace(plain, stepped_copies=False)]
    if bulk:
        forms += [replace(plain, bulk_reductions=False), replace(plain, bulk_reductions=False, stepped_copies=False)]
    if grouped:
        forms.append(CompileOptions(constant_groups=True))
    return [f for f in forms if f != DEFAULT]


def _without_spills(ls: LoadedSpec, variant: dict[str, Any], target: Target, tunables: dict[str, int],
                    kernels: list[Kernel], out: BuiltVariant, objects: CodeObjects) -> BuiltVariant | None:
    """`out` with each kernel that spills replaced by its first form (spill_retry_options) that
    does not; None if one spills in every form. A kernel is lowered once per distinct lowering
    choice (swizzle, bulk reductions, stepped copies): forms that differ in compiler flags alone
    recompile the same source."""
    for i, bk in enumerate(out.kernels):
        if not _spills(bk):
            continue
        least = bk  # the form that spills least, kept where the spec asked for the spills (occupancy)
        lowered = {replace(DEFAULT, register_flags=()): kernels[i]}
        staged = any(op.kind == "stage_into" for op in walk(kernels[i].body))
        together = any(op.kind == "dot" and op.attrs.get("early_start") for op in walk(kernels[i].body))
        bulk = any(op.kind == "atomic_add" and "bulk" in op.attrs for op in walk(kernels[i].body))
        for options in spill_retry_options(target, specialized=kernels[i].producer_warps > 0, staged=staged,
                                           together=together, bulk=bulk, grouped=_grouped_dots(kernels[i], target)):
            how = replace(options, register_flags=())
            if how not in lowered:
                lowered[how] = compile_kernel(ls, i, variant, tunables, target, options=options)
            retry = build_kernel(ls, i, variant, tunables, target, options, lowered=lowered[how], objects=objects)
            if not _spills(retry):
                out.kernels[i] = retry
                break
            least = retry if _spill_bytes(retry) < _spill_bytes(least) else least
        else:
            # a kernel that asks for more programs a multiprocessor than its registers allow
            # trades spills for them: kept in its least-spilling form (kgen tune times whether
            # that pays); any other gives way to the next candidate
            if kernels[i].occupancy <= 1:
                return None
            out.kernels[i] = least
    return out


def _grouped_dots(k: Kernel, target: Target) -> bool:
    """Whether a dot of `k` (as dot tiling chose its instruction) is issued by several groups of
    warps together."""
    return any(op.kind == "dot" and "instr" in op.attrs and several_groups(k, instr_of(target, op.attrs["instr"]))
               for op in walk(k.body))


def _spill_bytes(bk: BuiltKernel) -> int:
    r = bk.resources or {}
    return int(r.get("spill_bytes") or 0) + int(r.get("stack_bytes") or 0)


def _spills(bk: BuiltKernel) -> bool:
    return _spill_bytes(bk) > 0


def build_spec(ls: LoadedSpec, target: Target, variants: list[dict[str, Any]], *, compile: bool = True,
               on_variant: Callable[[BuiltVariant], None] | None = None) -> list[BuiltVariant]:
    """Every variant, built in order; a kernel the variants share is compiled once."""
    built, objects = [], CodeObjects()
    for v in variants:
        bv = build_variant(ls, v, target, compile, objects)
        built.append(bv)
        if on_variant:
            on_variant(bv)
    return built


def manifest(ls: LoadedSpec, target: Target, built: list[BuiltVariant]) -> dict[str, Any]:
    """The build's record: how its kernels were compiled (`compile`: the compiler and its command,
    with {flags}, {source} and {object} for what differs per kernel), each distinct kernel once (by
    its file, with its extra flags), then each variant with its tunables, the files it launches in
    order and the candidates it passed over."""
    kernels: dict[str, dict[str, Any]] = {}
    shared = _shared_command([k for bv in built for k in bv.kernels if not k.empty])
    for bv in built:
        for k in bv.kernels:
            if k.empty:  # not compiled, not launched
                continue
            # empty lists and the decisions the fields above already give are left out
            decisions = {key: v for key, v in k.notes.items() if key != "shared_bytes"}
            entry = {"name": k.name, "grid": k.grid, "threads": k.threads, "shared_bytes": k.shared_bytes,
                     "signature": k.signature, "arguments": k.arguments, "tensor_maps": k.tensor_maps,
                     "decisions": decisions, "flags": list(k.options.register_flags)}
            entry = {key: v for key, v in entry.items() if v or key not in ("tensor_maps", "decisions", "flags")}
            if k.occupancy > 1:  # asked for by the spec (its registers capped for it, spills accepted)
                entry["occupancy"] = k.occupancy
            if k.command is not None and (shared is None or kernel_command(shared, k.file, entry) != k.command):
                entry["command"] = k.command  # not of the shared form: recorded as it ran
            if k.compiler is not None and (shared is None or k.compiler != shared["compiler"]):
                entry["compiler"] = k.compiler
            entry["resources"] = None if k.resources is None else {  # no spill: no spill_bytes
                key: v for key, v in k.resources.items() if v not in (None, 0, [], ()) and key != "name"}
            kernels.setdefault(k.file, entry)
    return {
        "kgen": __version__, "spec": display_path(ls.path), "op": ls.spec.name, "target": target.name,
        "backend": target.backend, "compiler_arch": target.compiler_arch, "templates": template_hash(target.backend),
        "compile": shared,
        "kernels": kernels,
        "variants": [{"variant": bv.variant, "id": bv.id, "tunables": bv.tunables,
                      "kernels": [k.file for k in bv.kernels if not k.empty], "rejected": bv.rejected} for bv in built],
    }


def kernel_command(compile: dict[str, Any], file: str, entry: dict[str, Any]) -> list[str]:
    """The command that compiled kernel `file` of a manifest, from its `compile` record."""
    if "command" in entry:
        return entry["command"]
    obj = file.rsplit(".", 1)[0] + compile["object_suffix"]
    out: list[str] = []
    for arg in compile["command"]:
        out += entry.get("flags", []) if arg == "{flags}" else [{"{source}": file, "{object}": obj}.get(arg, arg)]
    return out


def _shared_command(kernels: list[BuiltKernel]) -> dict[str, Any] | None:
    """The compile record of a build: its compiler and the command of a kernel compiled without
    extra flags, the names of its source and object as placeholders (None when nothing compiled)."""
    plain = next((k for k in kernels if k.command is not None and not k.options.register_flags), None)
    if plain is None:
        return None
    src = plain.command.index(plain.file)
    obj = plain.command[plain.command.index("-o") + 1]
    cmd = [*plain.command[:src], "{flags}", "{source}", *["{object}" if a == obj else a for a in plain.command[src + 1:]]]
    return {"compiler": plain.compiler, "command": cmd, "object_suffix": obj[len(plain.file.rsplit(".", 1)[0]):]}


def manifest_text(obj: Any, indent: str = "", width: int = 100, lead: int = 0) -> str:
    """JSON that reads as a table: a list or object on one line when it fits in `width` columns
    (`lead`: what precedes it on its line); one of scalars flows over as few lines as it needs;
    any other has one item per line."""
    flat = json.dumps(obj, separators=(", ", ": "))
    if not isinstance(obj, (dict, list)) or len(indent) + lead + len(flat) <= width:
        return flat
    inner = indent + " "
    pairs = obj.items() if isinstance(obj, dict) else ((None, v) for v in obj)
    items = [(v, "" if k is None else json.dumps(k) + ": ") for k, v in pairs]
    open_, close = "{}" if isinstance(obj, dict) else "[]"
    if all(not v or not isinstance(v, (dict, list)) for v, _ in items):
        lines, line = [], ""
        for v, key in items:
            item = key + json.dumps(v)
            if line and len(inner) + len(line) + len(item) + 2 > width:
                lines.append(line + ",")
                line = ""
            line = f"{line}, {item}" if line else item
        return open_ + "\n" + "\n".join(inner + x for x in lines + [line]) + "\n" + indent + close
    body = ",\n".join(inner + key + manifest_text(v, inner, width, len(key)) for v, key in items)
    return open_ + "\n" + body + "\n" + indent + close


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
            for k in bv.kernels:  # a shared kernel is the same file for each variant
                if k.empty:
                    continue
                (tmp / k.file).write_text(k.source)
                for name, text in k.includes:  # a body several variants' sources include
                    (tmp / name).write_text(text)
                if keep_binaries and k.binary:
                    (tmp / (k.file.rsplit(".", 1)[0] + be.binary_suffix)).write_bytes(k.binary)
        (tmp / "manifest.json").write_text(manifest_text(manifest(ls, target, built)) + "\n")
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


__all__ = ["BuiltKernel", "BuiltVariant", "KgenError", "build_spec", "lower_variant", "manifest", "write_build"]
