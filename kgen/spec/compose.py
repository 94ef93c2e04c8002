"""Several specs that extend one base, composed into one (`extends: [a.yaml, b.yaml]`).

Each parent is read whole (its own `extends` resolved) and compared with the base they share:
what a parent changes is taken, what several change is joined.
- sizes: united in order; tensors, scalars, tunables, open_variants: united key by key, a key two
  parents give differently is an error;
- variants: each axis takes the values every parent takes (a sliding window's `causal: [false]`
  stays false beside a document mask that takes both), an axis left empty is an error;
- autograd: the tensors each parent saves, united; the rest must agree;
- hooks: a hook one parent overrides takes that body; a hook several override (with different
  bodies) is joined by the base's `combine:` for it (docs/SPEC_LANGUAGE.md, "Composing
  variants"): each override is kept as a hook of its own, `<hook>_<parent file's stem>`, and the
  hook's body calls them, `all` joined by `and` (FlexAttention's and_masks), `any` by `or`,
  `chain` nested with the first argument threaded (softcap then ALiBi, as extends lists them).
  Hooks that call other hooks see the composed ones (a window's mask reads the packed
  sequences' `diagonal`);
- every other field (kernels, reference, constraints, buckets, ...) may be changed by one parent
  at most, or by several to the same value.
Each value keeps the position in the file that gave it; the joined hooks are placed at the
composing file's `extends:`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import SourceLoc, SpecError
from .yamlpos import PositionedYaml

# the fields each parent's document may unite key by key
_KEYED = ("tensors", "scalars", "tunables", "open_variants")
_NAMING = ("kgen", "name", "summary", "extends")


def compose(parents: list[PositionedYaml], root: PositionedYaml, where: SourceLoc | None) -> PositionedYaml:
    """The parents (each the whole document of a spec that extends `root`) as one document."""
    out = PositionedYaml.__new__(PositionedYaml)
    out.file, out.lines = root.file, root.lines
    out.text = root.text + "".join(f"\n# composed with {p.file}\n{p.text}" for p in parents)
    out.data = dict(root.data)
    out.positions, out.block_scalars = dict(root.positions), dict(root.block_scalars)
    out.data.pop("extends", None)
    names = [Path(p.file).name for p in parents]
    given: dict[tuple, int] = {}  # path -> the parent that changed it

    def take(i: int, path: tuple, value: Any) -> None:
        if path in given and _get(out.data, path) != value:
            raise SpecError(f"extends: {names[given[path]]} and {names[i]} give {'.'.join(map(str, path))} differently; "
                            "composed specs may change it in one of them only", where)
        given[path] = i
        _put(out, parents[i], path, value)

    for i, p in enumerate(parents):
        for key, value in p.data.items():
            if key in _NAMING or key == "hooks" or value == root.data.get(key):
                continue
            if key in _KEYED and isinstance(value, dict):
                base = root.data.get(key) if isinstance(root.data.get(key), dict) else {}
                for k, v in value.items():
                    if base.get(k) != v:
                        take(i, (key, k), v)
            elif key == "sizes" and isinstance(value, list):
                have = out.data.get("sizes") or []
                out.data["sizes"] = have + [n for n in value if n not in have]
            elif key == "variants" and isinstance(value, dict):
                _intersect_variants(out, p, value, names[i], where)
            elif key == "autograd" and isinstance(value, dict):
                _unite_autograd(out, value, names[i], where)
            else:
                take(i, (key,), value)
    out.data["hooks"] = _hooks(out, parents, root, names, where)
    out.data["summary"] = "Composed of " + ", ".join(str(p.data.get("name", n)) for p, n in zip(parents, names)) + "."
    return out


def _intersect_variants(out: PositionedYaml, p: PositionedYaml, variants: dict, name: str, where) -> None:
    have = dict(out.data.get("variants") or {})
    for axis, values in variants.items():
        if axis not in have:
            have[axis] = values
            _copy_positions(out, p, ("variants", axis))
            continue
        kept = [v for v in have[axis] if isinstance(values, list) and v in values]
        if not kept:
            raise SpecError(f"extends: no value of variant axis '{axis}' is taken by every composed spec "
                            f"({name} takes {values})", where)
        have[axis] = kept
    out.data["variants"] = have


def _unite_autograd(out: PositionedYaml, autograd: dict, name: str, where) -> None:
    have = dict(out.data.get("autograd") or {})
    for k, v in autograd.items():
        if k == "saves" and isinstance(v, list):
            have["saves"] = list(have.get("saves") or []) + [n for n in v if n not in (have.get("saves") or [])]
        elif have.get(k) != v:
            raise SpecError(f"extends: {name} gives autograd.{k} differently from the base; composed specs keep the "
                            "base's backward", where)
    out.data["autograd"] = have


def _hooks(out: PositionedYaml, parents: list[PositionedYaml], root: PositionedYaml, names: list[str],
           where: SourceLoc | None) -> dict[str, Any]:
    declared = root.data.get("hooks") if isinstance(root.data.get("hooks"), dict) else {}
    hooks = dict(declared)
    for hook, decl in declared.items():
        overrides: list[tuple[int, dict]] = []
        for i, p in enumerate(parents):
            mine = (p.data.get("hooks") or {}).get(hook)
            if mine is not None and mine != decl and all(mine != o for _, o in overrides):
                overrides.append((i, mine))
        if len(overrides) == 1:
            i, body = overrides[0]
            hooks[hook] = body
            _copy_positions(out, parents[i], ("hooks", hook))
        elif overrides:
            rule = decl.get("combine") if isinstance(decl, dict) else None
            if rule is None:
                raise SpecError(f"extends: {' and '.join(names[i] for i, _ in overrides)} each override hook '{hook}', "
                                f"which declares no `combine:` (all, any or chain) in {Path(root.file).name}", where)
            args = list(decl.get("args") or [])
            parts = []
            for i, body in overrides:
                part = _fresh(f"{hook}_{re.sub(r'[^0-9A-Za-z_]', '_', Path(parents[i].file).stem)}", hooks)
                hooks[part] = {**body, "args": args}
                hooks[part].pop("combine", None)
                _copy_positions(out, parents[i], ("hooks", hook), ("hooks", part))
                parts.append(part)
            hooks[hook] = {**decl, "body": _joined(rule, parts, args)}
            for path in (("hooks", hook), ("hooks", hook, "body"), ("hooks", hook, "<key>")):
                out.block_scalars.pop(path, None)
                if where is not None:
                    out.positions[path] = where
    # the root's own hooks keep their positions; the parents may add none (extends checks that)
    return hooks


def _joined(rule: str, parts: list[str], args: list[str]) -> str:
    """The body that joins the overrides `parts` by `rule`."""
    rest = ", ".join(args[1:])
    if rule == "chain":
        body = args[0]
        for part in parts:
            body = f"{part}({body}{', ' + rest if rest else ''})"
        return body
    calls = [f"{part}({', '.join(args)})" for part in parts]
    return f" {'and' if rule == 'all' else 'or'} ".join(calls)


def _fresh(name: str, taken: dict) -> str:
    out, n = name, 2
    while out in taken:
        out, n = f"{name}_{n}", n + 1
    return out


def _get(data: dict, path: tuple) -> Any:
    for k in path:
        data = data.get(k) if isinstance(data, dict) else None
    return data


def _put(out: PositionedYaml, src: PositionedYaml, path: tuple, value: Any) -> None:
    data = out.data
    for k in path[:-1]:
        data[k] = dict(data.get(k) or {})
        data = data[k]
    data[path[-1]] = value
    _copy_positions(out, src, path)


def _copy_positions(out: PositionedYaml, src: PositionedYaml, path: tuple, to: tuple | None = None) -> None:
    """`src`'s positions (and block scalars) under `path`, recorded in `out` under `to`."""
    to = path if to is None else to
    for table, theirs in ((out.positions, src.positions), (out.block_scalars, src.block_scalars)):
        for p in [p for p in table if p[:len(to)] == to]:
            del table[p]
        for p, v in theirs.items():
            if p[:len(path)] == path:
                table[to + p[len(path):]] = v
