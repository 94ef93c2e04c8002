"""YAML with positions: the parsed data plus the file:line:col of every mapping key and value.

PyYAML's composer keeps a mark on each node; we walk the node tree once and record, for every
path (tuple of keys and list indices), where its value starts. Errors from pydantic carry such
a path, so a user's mistake is reported at the place in the YAML that holds it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import SourceLoc, SpecError

Path_ = tuple[Any, ...]


class PositionedYaml:
    def __init__(self, file: str, text: str):
        self.file = file
        self.text = text
        self.lines = text.splitlines()
        self.positions: dict[Path_, SourceLoc] = {}
        # path -> (first content line (1-based) of a `|` block, the lines of the file it is in)
        self.block_scalars: dict[Path_, tuple[int, list[str]]] = {}
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            self.data = yaml.safe_load(text)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            where = SourceLoc(file, mark.line + 1, mark.column + 1) if mark else None
            raise SpecError(f"this is not valid YAML: {e.problem or e.context}", where) from None
        if node is not None:
            self._walk(node, ())

    def _walk(self, node: yaml.Node, path: Path_) -> None:
        self.positions[path] = SourceLoc(self.file, node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
            self.block_scalars[path] = (node.start_mark.line + 2, self.lines)
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, SourceLoc] = {}
            for key, value in node.value:
                k = key.value
                here = SourceLoc(self.file, key.start_mark.line + 1, key.start_mark.column + 1)
                if k in seen:  # PyYAML keeps the last silently; a spec means one of them
                    raise SpecError(f"duplicate key '{k}' (first given at line {seen[k].line}); give each key once", here)
                seen[k] = here
                self._walk(value, path + (k,))
                self.positions[path + (k, "<key>")] = SourceLoc(self.file, key.start_mark.line + 1, key.start_mark.column + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._walk(item, path + (i,))

    def merged_onto(self, base: "PositionedYaml", maps: tuple[str, ...]) -> "PositionedYaml":
        """This document over `base` (a spec that extends another): each top-level field of this
        one replaces the base's, except the `maps`, merged key by key (this one's keys win). Every
        value keeps the position in the file it came from; `text` is both files', so that a
        change to either is a change to the spec."""
        out = PositionedYaml.__new__(PositionedYaml)
        out.file, out.lines = self.file, self.lines
        out.text = f"{base.text}\n# extended by {self.file}\n{self.text}"
        data, replaced = dict(base.data), []
        for key, value in self.data.items():
            if key in maps and isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
                replaced += [(key, k) for k in value]
            else:
                data[key] = value
                replaced.append((key,))
        out.data = data

        def kept(table: dict) -> dict:
            return {p: v for p, v in table.items() if not any(p[:len(r)] == r for r in replaced)}
        out.positions = {**kept(base.positions), **self.positions}
        out.block_scalars = {**kept(base.block_scalars), **self.block_scalars}
        return out

    def alias(self, src: Path_, dst: Path_) -> None:
        """Record `src`'s position (and block) also for `dst`: a value the loader moved."""
        for table in (self.positions, self.block_scalars):
            for p in [p for p in table if p[:len(src)] == src]:
                table[dst + p[len(src):]] = table[p]

    def where(self, path: Path_) -> SourceLoc | None:
        """The position of `path`, or of its closest recorded ancestor."""
        path = tuple(path)
        while path:
            if path in self.positions:
                return self.positions[path]
            path = path[:-1]
        return self.positions.get(())

    def block_origin(self, path: Path_) -> tuple[int, int]:
        """(line, col) in the file of line 1, col 0 of a block scalar's content (`program: |`)."""
        if path in self.block_scalars:
            first, lines = self.block_scalars[path]
            while first <= len(lines) and not lines[first - 1].strip():
                first += 1
            text = lines[first - 1] if first <= len(lines) else ""
            indent = len(text) - len(text.lstrip(" "))
            return first, indent
        loc = self.where(path)
        return (loc.line, loc.col) if loc else (1, 0)


def read_yaml(path: Path) -> PositionedYaml:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SpecError(f"cannot read spec file {path}: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise SpecError(f"a spec must be UTF-8 text; byte 0x{data[e.start]:02x} is not", SourceLoc(str(path), line, col)) from None
    return PositionedYaml(str(path), text)
