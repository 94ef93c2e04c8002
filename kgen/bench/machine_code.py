"""Do two builds of the same specs compile to the same machine code? For changes to how kernels
are spelled (names, folding, helpers) that should not change what runs: where every kernel's
instructions are byte-identical, no speed can have changed and no GPU A/B is needed.

    python -m kgen.bench.machine_code BEFORE_DIR AFTER_DIR [--only SPEC/TARGET] [--objects DIR]

Each directory is a `kgen build --out` tree (<spec>/<target>/manifest.json and the sources
beside it, as generated/ holds). Kernels are paired by (spec, target, variant, kernel name);
each source is compiled as its build did and the instruction sections of the code objects are
compared (the line table is not: it moves with every line a source gains or loses): `.text.<kernel>` in a cubin, `.text` in an amdgcn code object. A file whose name (the
digest of its source and flags) is the same on both sides is the same source and is not
compiled. Prints one line per differing pair and a summary; exits 1
when any pair differs.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import hashlib
import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from kgen.backends import backend
from kgen.build import kernel_command
from kgen.hw.descriptor import load_target


def elf_sections(blob: bytes) -> dict[str, bytes]:
    """Section name -> contents of a little-endian ELF64 file (cubins and amdgcn code objects)."""
    if blob[:4] != b"\x7fELF" or blob[4] != 2:
        raise ValueError("not an ELF64 file")
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for name_off, kind, _flags, _addr, offset, size, *_ in headers:
        end = blob.index(b"\0", names_at + name_off)
        name = blob[names_at + name_off:end].decode()
        out[name] = b"" if kind == 8 else blob[offset:offset + size]  # 8: SHT_NOBITS
    return out


def instructions(code_object: Path, kernel: str) -> bytes:
    sections = elf_sections(code_object.read_bytes())
    for name in (f".text.{kernel}", ".text"):
        if name in sections:
            return sections[name]
    raise ValueError(f"{code_object}: no instruction section for {kernel}")


def _pairs(root: Path, only: list[str]) -> dict[tuple, tuple[Path, dict, str]]:
    """(spec, target, variant id, kernel name) -> (source file, its manifest entry, target), for the
    builds whose <spec>/<target> folder matches one of `only` (all when empty)."""
    out = {}
    for manifest in sorted(root.glob("*/*/manifest.json")):
        where = f"{manifest.parent.parent.name}/{manifest.parent.name}"
        if only and not any(fnmatch.fnmatch(where, o) for o in only):
            continue
        m = json.loads(manifest.read_text())
        for variant in m["variants"]:
            for file in variant["kernels"]:
                entry = dict(m["kernels"][file])
                if m.get("compile"):
                    entry["command"] = kernel_command(m["compile"], file, entry)
                out[(m["op"], m["target"], variant["id"], entry["name"])] = (manifest.parent / file, entry, m["target"])
    return out


def _compile(source: Path, entry: dict, target: str, objects: Path) -> bytes:
    """The instruction bytes of one source, compiled with its manifest's command (or, in a
    --no-compile build, which records none, kgen's own); the object is kept in `objects` under the
    source's file name, which is the digest of its text and flags."""
    out = objects / (source.name + ".o")
    if not out.exists():
        tmp = out.with_suffix(".tmp")
        if entry.get("command"):
            cmd = list(entry["command"])  # kgen.build.kernel_command's
            cmd[cmd.index("-o") + 1] = str(tmp)
            proc = subprocess.run(cmd, cwd=source.parent, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"{source}: compile failed\n{proc.stderr[-2000:]}")
        else:
            t = load_target(target)  # the headers beside the source are the ones its build wrote
            tmp.write_bytes(backend(t.backend).compile(source.resolve(), t.compiler_arch, include_dirs=[]).binary)
        tmp.rename(out)
    return instructions(out, entry["name"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", action="append", default=[], metavar="SPEC/TARGET",
                    help="compare these builds only (a glob: ssd_bwd/*, */sm_90); repeatable")
    ap.add_argument("--objects", type=Path, default=None,
                    help="keep compiled objects here between runs (default: a temporary folder)")
    args = ap.parse_args(argv)
    a, b = _pairs(args.before, args.only), _pairs(args.after, args.only)
    only = sorted(set(a) ^ set(b))
    for key in only:
        print(f"only in {'before' if key in a else 'after'}: {' '.join(key)}")
    common = sorted(set(a) & set(b))
    with tempfile.TemporaryDirectory() as tmp:
        objects = args.objects or Path(tmp)
        objects.mkdir(parents=True, exist_ok=True)
        todo = {}
        for key in common:
            if a[key][0].name != b[key][0].name:
                todo.setdefault(a[key][0].name, a[key])
                todo.setdefault(b[key][0].name, b[key])
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            done = dict(zip(todo, pool.map(lambda v: _compile(*v, objects), todo.values())))
    same_source = differ = 0
    for key in common:
        fa, fb = a[key][0].name, b[key][0].name
        if fa == fb:
            same_source += 1
            continue
        ia, ib = done[fa], done[fb]
        if ia != ib:
            differ += 1
            print(f"differs: {' '.join(key)}  {fa} -> {fb}  "
                  f"({len(ia)} -> {len(ib)} bytes; sha {hashlib.sha256(ia).hexdigest()[:8]} -> "
                  f"{hashlib.sha256(ib).hexdigest()[:8]})")
    print(f"{len(common)} kernels paired: {same_source} same source, "
          f"{len(common) - same_source - differ} new source with the same instructions, {differ} differ; "
          f"{len(only)} unpaired")
    return 1 if differ or only else 0


if __name__ == "__main__":
    sys.exit(main())
