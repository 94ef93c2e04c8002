"""How a build differs from what generated/ holds, in words a failing test can print
(tests/test_build.py)."""
from __future__ import annotations

import json

# Depend on the compiler installation, not on kgen: compared loosely.
COMPILER_FIELDS = ("compiler", "resources")


def masked(doc: dict, fields: tuple[str, ...], compiled: bool) -> dict:
    """The manifest less what depends on the compiler installation (its version, the resources it
    reports) and, for a build that compiled nothing, the commands it would have run."""
    doc = json.loads(json.dumps(doc))
    for k in doc.get("kernels", {}).values():
        for f in fields:
            k.pop(f, None)
    if compiled and doc.get("compile"):
        doc["compile"].pop("compiler", None)
    else:
        doc.pop("compile", None)
    return doc


def first_difference(old, new, path: str = "") -> str:
    """Where two JSON values first differ, as a path like variants[0].kernels[1].command."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            if key not in old or key not in new:
                missing = "missing in checked-in" if key not in old else "not produced"
                return f"{path}.{key} ({missing})".lstrip(".")
            if old[key] != new[key]:
                return first_difference(old[key], new[key], f"{path}.{key}")
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            if a != b:
                return first_difference(a, b, f"{path}[{i}]")
    return f"{path.lstrip('.')}: checked-in {json.dumps(old)[:200]}, built {json.dumps(new)[:200]}"


def first_line_difference(old: str, new: str) -> str:
    """Where two texts first differ, as the line, column and the text around it."""
    for i, (a, b) in enumerate(zip(old.splitlines(), new.splitlines()), 1):
        if a != b:  # show the lines from a little before the first differing character
            col = next((c for c, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            start = max(0, col - 40)
            dots = "..." if start else ""
            return (f"line {i} col {col + 1}: checked-in {dots}{a[start:col + 60]!r}, "
                    f"built {dots}{b[start:col + 60]!r}")
    return f"lengths differ: {len(old.splitlines())} vs {len(new.splitlines())} lines"


def manifest_problem(checked_in: dict, build) -> str | None:
    """What is wrong with a checked-in manifest against a build (tests/test_build.py's Build)."""
    # Without a compiler here the build records no commands: compare what it does record.
    fields = COMPILER_FIELDS + (() if build.compiled else ("command",))
    old, new = masked(checked_in, fields, build.compiled), masked(build.manifest, fields, build.compiled)
    if old != new:
        return f"differs at {first_difference(old, new)}"
    if build.compiled:
        if not (checked_in.get("compile") or {}).get("compiler"):
            return "the manifest records no compiler"
        for file, k in checked_in["kernels"].items():
            if not k.get("resources"):
                return f"kernel {file} records no resources"
    return None
