"""Code objects by content: a generated source is compiled once per (text, flags, target).

Variants share kernels (the delta kernel of the attention backward is the same program for
causal and non-causal, the chunk cumsum of the SSD backward the same for every head_dim), and a
kernel's source names nothing of the variant that asked for it, so the compile is keyed by what
goes into the compiler: the source text, the backend, the arch and the extra flags.
`CodeObjects` remembers them for one process (one `kgen build`); kgen.runtime.compiled's store
also keeps them in the on-disk cache, so `kgen warm`'s worker processes share them too.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backends import backend
from .hw.descriptor import Target
from .paths import templates_dir


@dataclass(frozen=True)
class CodeObject:
    binary: bytes
    command: list[str]  # as it runs beside the source and its headers (no temporary paths)
    compiler: str  # the compiler's version line
    resources: dict[str, dict[str, Any]]  # per kernel symbol: KernelResources.as_dict()
    log: str  # what the compiler printed


def source_digest(source: str, flags: tuple[str, ...] = ()) -> str:
    """The content address of a source compiled with `flags`: its file name's suffix."""
    return hashlib.sha256("\0".join((source, *flags)).encode()).hexdigest()[:12]


class CodeObjects:
    """Compiles a source the first time it is asked for, then answers from memory."""

    def __init__(self) -> None:
        self._memo: dict[tuple, CodeObject] = {}

    def get(self, source: str, file: str, target: Target, flags: tuple[str, ...] = (),
            includes: tuple[tuple[str, str], ...] = ()) -> CodeObject:
        key = (source, file, target.backend, target.compiler_arch, flags, includes)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self.compile(source, file, target, flags, includes)
        return hit

    def compile(self, source: str, file: str, target: Target, flags: tuple[str, ...],
                includes: tuple[tuple[str, str], ...] = ()) -> CodeObject:
        return compile_source(source, file, target, flags, includes)


def compile_source(source: str, file: str, target: Target, flags: tuple[str, ...] = (),
                   includes: tuple[tuple[str, str], ...] = ()) -> CodeObject:
    """Compile one generated source in a private folder with the headers and the generated
    files it includes (`includes`: (file, text)) beside it."""
    be = backend(target.backend)
    with tempfile.TemporaryDirectory(prefix="kgen-src-") as tmp:
        (Path(tmp) / file).write_text(source)
        for name, text in includes:
            (Path(tmp) / name).write_text(text)
        for h in be.headers:
            shutil.copy(templates_dir() / h, Path(tmp) / Path(h).name)
        cwd = os.getcwd()
        os.chdir(tmp)  # so the recorded command names the source as it sits beside its headers
        try:
            res = be.compile(Path(file), target.compiler_arch, include_dirs=[], extra_flags=list(flags))
        finally:
            os.chdir(cwd)
    obj = file.rsplit(".", 1)[0] + res.binary_suffix
    cmd = [Path(res.command[0]).name] + list(res.command[1:])
    command = [obj if i > 0 and cmd[i - 1] == "-o" else c for i, c in enumerate(cmd)]
    return CodeObject(res.binary, command, res.compiler_version,
                      {name: r.as_dict() for name, r in res.resources.items()}, res.log)
