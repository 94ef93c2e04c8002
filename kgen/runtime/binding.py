"""Call-time checks and binding: tensors -> sizes, variant, outputs; one clear error per mistake."""
from __future__ import annotations

from typing import Any

import torch

from ..errors import LaunchError
from ..lang import resolve_dtype
from ..spec.expr import eval_expr
from ..spec.load import LoadedSpec, accepted_values
from ..spec.refs import tunable_constraints

TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "int32": torch.int32, "int64": torch.int64}
NAMES = {v: k for k, v in TORCH.items()}


def dtype_axes(ls: LoadedSpec) -> dict[str, str]:
    """Variant axes decided by an input's dtype: axis -> the first input tensor that decides it."""
    out: dict[str, str] = {}
    for name, t in ls.spec.tensors.items():
        if t.role == "input" and t.dtype.startswith("$"):
            out.setdefault(t.dtype[1:], name)
    return out


def choose_variant(ls: LoadedSpec, tensors: dict[str, torch.Tensor], options: dict[str, Any]) -> dict[str, Any]:
    spec = ls.spec
    variant = {}
    for axis, values in spec.variants.items():
        decider = dtype_axes(ls).get(axis)
        if axis in spec.buckets:
            variant[axis] = bucket_of(ls, tensors, axis)
        elif decider is not None:
            dt = NAMES.get(tensors[decider].dtype)
            if dt not in values and not (dt is not None and spec.opens(axis, dt)):
                accepted = accepted_values(spec, axis, lambda v: "torch." + str(TORCH[v]).split(".")[-1])
                raise LaunchError(f"{spec.name}: '{decider}' has dtype {tensors[decider].dtype}; accepted: {accepted}")
            variant[axis] = dt
        else:
            value = options.get(axis)
            if value is None:
                # an axis that sizes an input (fa2's head_dim) is read off that input's shape
                value = axis_from_shape(spec, tensors, axis, values[0])
            check_option(spec, axis, value)
            variant[axis] = value
    for ex in spec.exclude:
        if all(variant[a] == v for a, v in ex.items()):
            raise LaunchError(f"{spec.name}: the combination {ex} is not built")
    return variant


def bucket_of(ls: LoadedSpec, tensors: dict[str, torch.Tensor], axis: str) -> int:
    """The value of a bucketed axis (the spec's `buckets`) for the inputs: its smallest value at
    least the size, read off the first input dim of that size."""
    spec, size = ls.spec, ls.spec.buckets[axis]
    n = axis_from_shape(spec, tensors, size, None)
    if n is None:
        raise LaunchError(f"{spec.name}: size {size} is not given by any input tensor")
    value = bucket_value(spec, axis, n)
    if value is not None:
        return value
    raise LaunchError(f"{spec.name}: {size} = {n} is above the largest bucket of {axis}; accepted: {size} <= "
                      f"{spec.variants[axis][-1]}")


def bucket_value(spec, axis: str, n: int) -> int | None:
    """The bucket of size value `n` on the bucketed axis: its smallest value at least n (None
    above the largest)."""
    return next((v for v in spec.variants[axis] if n <= v), None)


def check_option(spec, axis: str, value: Any, op: str | None = None) -> None:
    """An option must be one of its axis' values, and of the same type (1 is not True), or one
    of its open values (open_variants: built at its first call). `op` names the op called when
    the axis is its backward's (autograd.options)."""
    values = spec.variants[axis]
    if isinstance(values[0], bool) == isinstance(value, bool) and value in values:
        return
    if spec.opens(axis, value):
        return
    raise LaunchError(f"{op or spec.name}: {axis}={value!r} is not supported; accepted: {accepted_values(spec, axis, repr)}")


def axis_from_shape(spec, tensors: dict[str, torch.Tensor], axis: str, default: Any) -> Any:
    """The size of the first input dim whose shape entry is `axis`, else `default`."""
    for name in spec.inputs():
        t = tensors.get(name)
        if isinstance(t, torch.Tensor):
            for d, entry in enumerate(spec.tensors[name].shape):
                if entry == axis and d < t.dim():
                    return t.shape[d]
    return default


def bind(ls: LoadedSpec, tensors: dict[str, torch.Tensor], variant: dict[str, Any], device: torch.device) -> dict[str, int]:
    """Check every input (dtype, device, rank, sizes, contiguous last dim) and bind the sizes."""
    spec = ls.spec
    sizes: dict[str, int] = {}
    static = dict(variant)
    derived = []  # shape entries that are expressions, checked once every size is bound
    for name in spec.inputs():
        t, p = tensors[name], spec.tensors[name]
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{spec.name}: '{name}' must be a tensor, got {type(t).__name__}")
        want = TORCH[resolve_dtype(p.dtype, variant)]
        if t.dtype != want:
            why = (f"its dtype is the variant axis {p.dtype[1:]}, which '{dtype_axes(ls).get(p.dtype[1:])}' sets"
                   if p.dtype.startswith("$") else f"the spec declares it {p.dtype}")
            raise LaunchError(f"{spec.name}: '{name}' has dtype {t.dtype}; this call needs {want} ({why})")
        if t.device != device:
            raise LaunchError(f"{spec.name}: '{name}' is on {t.device}, the other inputs on {device}; put all inputs on one device")
        if t.dim() != len(p.shape):
            raise LaunchError(f"{spec.name}: '{name}' has {t.dim()} dims {tuple(t.shape)}; expected {len(p.shape)} dims {p.shape}")
        for d, (want_dim, got) in enumerate(zip(p.shape, t.shape)):
            if isinstance(want_dim, str) and not want_dim.isidentifier():
                derived.append((name, d, want_dim, got))
            elif isinstance(want_dim, int) or want_dim in static:
                exp = want_dim if isinstance(want_dim, int) else static[want_dim]
                if got != exp:
                    raise LaunchError(f"{spec.name}: '{name}' dim {d} is {got}; expected {want_dim} = {exp}")
            elif want_dim in sizes and sizes[want_dim] != got:
                raise LaunchError(f"{spec.name}: '{name}' dim {d} is {got}, but {want_dim} = {sizes[want_dim]} from another input")
            elif got == 0:
                raise LaunchError(f"{spec.name}: '{name}' dim {d} ({want_dim}) is 0; kgen ops need non-empty inputs")
            else:
                sizes[want_dim] = got
        if t.numel() and t.dim() and t.stride(-1) != 1 and t.shape[-1] != 1:
            raise LaunchError(f"{spec.name}: '{name}' must have a contiguous last dim (stride 1), got strides {t.stride()}")
    check_aliased(ls, tensors)
    for s in spec.sizes:
        if s not in sizes:
            raise LaunchError(f"{spec.name}: size {s} is not given by any input tensor")
    env = {**static, **sizes}
    for name, d, want_dim, got in derived:
        exp = eval_expr(want_dim, env)
        if got != exp:
            raise LaunchError(f"{spec.name}: '{name}' dim {d} is {got}; expected {want_dim} = {exp}")
    on_tunables = tunable_constraints(spec)
    for c in (c for c in spec.constraints if c not in on_tunables):
        if not eval_expr(c, env):
            raise LaunchError(f"{spec.name}: the inputs break the constraint '{c}' (with {', '.join(f'{k}={v}' for k, v in sizes.items())})")
    return sizes


def check_aliased(ls: LoadedSpec, tensors: dict[str, torch.Tensor]) -> None:
    """An input an output is written over (`alias:`) is written by the kernels as an output the
    op allocates: contiguous and 16-byte aligned (vector stores, bulk reductions:
    kgen/codegen/emit.py). Checked at every call: a call plan is cached by strides, not addresses."""
    for out, src in ls.spec.aliases().items():
        t = tensors[src]
        if not t.is_contiguous() or t.data_ptr() % 16:
            got = f"strides {t.stride()}" if not t.is_contiguous() else f"an address {t.data_ptr() % 16} bytes past 16-byte alignment"
            raise LaunchError(f"{ls.spec.name}: '{src}' is overwritten by output '{out}' (alias: {src}), so it must be "
                              f"contiguous and 16-byte aligned, as an allocated output is; got {got}: pass {src}.clone()")


def output_shape(ls: LoadedSpec, name: str, env: dict[str, Any]) -> list[Any]:
    return [eval_expr(d, env) for d in ls.spec.tensors[name].shape]
