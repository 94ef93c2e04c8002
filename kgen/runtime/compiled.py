"""Compiled variants, through the cache: the code objects of one (spec, variant, target), loaded.

The cache key covers everything that changes the code object: the spec's text, the variant,
the target's whole descriptor (not only its name), kgen's version and the fingerprint of its own
compiler source, templates and headers (kgen.runtime.fingerprint; the compile flags live there
and in the descriptor), and the compiler's identity. A warm load is a manifest read plus the code
objects' bytes; nothing is compiled or rendered. A variant's kernels compile through
CachedCodeObjects, entries keyed by the source's content: a kernel that several variants share
is compiled once, whichever process asks first.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import __version__
from ..backends import backend
from ..codeobjects import CodeObject, CodeObjects, compile_source
from ..hw.descriptor import Target
from ..spec.load import LoadedSpec
from .cache import Cache, cache_key, read_manifest
from .fingerprint import kgen_fingerprint
from .launcher import LoadedKernel


@dataclass(frozen=True)
class ReadyKernel:
    kernel: LoadedKernel | None  # None: an empty kernel (BuiltKernel.empty), never launched
    grid: tuple[Any, ...]
    threads: int
    shared_bytes: int
    signature: str
    tensors: tuple[str, ...]  # the arguments it takes, in order: each tensor's pointer and strides,
    sizes: tuple[str, ...]  # then sizes, then scalars (kgen.ir.passes.arguments)
    scalars: tuple[str, ...]
    tensor_maps: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (tensor, box innermost first): 'T' args
    writes: tuple[str, ...] = ()  # the tensors it stores into (unknown, and so none, in an older entry)


def key_parts(ls: LoadedSpec, variant: dict[str, Any], target: Target) -> dict[str, Any]:
    from ..backends import compiler_identity

    return {"spec": hashlib.sha256(ls.yaml.text.encode()).hexdigest(), "variant": variant, "target": target.name,
            "descriptor": descriptor_digest(target), "kgen": __version__, "source": kgen_fingerprint(),
            "compiler": compiler_identity(target.backend), "arch": target.compiler_arch}


_digests: dict[int, tuple[Target, str]] = {}  # id -> (the target, kept alive so its id is not reused; digest)


def descriptor_digest(target: Target) -> str:
    """Every fact of the descriptor (a frozen Target): one changed in any field is another key.
    Memoised per Target object, since dumping one costs ~0.14 ms."""
    hit = _digests.get(id(target))
    if hit is None or hit[0] is not target:
        hit = _digests[id(target)] = (target, hashlib.sha256(target.model_dump_json().encode()).hexdigest())
    return hit[1]


# the fields CachedCodeObjects reads from a code object's entry
OBJECT_FIELDS = ("command", "compiler", "resources", "log")


class CachedCodeObjects(CodeObjects):
    """CodeObjects that also keeps each one in the on-disk cache, keyed by everything that goes
    into the compiler: the source, its file name, the flags, the arch, the compiler's identity
    and kgen's fingerprint (which covers the headers the source includes)."""

    def compile(self, source: str, file: str, target: Target, flags: tuple[str, ...],
                includes: tuple[tuple[str, str], ...] = ()) -> CodeObject:
        from ..backends import compiler_identity

        # an included body is named by its content's digest, which the source's text names: the
        # source's hash covers it; its own hash is added all the same
        text = "\0".join([source, *(t for _, t in includes)])
        key = cache_key({"code_object": hashlib.sha256(text.encode()).hexdigest(), "file": file, "flags": list(flags),
                         "backend": target.backend, "arch": target.compiler_arch,
                         "compiler": compiler_identity(target.backend), "source": kgen_fingerprint()})

        def build(tmp: Path) -> None:
            obj = compile_source(source, file, target, flags, includes)
            (tmp / "object").write_bytes(obj.binary)
            (tmp / "manifest.json").write_text(json.dumps({"command": obj.command, "compiler": obj.compiler,
                                                           "resources": obj.resources, "log": obj.log}))
        entry = Cache().get_or_build(key, build, required=OBJECT_FIELDS)
        meta = read_manifest(entry)
        return CodeObject((entry / "object").read_bytes(), meta["command"], meta["compiler"], meta["resources"], meta["log"])


def _build_into(ls: LoadedSpec, variant: dict[str, Any], target: Target, first: dict[str, int] | None = None):
    def build(tmp: Path) -> None:
        from ..build import build_variant

        bv = build_variant(ls, variant, target, compile=True, objects=CachedCodeObjects(), first=first)
        kernels = []
        for k in bv.kernels:
            obj = None if k.empty else k.file.rsplit(".", 1)[0] + backend(target.backend).binary_suffix
            if obj is not None:
                (tmp / obj).write_bytes(k.binary)
            kernels.append({"name": k.name, "object": obj, "grid": k.grid, "threads": k.threads,
                            "shared_bytes": k.shared_bytes, "signature": k.signature, "arguments": k.arguments, "resources": k.resources,
                            "tensor_maps": k.tensor_maps, "writes": k.writes})
        (tmp / "manifest.json").write_text(json.dumps({"tunables": bv.tunables, "kernels": kernels}))
    return build


@lru_cache(maxsize=None)
def _load_entry(entry: str, backend: str) -> tuple[tuple[ReadyKernel, ...], dict[str, int]]:
    return load_entry(Path(entry), backend)


def load_entry(entry: Path, backend: str, all_arguments: dict[str, list[str]] | None = None
               ) -> tuple[tuple[ReadyKernel, ...], dict[str, int]]:
    """The kernels of a cache entry, loaded, and their tunables. `all_arguments`: what a kernel
    without an argument list takes (an entry built before ir/passes/arguments.py, which
    kgen.bench.ab loads: every tensor, size and scalar of its spec)."""
    meta = json.loads((entry / "manifest.json").read_text())
    ready = []
    for k in meta["kernels"]:
        args = k.get("arguments") or all_arguments
        loaded = None if k["object"] is None else LoadedKernel(backend, (entry / k["object"]).read_bytes(), k["name"], k["shared_bytes"])
        ready.append(ReadyKernel(loaded,
                                 tuple(k["grid"]), k["threads"], k["shared_bytes"], k["signature"],
                                 tuple(args["tensors"]), tuple(args["sizes"]), tuple(args["scalars"]),
                                 tuple((m["tensor"], tuple(m["box"])) for m in k.get("tensor_maps", ())),
                                 tuple(k.get("writes", ()))))
    return tuple(ready), meta["tunables"]


_memo: dict[tuple, tuple[tuple[ReadyKernel, ...], dict[str, int]]] = {}


def compiled_variant(ls: LoadedSpec, variant: dict[str, Any], target: Target,
                     first: dict[str, int] | None = None) -> tuple[tuple[ReadyKernel, ...], dict[str, int]]:
    """The loaded kernels of a variant and the tunables they were built with (memoised per
    process); `first`: the candidate to try first (a tune's choice), else the spec's order."""
    memo_key = (str(ls.path), ls.yaml.text, tuple(variant.items()), descriptor_digest(target), tuple(sorted((first or {}).items())))
    hit = _memo.get(memo_key)
    if hit is None:
        hit = _memo[memo_key] = _load_entry(str(_entry(ls, variant, target, first)), target.backend)
    return hit


# the fields _load_entry reads: an entry without them is corrupt and rebuilt (kgen.runtime.cache)
MANIFEST_FIELDS = ("tunables", "kernels")


def _entry(ls: LoadedSpec, variant: dict[str, Any], target: Target, first: dict[str, int] | None = None) -> Path:
    parts = key_parts(ls, variant, target)
    if first:  # another build order is another build (without one, the key is what it always was)
        parts["first"] = first
    return Cache().get_or_build(cache_key(parts), _build_into(ls, variant, target, first), required=MANIFEST_FIELDS)


def _warm_one(path: str, variant: dict[str, Any], target_name: str) -> str:
    from ..hw.descriptor import load_target
    from ..spec.load import load_spec

    ls, target = load_spec(path), load_target(target_name)
    return str(_entry(ls, variant, target))


def warm_cache(jobs: list[tuple[LoadedSpec, dict[str, Any]]], target: Target, workers: int,
               on_done: Any = None) -> None:
    """Build variants into the cache in parallel processes (each compile is one process of nvcc
    or clang, and a variant's kernels compile one after another), so that the first calls of
    an op find them warm. Entries already cached are not rebuilt. The workers stop with this
    process (kgen.runtime.pool)."""
    from .pool import run_in_workers

    work = [(str(ls.path), v, target.name) for ls, v in jobs]
    run_in_workers(_warm_one, work, workers, on_done=(lambda i, _: on_done(*jobs[i])) if on_done else None)
