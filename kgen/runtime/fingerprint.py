"""The fingerprint of kgen's own code that reaches a code object, for cache keys.

A cached code object is only as fresh as the compiler that made it: editing a pass, the emitter,
a template, a header or a hardware descriptor changes what `kgen build` emits, so all of them
are hashed into the key (as Triton hashes its own source into its cache key). The hash covers
the file contents of the package's Python, its descriptors and the templates folder, by path
relative to their root; it is computed once per process (about a megabyte of reads).

Left out are the parts that never reach a code object: the command line, the benchmarks and
the op wrappers (kgen.ops), so that editing a benchmark does not empty everyone's cache.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from ..paths import templates_dir

PACKAGE = Path(__file__).resolve().parents[1]
# relative to the package: what only runs around the compiler
NOT_HASHED = ("bench", "ops", "cli.py", "report.py", "__main__.py")
SUFFIXES = (".py", ".yaml", ".cpp", ".j2", ".h", ".cuh")


def tree_digest(roots: list[tuple[str, Path, tuple[str, ...]]]) -> str:
    """sha256 over (label/relative path, content) of every file with a SUFFIXES ending under
    each (label, root, skip), in sorted order; `skip` names top-level entries of that root to
    leave out."""
    h = hashlib.sha256()
    for label, root, skip in roots:
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                       and p.relative_to(root).parts[0] not in skip and "__pycache__" not in p.parts)
        for path in files:
            h.update(f"{label}/{path.relative_to(root).as_posix()}\0".encode())
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


@lru_cache(maxsize=None)
def kgen_fingerprint() -> str:
    """The digest of kgen's compiler (package and templates), once per process."""
    return tree_digest([("kgen", PACKAGE, NOT_HASHED), ("templates", templates_dir(), ())])[:32]
