"""Cross-field checks of a spec: every name that one field uses is declared by another.

They run when a spec is loaded (from Spec's model validator), so a misspelt size in a grid is
reported at its place in the YAML rather than at the first build or call. Each failure is a
FieldError carrying the path of the offending value, e.g. ("tensors", "x", "shape", 1), which
kgen.spec.load turns into file:line:col through the YAML's position table.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import SpecError
from .expr import check_expr, names_in

if TYPE_CHECKING:
    from .model import Spec

Path_ = tuple[Any, ...]


class FieldError(ValueError):
    """A ValueError (so that pydantic wraps it) that knows which value of the spec is wrong."""

    def __init__(self, path: Path_, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


def check_references(spec: "Spec", dtype_names: tuple[str, ...]) -> None:
    known = integer_names(spec)
    _check_tensors(spec, known, dtype_names)
    for i, ks in enumerate(spec.kernels):
        for j, g in enumerate(ks.grid):
            expr_at(("kernels", i, "grid", j), g, known)
        _check_warps(spec, i, ks.warps)
    for i, c in enumerate(spec.constraints):
        expr_at(("constraints", i), c, known)
        used = names_in(c)
        if used & set(spec.tunables) and used & set(spec.sizes):
            raise FieldError(("constraints", i), f"'{c}' names sizes ({', '.join(sorted(used & set(spec.sizes)))}) and "
                             f"tunables ({', '.join(sorted(used & set(spec.tunables)))}); a constraint relates sizes and "
                             "variant axes (checked at each call) or variant axes and tunables (which tunable choices a "
                             "variant may take), not both")
    for i, c in enumerate(spec.prefer):
        expr_at(("prefer", i), c, known, {n: h.args for n, h in spec.hooks.items()})
        used = names_in(c)
        if used & set(spec.sizes) or not used & set(spec.tunables):
            raise FieldError(("prefer", i), f"'{c}' must name tunables and no sizes (a preference orders a "
                             "variant's tunable choices; sizes are not known when they are ordered); "
                             f"tunables: {', '.join(spec.tunables) or 'none'}")
    _check_exclude(spec)
    _check_aliases(spec)
    if spec.autograd:
        savable = [n for n, t in spec.tensors.items() if t.role != "scratch"]  # scratch is not kept
        overwritten = {src: out for out, src in spec.aliases().items()}
        for i, s in enumerate(spec.autograd.saves):
            if s not in savable:
                raise FieldError(("autograd", "saves", i),
                                 f"'{s}' is not an input or output of this spec; accepted: {', '.join(savable)}")
            if s in overwritten:  # what would be saved is the output, not the input the forward read
                raise FieldError(("autograd", "saves", i),
                                 f"'{s}' is overwritten by output '{overwritten[s]}' (alias: {s}), so the input as the "
                                 f"forward read it cannot be saved; save '{overwritten[s]}' or drop the alias")
    taken = {**{n: "a scalar" for n in spec.scalars}, **{n: "a tensor" for n in spec.tensors},
             **{n: "a variant axis" for n in spec.variants}, **{n: "a tunable" for n in spec.tunables}}
    for i, size in enumerate(spec.sizes):
        if size in taken:
            raise FieldError(("sizes", i), f"'{size}' is also {taken[size]}; a name may be declared only once")


def tunable_constraints(spec: "Spec") -> list[str]:
    """The constraints that name a tunable: they decide which tunable choices a variant may take
    (kgen.build.tunable_candidates); the others are checked on the sizes at each call."""
    return [c for c in spec.constraints if names_in(c) & set(spec.tunables)]


def integer_names(spec: "Spec") -> list[str]:
    """The names a size expression may use, in declaration order: sizes, the variant axes whose
    values are all integers or booleans, and tunables (dtype axes are not numbers)."""
    int_axes = [a for a, vals in spec.variants.items() if all(isinstance(v, int) for v in vals)]
    return list(dict.fromkeys([*spec.sizes, *int_axes, *spec.tunables]))


def _check_tensors(spec: "Spec", known: list[str], dtype_names: tuple[str, ...]) -> None:
    for tname, t in spec.tensors.items():
        if t.dtype.startswith("$"):
            axis = t.dtype[1:]
            if axis not in spec.variants:
                accepted = ", ".join([*dtype_names, *(f"${a}" for a in spec.variants)])
                raise FieldError(("tensors", tname, "dtype"), f"{t.dtype} names no variant axis; accepted: {accepted}")
            opened = spec.open_variants.get(axis)
            bad = [str(v) for v in [*spec.variants[axis], *(opened if isinstance(opened, list) else [])]
                   if v not in dtype_names]
            if bad:
                raise FieldError(("tensors", tname, "dtype"), f"variant axis '{axis}' has values that are not dtypes "
                                 f"({', '.join(bad)}); accepted: {', '.join(dtype_names)}")
        for k, d in enumerate(t.shape):
            path = ("tensors", tname, "shape", k)
            if t.role != "input":
                expr_at(path, d, known)
            elif isinstance(d, str) and d not in known:
                accepted = f"{', '.join(known)} or an integer" if known else "an integer"
                if d.isidentifier():
                    raise FieldError(path, f"'{d}' is not a size, tunable or integer variant axis; accepted: {accepted}")
                # the sizes are read off the inputs' plain entries at call time and an expression
                # is checked against them after (a saved forward output: ssd_bwd's prev_states),
                # so it may name sizes and variant axes, not tunables, which are chosen later
                tunables = sorted(names_in(d) & set(spec.tunables))
                if tunables:
                    raise FieldError(path, f"'{d}' names the tunables {', '.join(tunables)}, which an input's shape "
                                     "may not use (they are chosen after the inputs are checked); accepted: sizes, "
                                     "integer variant axes and integers")
                expr_at(path, d, known)
        _check_domain(spec, tname, known)


def _check_domain(spec: "Spec", tname: str, known: list[str]) -> None:
    """A tensor's domain (the values a check draws) suits its role and dtype; scale_tolerance is
    an output's."""
    t = spec.tensors[tname]
    if t.scale_tolerance is not None and t.role != "output":
        raise FieldError(("tensors", tname, "scale_tolerance"), "only outputs take scale_tolerance (how far their check may go)")
    if t.domain is None:
        return
    path = ("tensors", tname, "domain")
    if t.role != "input":
        raise FieldError(path, "only inputs take a domain (the values a check draws for them)")
    integer = t.dtype in ("int32", "int64")
    if integer and isinstance(t.domain, str):
        raise FieldError(path, f"'{t.domain}' is for float inputs; an {t.dtype} input takes {{range: [low, high]}} "
                         "(optionally with sorted: true), {offsets: total} or {segments: <offsets input>}")
    if not integer and not isinstance(t.domain, str):
        raise FieldError(path, f"a {t.dtype} input takes normal, positive or negative; {{range: ...}}, "
                         "{offsets: ...} and {segments: ...} are for int32 and int64 inputs")
    for k, e in enumerate(getattr(t.domain, "range", [])):
        expr_at((*path, "range", k), e, known)
    if hasattr(t.domain, "offsets"):
        expr_at((*path, "offsets"), t.domain.offsets, known)
    if hasattr(t.domain, "segments"):
        _check_segments(spec, tname, path)


def _check_segments(spec: "Spec", tname: str, path: tuple) -> None:
    """`segments: starts`: starts is an offsets input over this tensor's last dim, with its outer dims."""
    t, name = spec.tensors[tname], spec.tensors[tname].domain.segments
    offsets = [n for n, u in spec.tensors.items() if u.role == "input" and hasattr(u.domain, "offsets")]
    runs = spec.tensors.get(name)
    if runs is None or name not in offsets:
        raise FieldError((*path, "segments"), f"'{name}' is not an input with an offsets domain; accepted: "
                         f"{', '.join(offsets) or 'none (declare the starts as {offsets: total})'}")
    if [str(d) for d in runs.shape[:-1]] != [str(d) for d in t.shape[:-1]] or str(runs.domain.offsets) != str(t.shape[-1]):
        raise FieldError((*path, "segments"), f"the ids of '{tname}' {list(t.shape)} run along its last dim, so '{name}' "
                         f"must have its outer dims {list(t.shape[:-1])} and offsets up to {t.shape[-1]}; it has shape "
                         f"{list(runs.shape)} and offsets up to {runs.domain.offsets}")


def _check_aliases(spec: "Spec") -> None:
    """`alias: <input>` on an output: the input exists, is an input, has the output's shape and
    dtype as written, and no other output is written over it."""
    inputs = [n for n, t in spec.tensors.items() if t.role == "input"]
    taken: dict[str, str] = {}
    for name, t in spec.tensors.items():
        if t.alias is None:
            continue
        path = ("tensors", name, "alias")
        if t.role != "output":
            raise FieldError(path, f"only outputs take alias (an output written over an input's storage); '{name}' is {t.role}")
        src = spec.tensors.get(t.alias)
        if src is None or src.role != "input":
            what = "is not a tensor of this spec" if src is None else f"is {'an output' if src.role == 'output' else 'scratch'}"
            raise FieldError(path, f"alias: '{t.alias}' {what}; an output is written over an input: accepted: "
                             f"{', '.join(inputs) or 'none'}")
        if list(src.shape) != list(t.shape) or src.dtype != t.dtype:
            shape = lambda x: f"[{', '.join(map(str, x.shape))}]"  # noqa: E731 (as the YAML writes it)
            raise FieldError(path, f"alias: '{t.alias}' has shape {shape(src)} and dtype {src.dtype}, '{name}' "
                             f"{shape(t)} and {t.dtype}; an output written over an input has its shape and dtype, "
                             "written the same way")
        if t.alias in taken:
            raise FieldError(path, f"alias: '{t.alias}' is already written over by output '{taken[t.alias]}'; an input "
                             "takes one aliased output at most")
        if t.init == "zeros":  # zeroing it would destroy the input before any kernel read it
            raise FieldError(("tensors", name, "init"), f"'{name}' is written over input '{t.alias}' (alias) and starts "
                             "as its contents; init: zeros would erase the input, so an aliased output takes no init")
        taken[t.alias] = name


def _check_warps(spec: "Spec", i: int, warps: int | str) -> None:
    names = [n for n in integer_names(spec) if n not in spec.sizes]  # known at compile time
    accepted = f"a power of two or one of {', '.join(names)}" if names else "a power of two"
    path = ("kernels", i, "warps")
    if isinstance(warps, int):
        if not _power_of_two(warps):
            raise FieldError(path, f"{warps} is not a power of two; accepted: {accepted}")
        return
    if warps not in names:
        raise FieldError(path, f"'{warps}' is not a tunable or integer variant axis; accepted: {accepted}")
    values = spec.tunables[warps] if warps in spec.tunables else spec.variants[warps]
    for v in values if isinstance(values, list) else [values]:
        if not _power_of_two(v):
            raise FieldError(path, f"'{warps}' can be {v}, which is not a power of two; accepted: {accepted}")


def _power_of_two(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0 and not v & (v - 1)


def _check_exclude(spec: "Spec") -> None:
    for i, ex in enumerate(spec.exclude):
        for axis, value in ex.items():
            if axis not in spec.variants:
                raise FieldError(("exclude", i, axis, "<key>"),
                                 f"'{axis}' is not a variant axis; accepted: {', '.join(spec.variants) or 'none'}")
            if value not in spec.variants[axis]:
                accepted = ", ".join(str(v) for v in spec.variants[axis])
                raise FieldError(("exclude", i, axis), f"{value!r} is not a value of variant axis '{axis}'; accepted: {accepted}")


def expr_at(path: Path_, text: str | int, known: list[str], hooks: dict[str, list[str]] | None = None) -> None:
    try:
        check_expr(text, known, hooks)
    except SpecError as e:
        raise FieldError(path, e.message) from None
