"""Load a spec file: YAML -> validated Spec, with every error at the user's file:line:col."""
from __future__ import annotations

import itertools
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import SourceLoc, SpecError, UsageError
from .compose import compose
from .expr import eval_expr
from .model import INT_DTYPE_NAMES, Scalar, Spec
from .refs import FieldError
from .yamlpos import PositionedYaml, read_yaml


@dataclass(frozen=True)
class LoadedSpec:
    spec: Spec
    path: Path
    yaml: PositionedYaml

    def where(self, *path: Any) -> SourceLoc | None:
        return self.yaml.where(path)

    def variants(self, values: dict[str, list[Scalar]] | None = None) -> list[dict[str, Scalar]]:
        """The product of the variant axes (`values` replacing some axes' lists), less the
        excluded combinations, in declaration order."""
        axes = list(self.spec.variants)
        lists = {**self.spec.variants, **(values or {})}
        out = []
        for combo in itertools.product(*(lists[a] for a in axes)):
            v = dict(zip(axes, combo))
            if not any(all(v[a] == x for a, x in ex.items()) for ex in self.spec.exclude):
                out.append(v)
        return out

    def select_variant(self, wanted: dict[str, str]) -> list[dict[str, Scalar]]:
        """The variants matching `wanted` (axis -> value as text, from the command line)."""
        opened: dict[str, list[Scalar]] = {}
        for axis, text in wanted.items():
            if axis not in self.spec.variants:
                raise UsageError(f"unknown variant axis '{axis}'; axes of {self.spec.name}: {', '.join(self.spec.variants) or 'none'}")
            if text in [str(x).lower() for x in self.spec.variants[axis]]:
                continue
            also = self.spec.open_variants.get(axis)
            if isinstance(also, list) and text in [str(x).lower() for x in also]:
                opened[axis] = [x for x in also if str(x).lower() == text]  # an open value, not built ahead
                continue
            if isinstance(also, str) and re.fullmatch(r"-?[0-9]+", text) and eval_expr(also, {axis: int(text)}):
                opened[axis] = [int(text)]  # an open axis' value that is not built ahead
                continue
            raise UsageError(f"unknown value '{text}' for variant axis '{axis}'; accepted: {accepted_values(self.spec, axis)}")
        return [v for v in self.variants(opened) if all(str(v[a]).lower() == t for a, t in wanted.items())]


def accepted_values(spec, axis: str, show=lambda x: str(x).lower()) -> str:
    """The values a variant axis takes, for an error message: the listed ones, then the open
    ones (open_variants)."""
    also = spec.open_variants.get(axis)
    listed = ", ".join(show(x) for x in [*spec.variants[axis], *(also if isinstance(also, list) else [])])
    return listed + (f", or an integer with {also}" if isinstance(also, str) else "")


# the fields a spec that extends another merges key by key with its base's; the others replace
MERGED_FIELDS = ("variants", "open_variants", "tensors", "scalars", "tunables", "hooks", "autograd")


def load_spec(path: str | Path) -> LoadedSpec:
    path = Path(path)
    doc = _read_extended(path, ())
    if not isinstance(doc.data, dict):
        raise SpecError("a spec must be a YAML mapping with the fields kgen, name, summary, tensors, kernels, reference", doc.where(()))
    try:
        spec = Spec.model_validate(doc.data)
    except ValidationError as e:
        raise _spec_error(e, doc) from None
    return LoadedSpec(spec=spec, path=path, yaml=doc)


def _read_extended(path: Path, chain: tuple[Path, ...]) -> PositionedYaml:
    """The spec file's YAML, merged onto its base's (and theirs) where it has `extends:`."""
    doc = read_yaml(path)
    data = doc.data
    if not isinstance(data, dict) or "extends" not in data:
        return doc
    where = doc.where(("extends",))
    if "name" not in data:
        raise SpecError("a spec that extends another needs its own name (its op's name)", doc.where(()))
    if isinstance(data["extends"], list):  # several variants of one base, composed
        if len(data["extends"]) < 2:
            raise SpecError("extends: a list names two or more specs that extend one base; one spec is given "
                            "as its file alone", where)
        parents = [_read_extended(_base_path(path, name, where, chain), chain + (path.resolve(),)) for name in data["extends"]]
        roots = [_root_path(path.parent / name) for name in data["extends"]]
        if len(set(roots)) > 1:
            raise SpecError(f"extends: {', '.join(data['extends'])} do not extend one base (their bases: "
                            f"{', '.join(sorted({r.name for r in roots}))}); composed specs share one", where)
        base, base_name = compose(parents, read_yaml(roots[0]), where), roots[0].name
    else:
        base_name = data["extends"]
        base = _read_extended(_base_path(path, base_name, where, chain), chain + (path.resolve(),))
    if not isinstance(base.data, dict):
        raise SpecError(f"extends: {base_name} is not a spec (a YAML mapping)", where)
    _complete_hooks(doc, base, base_name)
    merged = doc.merged_onto(base, MERGED_FIELDS)
    autograd = merged.data.get("autograd")
    if "autograd" not in data and isinstance(autograd, dict) and isinstance(autograd.get("saves"), list):
        # the base's backward, derived for this spec (backward_spec), receives the inputs it adds
        added = [n for n in _added_inputs(doc, base) if n not in autograd["saves"]]
        merged.data["autograd"] = {**autograd, "saves": autograd["saves"] + added}
    return merged


def _base_path(path: Path, base_name: Any, where: SourceLoc | None, chain: tuple[Path, ...]) -> Path:
    if not isinstance(base_name, str) or not base_name.endswith((".yaml", ".yml")):
        raise SpecError(f"extends: give the base spec's file (or a list of them), relative to this one, got {base_name!r}", where)
    base_path = path.parent / base_name
    if base_path.resolve() == path.resolve() or base_path.resolve() in chain:
        raise SpecError(f"extends: {base_name} extends itself", where)
    if not base_path.is_file():
        raise SpecError(f"extends: cannot read {base_name} (no such file beside this spec)", where)
    return base_path


def _root_path(path: Path) -> Path:
    """The file at the end of `path`'s extends chain (through the first of a list)."""
    seen: set[Path] = set()
    while path.resolve() not in seen:
        seen.add(path.resolve())
        data = read_yaml(path).data
        ext = data.get("extends") if isinstance(data, dict) else None
        ext = ext[0] if isinstance(ext, list) and ext else ext
        if not isinstance(ext, str):
            break
        path = path.parent / ext
    return path.resolve()


def _added_inputs(doc: PositionedYaml, base: PositionedYaml) -> list[str]:
    tensors = doc.data.get("tensors") if isinstance(doc.data.get("tensors"), dict) else {}
    have = base.data.get("tensors") if isinstance(base.data.get("tensors"), dict) else {}
    return [n for n, t in tensors.items() if n not in have and isinstance(t, dict) and t.get("role", "input") == "input"]


def backward_spec(ls: LoadedSpec) -> LoadedSpec:
    """The backward spec of `ls` (which has `autograd`): the file `autograd.backward` names,
    relative to the file that gave it. When that file is a base `ls` extends, the backward is
    derived: the base's backward extended by what the files between add (docs/SPEC_LANGUAGE.md,
    "Attention variants"): their hook bodies, sizes, scalars, input tensors and values of the
    variant axes the backward has, under the name `<name>_bwd`. So a variant is one file, forward and
    backward taking the same hooks."""
    given = ls.where("autograd", "backward")
    giver = Path(given.file) if given is not None else ls.path
    path = giver.parent / ls.spec.autograd.backward
    if ls.path.resolve() == giver.resolve():
        return load_spec(path)
    if not path.is_file():
        raise SpecError(f"autograd.backward: cannot read {ls.spec.autograd.backward} (no such file beside "
                        f"{giver.name})", given)
    merged = _derived_backward(ls.path, giver, path, ls.spec.name)
    # an added floating input that takes a gradient gets it as an fp32 output d<name>, which the
    # base's `tensor_grads` statements add into (the autograd glue returns it in the input's dtype).
    # It sums the score gradient over many scores, each through delta = rowsum(do * o) of the
    # saved, rounded o: that rounding, times the hook's derivative (ALiBi's: the distance), adds
    # up where PyTorch's own low-precision answer cancels, so its check also accepts 2% of the
    # largest value (as ssd_bwd's dA, summed over positions, accepts 1%)
    tensors = merged.data["tensors"] = dict(merged.data.get("tensors") or {})
    for name, t in ls.spec.tensors.items():
        if (name in tensors and f"d{name}" not in tensors and t.role == "input"
                and t.grad and t.dtype not in INT_DTYPE_NAMES):
            tensors[f"d{name}"] = {"shape": list(t.shape), "dtype": "fp32", "role": "output", "init": "zeros",
                                   "scale_tolerance": 0.02}
    try:
        spec = Spec.model_validate(merged.data)
    except ValidationError as e:
        raise _spec_error(e, merged) from None
    return LoadedSpec(spec=spec, path=ls.path, yaml=merged)


def _derived_backward(here: Path, giver: Path, backward: Path, name: str) -> PositionedYaml:
    """The backward of the spec in `here`, which extends (through any chain, or composes) the
    spec in `giver` whose backward is the file `backward`: that file, each file between extending
    it by what it adds, compositions composed as their forwards are."""
    if here.resolve() == giver.resolve():
        return _read_extended(backward, ())
    doc = read_yaml(here)
    bases = doc.data["extends"]
    if isinstance(bases, list):
        root = _read_extended(backward, ())
        base = compose([_derived_backward(here.parent / b, giver, backward, name) for b in bases], root, doc.where(("extends",)))
    else:
        base = _derived_backward(here.parent / bases, giver, backward, name)
    return _backward_overlay(doc, base, name).merged_onto(base, MERGED_FIELDS)


def _backward_overlay(doc: PositionedYaml, backward: PositionedYaml, name: str) -> PositionedYaml:
    """The part of a derived forward's file that its derived backward takes."""
    bwd = backward.data
    mine = doc.data
    out = PositionedYaml.__new__(PositionedYaml)
    out.file, out.text, out.lines = doc.file, doc.text, doc.lines
    out.positions, out.block_scalars = dict(doc.positions), dict(doc.block_scalars)
    data: dict[str, Any] = {"name": f"{name}_bwd", "summary": f"The backward of {name}, derived from {Path(backward.file).name}."}
    if isinstance(mine.get("hooks"), dict) and isinstance(bwd.get("hooks"), dict):
        data["hooks"] = {k: v for k, v in mine["hooks"].items() if k in bwd["hooks"]}
    if isinstance(mine.get("scalars"), dict):
        data["scalars"] = dict(mine["scalars"])
    if isinstance(mine.get("sizes"), list) and isinstance(bwd.get("sizes"), list):  # the sizes it adds
        data["sizes"] = bwd["sizes"] + [n for n in mine["sizes"] if n not in bwd["sizes"]]
    if isinstance(mine.get("tensors"), dict):
        data["tensors"] = {k: v for k, v in mine["tensors"].items() if isinstance(v, dict) and v.get("role", "input") == "input"}
    if isinstance(mine.get("variants"), dict) and isinstance(bwd.get("variants"), dict):
        data["variants"] = {k: v for k, v in mine["variants"].items() if k in bwd["variants"]}
    out.data = data
    _complete_hooks(out, backward, Path(backward.file).name)
    return out


def _complete_hooks(doc: PositionedYaml, base: PositionedYaml, base_name: str) -> None:
    """A derived spec's hook overrides as full declarations: `name: body` (or a mapping without
    `args`) takes the base's args; a hook the base does not declare, or other args, is an error."""
    hooks = doc.data.get("hooks")
    if not isinstance(hooks, dict):
        return
    declared = base.data.get("hooks") if isinstance(base.data.get("hooks"), dict) else {}
    for name, value in hooks.items():
        here = doc.where(("hooks", name, "<key>"))
        if name not in declared:
            known = ", ".join(declared) or "none"
            raise SpecError(f"hooks: '{name}' is not a hook of {base_name}; its hooks: {known}", here)
        args = declared[name].get("args") if isinstance(declared[name], dict) else None
        if isinstance(value, str):
            hooks[name] = {"args": args, "body": value}
            doc.alias(("hooks", name), ("hooks", name, "body"))
        elif isinstance(value, dict):
            if "args" in value and value["args"] != args:
                shown = ", ".join(map(str, args or []))
                raise SpecError(f"hooks: '{name}' takes ({shown}) in {base_name}; an override keeps them", here)
            hooks[name] = {"args": args, **value}


def variant_id(variant: dict[str, Scalar]) -> str:
    """A file-name-safe name for a variant: 'dtype=bf16,causal=true' -> 'dtype-bf16_causal-true'."""
    return "_".join(f"{k}-{str(v).lower()}" for k, v in variant.items()) or "default"


def _spec_error(e: ValidationError, doc: PositionedYaml) -> SpecError:
    err = e.errors()[0]
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        parent, field = loc[:-1], loc[-1]
        allowed = _fields_at(Spec, parent)
        hint = f"; accepted: {', '.join(allowed)}" if allowed else ""
        return SpecError(f"unknown field '{field}'{hint}", doc.where(loc + ("<key>",)) or doc.where(loc))
    if kind == "missing":
        parent, field = loc[:-1], loc[-1]
        return SpecError(f"missing field '{field}'", doc.where(parent))
    cause = err.get("ctx", {}).get("error")
    if isinstance(cause, FieldError):
        # a cross-field check (kgen.spec.refs): pydantic puts it at the model, the error knows the field
        field = ".".join(str(p) for p in cause.path if p != "<key>")
        return SpecError(f"{field}: {cause.message}", doc.where(cause.path))
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    # pydantic appends union-member names to loc ('list[int]'); drop what the YAML does not have
    while loc and loc not in doc.positions and len(loc) > 1 and isinstance(loc[-1], str) and "[" in loc[-1]:
        loc = loc[:-1]
    field = ".".join(str(p) for p in loc if not (isinstance(p, str) and "[" in p)) or "spec"
    return SpecError(f"{field}: {msg[0].lower() + msg[1:]}" if msg else field, doc.where(loc))


def _fields_at(model: type[BaseModel], path: tuple) -> list[str]:
    """The field names accepted at `path` inside `model` (for 'accepted: ...' hints)."""
    cur: Any = model
    for p in path:
        if isinstance(cur, type) and issubclass(cur, BaseModel):
            if p not in cur.model_fields:
                return []
            cur = cur.model_fields[p].annotation
        else:
            args = [a for a in typing.get_args(cur) if a is not type(None)]
            origin = typing.get_origin(cur)
            if origin in (list, dict) and args:
                cur = args[-1]
            elif args:
                cur = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), args[0])
            else:
                return []
        args = [a for a in typing.get_args(cur) if a is not type(None)]
        if typing.get_origin(cur) is typing.Union and args:
            cur = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), cur)
    if isinstance(cur, type) and issubclass(cur, BaseModel):
        return list(cur.model_fields)
    return []
