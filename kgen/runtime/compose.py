"""`kgen.compose(a.yaml, b.yaml, ...)`: the op of several variant specs of one base at once.

A composition is a spec file of three lines, `extends: [a.yaml, b.yaml]` and a name
(kgen/spec/compose.py joins them); this writes that file into the cache folder
(`composed/<name>.yaml`, the specs named by absolute paths) and loads it as any spec, so that
its build, its cache entries and its errors are a spec's. kgen.ops composes flash-attn's keywords
this way (kgen/ops/variants.py); a user composes their own variants the same way.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from ..errors import UsageError
from .cache import cache_root


def composition_file(specs: list[Path], name: str) -> Path:
    """The spec file composing `specs` under the op name `name`, written once (atomically: a
    reader never sees half a file)."""
    text = ("kgen: 1\n# written by kgen.compose (kgen/runtime/compose.py)\n"
            f"extends: [{', '.join(_quoted(p) for p in specs)}]\nname: {name}\n")
    folder = cache_root() / "composed"
    path = folder / f"{name}.yaml"
    try:
        if path.is_file() and path.read_text() == text:
            return path
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        raise UsageError(f"kgen.compose: cannot write {path} ({e.strerror}); set KGEN_CACHE_DIR to a writable folder") from None
    return path


def default_name(op_names: list[str]) -> str:
    """The first spec's op name, then each other's without the prefix they all share
    (fa2_document, fa2_window -> fa2_document_window)."""
    prefix = os.path.commonprefix(op_names)
    prefix = prefix[:prefix.rfind("_") + 1] if "_" in prefix else ""
    return "_".join([op_names[0]] + [n[len(prefix):] for n in op_names[1:]])


def compose(*specs: str | Path, name: str | None = None, target: str | None = None, emulate: bool = False):
    """The op of `specs` (two or more spec files extending one base) composed: their sizes,
    tensors and scalars united, their variant axes intersected, the hooks several override joined
    by the base's `combine:` (docs/SPEC_LANGUAGE.md, "Composing variants"); its backward derived
    as a variant's. `name` is the op's name (default: from the specs' names)."""
    from ..spec.load import load_spec
    from .op import load

    if len(specs) < 2:
        raise UsageError(f"kgen.compose: give two or more spec files, got {len(specs)}; one spec is loaded with kgen.load")
    paths = [Path(s).resolve() for s in specs]
    for p in paths:
        if not p.is_file():
            raise UsageError(f"kgen.compose: no spec file {p}")
    if name is None:
        name = default_name([load_spec(p).spec.name for p in paths])
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise UsageError(f"kgen.compose: name {name!r} is not an identifier; an op's name is letters, digits and _")
    return load(composition_file(paths, name), target=target, emulate=emulate)


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"
