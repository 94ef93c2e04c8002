"""Sizes and tensors for checking a spec: sizes small enough to run in emulation that still take
every code path (ragged edges, several blocks), inputs drawn from each input's declared domain,
outputs poisoned with NaN."""
from __future__ import annotations

import ast
from typing import Any

import torch

from ..ir.core import walk
from ..ir.interp import TORCH_DTYPES
from ..lang import kernel_ir, resolve_dtype
from ..spec.expr import eval_expr, names_in
from ..spec.load import LoadedSpec
from ..spec.model import IntRange, Offsets, Segments, Spec


def spec_of(spec: Spec | LoadedSpec) -> Spec:
    return spec.spec if isinstance(spec, LoadedSpec) else spec


def torch_dtype(spec: Spec | LoadedSpec, name: str, variant: dict[str, Any]) -> torch.dtype:
    return TORCH_DTYPES[resolve_dtype(spec_of(spec).tensors[name].dtype, variant)]


def tensor_shape(spec: Spec | LoadedSpec, name: str, env: dict[str, Any]) -> tuple[int, ...]:
    """The shape of tensor `name` with sizes, variant values and tunables from `env` (entries of
    outputs and scratch may be expressions, as in [cdiv(M, BLOCK_M), N])."""
    return tuple(int(eval_expr(d, env)) for d in spec_of(spec).tensors[name].shape)


def tile_extents(ls: LoadedSpec, variant: dict[str, Any], tunables: dict[str, int]) -> dict[str, int]:
    """For each size, the largest tile any kernel loads or stores along a dim of that size (1 for
    a size only indexed at a point, as a batch or head index is)."""
    spec = ls.spec
    extents = {s: 1 for s in spec.sizes}
    for i in range(len(spec.kernels)):
        for op in walk(kernel_ir(ls, i, variant, tunables).body):
            if "tensor" not in op.attrs or "index" not in op.attrs:
                continue
            shape = spec.tensors[op.attrs["tensor"]].shape
            for dim, entry in zip(shape, op.attrs["index"]):
                if entry[0] == "block" and isinstance(dim, str) and dim in extents:
                    extents[dim] = max(extents[dim], int(entry[2]))
    return extents


def check_sizes(ls: LoadedSpec, variant: dict[str, Any], tunables: dict[str, int],
                given: dict[str, int] | None = None) -> dict[str, int]:
    """Sizes for a check: `given`, and for each other size of tile extent b > 1 the ragged
    b + b // 2 + 1 (two blocks of the largest tile, the second partial; more of smaller ones), a
    size a variant axis buckets (`buckets`) three quarters of the way into the variant's bucket,
    2 for a size only indexed at a point; `A % B == 0` makes A = 2 B between two sizes (grouped
    heads) and rounds A up to a multiple of a constant B; `NAME == expr` defines NAME. Then the
    spec's constraints must hold (a ValueError naming the one that does not)."""
    spec = ls.spec
    sizes = dict(given or {})
    for axis, s in spec.buckets.items():  # inside this variant's bucket, above the one before it
        values = spec.variants[axis]
        below = max([v for v in values if v < variant[axis]], default=0)
        sizes.setdefault(s, max(below + 1, variant[axis] * 3 // 4 + 1))
        if not below < sizes[s] <= variant[axis]:  # a given size of another bucket: a call never runs this variant there
            raise ValueError(f"{s} = {sizes[s]} is not in the bucket of {axis}={variant[axis]} ({below} < {s} <= {variant[axis]})")
    for s, b in tile_extents(ls, variant, tunables).items():
        sizes.setdefault(s, b + b // 2 + 1 if b > 1 else 2)
    env = {**variant, **tunables}
    for c in spec.constraints:
        node = ast.parse(c, mode="eval").body
        if (isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.Eq) and isinstance(node.left, ast.BinOp)
                and isinstance(node.left.op, ast.Mod) and isinstance(node.left.left, ast.Name)
                and node.left.left.id in spec.sizes and node.left.left.id not in (given or {})):
            name, divisor = node.left.left.id, node.left.right
            if isinstance(divisor, ast.Name) and divisor.id in spec.sizes:
                sizes[name] = 2 * sizes[divisor.id]  # A % B == 0 between sizes: two of B per A
            elif names_in(ast.unparse(divisor)) <= set(env):  # a multiple of a constant: round up
                k = int(eval_expr(ast.unparse(divisor), env))
                sizes[name] = -(-sizes[name] // k) * k if k > 0 else sizes[name]
    defined = _definitions(spec)
    sizes = derive_sizes(spec, {s: v for s, v in sizes.items() if s not in defined or s in (given or {})}, env)
    check_constraints(spec, {**env, **sizes})
    return sizes


def _definitions(spec: Spec) -> dict[str, str]:
    """Size -> expression, for the constraints of the form `NAME == expr` that define a size."""
    out = {}
    for c in spec.constraints:
        node = ast.parse(c, mode="eval").body
        if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)
                and isinstance(node.left, ast.Name) and node.left.id in spec.sizes):
            out.setdefault(node.left.id, ast.unparse(node.comparators[0]))
    return out


def derive_sizes(spec: Spec | LoadedSpec, sizes: dict[str, int], constants: dict[str, Any]) -> dict[str, int]:
    """`sizes` plus the sizes that constraints of the form `NAME == expr` define (rmsnorm_bwd's
    MB == cdiv(M, BLOCK_M): a shape entry of an input cannot be an expression of tunables)."""
    out = dict(sizes)
    for name, expr in _definitions(spec_of(spec)).items():
        if name not in out:
            out[name] = int(eval_expr(expr, {**constants, **out}))
    return out


def check_constraints(spec: Spec | LoadedSpec, env: dict[str, Any]) -> None:
    s = spec_of(spec)
    for c in s.constraints:
        if names_in(c) <= set(env) and not eval_expr(c, env):
            shown = {k: env[k] for k in sorted(names_in(c))}
            raise ValueError(f"{s.name}: the sizes break the constraint '{c}' ({shown})")


def _draw(t, dt: torch.dtype, shape: tuple[int, ...], env: dict[str, Any], generator) -> torch.Tensor:
    d = t.domain
    if dt.is_floating_point:
        x = torch.randn(shape, generator=generator, dtype=torch.float32)
        x = x.exp() if d == "positive" else -x.exp() if d == "negative" else x
        return x.to(dt)
    if isinstance(d, IntRange):
        low, high = (int(eval_expr(e, env)) for e in d.range)
        x = torch.randint(low, high, shape, generator=generator, dtype=torch.int64)
        return (x.sort(dim=-1).values if d.sorted and x.dim() else x).to(dt)
    if isinstance(d, Offsets):
        total, n = int(eval_expr(d.offsets, env)), shape[-1] if shape else 1
        inner = torch.randint(0, total + 1, (*shape[:-1], max(n - 2, 0)), generator=generator, dtype=torch.int64)
        ends = [torch.zeros((*shape[:-1], 1), dtype=torch.int64), torch.full((*shape[:-1], 1), total, dtype=torch.int64)]
        x = torch.cat([ends[0], inner.sort(dim=-1).values, ends[1]], dim=-1)[..., :n]
        return x.to(dt)
    return torch.randint(-100, 100, shape, generator=generator, dtype=torch.int32).to(dt)


def random_inputs(spec: Spec | LoadedSpec, variant: dict[str, Any], env: dict[str, Any],
                  generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Fresh random inputs from each input's domain (never zeros: zeros hide missing loads and
    masks): floats torch.randn (or its exp, or minus that), integers as declared."""
    s = spec_of(spec)
    out = {name: _draw(s.tensors[name], torch_dtype(s, name, variant), tensor_shape(s, name, env), env, generator)
           for name in s.inputs() if not isinstance(s.tensors[name].domain, Segments)}
    for name in s.inputs():  # segment ids follow the starts drawn for them
        if isinstance(s.tensors[name].domain, Segments):
            out[name] = segment_ids(out[s.tensors[name].domain.segments], tensor_shape(s, name, env)[-1]).to(
                torch_dtype(s, name, variant))
    return {name: out[name] for name in s.inputs()}


def segment_ids(starts: torch.Tensor, n: int) -> torch.Tensor:
    """The id of each of n positions along the last dim: the d with starts[..., d] <= i <
    starts[..., d + 1] (the last such d where runs are empty), int64."""
    positions = torch.arange(n, dtype=starts.dtype).expand(*starts.shape[:-1], n).contiguous()
    return torch.searchsorted(starts.contiguous(), positions, right=True).to(torch.int64) - 1


def allocate(spec: Spec | LoadedSpec, variant: dict[str, Any], env: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Outputs and scratch: zeros where the spec says `init: zeros`, else NaN (so that an element
    no kernel writes, or a scratch element read before it is written, shows up). An output
    written over an input (`alias:`) is not allocated: with_aliases binds it to the input."""
    s = spec_of(spec)
    out = {}
    for name, t in s.tensors.items():
        if t.role == "input" or t.alias is not None:
            continue
        dt = torch_dtype(s, name, variant)
        shape = tensor_shape(s, name, env)
        if t.init == "zeros":
            out[name] = torch.zeros(shape, dtype=dt)
        elif dt.is_floating_point:
            out[name] = torch.full(shape, float("nan"), dtype=dt)
        else:
            out[name] = torch.full(shape, -(2**31), dtype=dt)
    return out


def with_aliases(spec: Spec | LoadedSpec, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`tensors` with each aliased output bound to the input it is written over (one storage, as
    the op passes it): run kernels on these, and compute the reference from copies taken before."""
    return {**tensors, **{out: tensors[src] for out, src in spec_of(spec).aliases().items()}}


def scalar_values(spec: Spec | LoadedSpec, scalars: dict[str, float]) -> dict[str, float | int]:
    """`scalars` with the spec's defaults filled in, as the kernels take them (int32 as ints)."""
    s = spec_of(spec)
    out = {}
    for name, p in s.scalars.items():
        if name in scalars:
            out[name] = p.value(scalars[name])
        elif p.default is not None:
            out[name] = p.value(p.default)
        else:
            raise ValueError(f"{s.name}: scalar '{name}' has no default; pass a value")
    return out
