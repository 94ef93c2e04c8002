"""The compiles generated/ records, answered from its manifests (tests/test_build.py's builds).

generated/<op>/<target>/ holds each kernel's source and, in manifest.json, the resources the
compiler reported when `kgen build` made it, with the compiler's version line. A source that is
byte for byte a recorded one, with the same headers and included bodies beside it and the same
extra flags, compiled by a compiler with the same version line, gets the recorded answer: the
golden build takes it from the record rather than compiling it again. The build compiles for
real:
- every source not recorded: whatever a change to kgen, a template or a spec rewrote, and every
  form a build gives up for spilling (never recorded);
- a sample of the recorded sources, whose real resources must equal the record (`mismatches`):
  per kernel name and set of extra flags the longest source (with the bodies it includes).
So an edited or stale record, or a compiler that answers otherwise, fails the golden tests, and
a change to what kgen generates is compiled whole.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kgen.backends import compiler_identity
from kgen.build import kernel_command
from kgen.toolchain.resources import CompileResult, KernelResources

# what the compiler reports whatever disassembler is installed (matrix_instrs is compared only
# when both sides read it with the same tool)
_COMPARED = ("registers", "agprs", "sgprs", "shared_bytes", "spill_bytes", "stack_bytes",
             "occupancy", "wavefront_size", "max_workgroup_size", "mma_notes")


def recorded_form(r: KernelResources) -> dict:
    """A compile's resources as a manifest records them (kgen.build.manifest: zeros left out)."""
    return {key: v for key, v in r.as_dict().items() if v not in (None, 0, [], ()) and key != "name"}


@dataclass
class RecordedCompiles:
    """The records of one generated/<op>/<target>/ folder, and what the build did with them."""

    folder: Path
    backend: str
    records: dict[str, dict] = field(default_factory=dict)  # file -> manifest kernel entry
    compile_record: dict | None = None  # the manifest's `compile`
    sample: set[str] = field(default_factory=set)
    replayed: set[str] = field(default_factory=set)  # files answered from their record
    checked: list[str] = field(default_factory=list)  # sampled files compiled and compared
    mismatches: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        path = self.folder / "manifest.json"
        if not path.is_file():
            return
        doc = json.loads(path.read_text())
        compile_record = doc.get("compile")
        if not compile_record or compile_record.get("compiler") != compiler_identity(self.backend):
            return  # recorded by another compiler (or without one): everything is compiled
        self.compile_record = compile_record
        self.records = {f: e for f, e in doc.get("kernels", {}).items()
                        if e.get("resources") and "compiler" not in e and (self.folder / f).is_file()}
        longest: dict[tuple[str, tuple[str, ...]], tuple[int, str]] = {}
        for f, e in sorted(self.records.items()):
            form = (e["name"], tuple(e.get("flags", ())))
            size = len(self._text_with_bodies(f))
            if size > longest.get(form, (-1, ""))[0]:
                longest[form] = (size, f)
        self.sample = {f for _, f in longest.values()}

    def _text_with_bodies(self, file: str) -> str:
        text = (self.folder / file).read_text()
        bodies = [p.read_text() for p in sorted(self.folder.iterdir())
                  if p.name != file and p.name != "manifest.json" and f'"{p.name}"' in text]
        return "\n".join([text, *bodies])

    def _matches(self, source: Path, flags: list[str]) -> dict | None:
        """The record of `source` if it, and every file beside it, is what generated/ holds."""
        entry = self.records.get(source.name)
        if entry is None or list(entry.get("flags", [])) != list(flags):
            return None
        for p in source.parent.iterdir():  # the source, its headers and included bodies
            recorded = self.folder / p.name
            if not recorded.is_file() or recorded.read_bytes() != p.read_bytes():
                return None
        return entry

    def wrap(self, compile_fn):
        """compile_fn, answering recorded sources from their records (but the sample's)."""
        def run(source, arch, include_dirs=(), extra_flags=()):
            source = Path(source)
            entry = None if include_dirs else self._matches(source.resolve(), list(extra_flags))
            if entry is not None and source.name not in self.sample:
                self.replayed.add(source.name)
                return self._from_record(source.name, entry)
            result = compile_fn(source, arch, include_dirs=include_dirs, extra_flags=extra_flags)
            if entry is not None:
                self._compare(source.name, entry, result)
            return result
        return run

    def _from_record(self, file: str, entry: dict) -> CompileResult:
        res = {key: tuple(v) if isinstance(v, list) else v for key, v in entry["resources"].items()}
        command = kernel_command(self.compile_record, file, entry)
        return CompileResult(binary=b"", binary_suffix=self.compile_record["object_suffix"],
                             resources={entry["name"]: KernelResources(name=entry["name"], **res)},
                             command=command, compiler=command[0],
                             compiler_version=self.compile_record["compiler"], log="")

    def _compare(self, file: str, entry: dict, result: CompileResult) -> None:
        self.checked.append(file)
        real = result.resources.get(entry["name"])
        if real is None:
            self.mismatches.append(f"{file}: the compiler reported no resources for {entry['name']}")
            return
        got, want = recorded_form(real), entry["resources"]
        keys = list(_COMPARED)
        if got.get("disasm_tool") == want.get("disasm_tool"):
            keys.append("matrix_instrs")
        differ = [f"{k} {want.get(k)} recorded, {got.get(k)} compiled" for k in keys if got.get(k) != want.get(k)]
        if differ:
            self.mismatches.append(f"{file}: " + "; ".join(differ))
