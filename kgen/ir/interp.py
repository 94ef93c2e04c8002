"""A CPU interpreter for the tile IR, on PyTorch tensors.

It runs every program of the grid one after another, each op on whole tiles. Low-precision
arithmetic is done in fp32 and rounded to the value's dtype after each op, as the generated
kernels do. It is how CI, which has no GPU, checks that a spec computes its reference, and how
a spec's author debugs a program before any compiler runs. It is meant for small sizes.
"""
from __future__ import annotations

import itertools
from typing import Any

import torch

from ..errors import LaunchError
from .core import INT_DTYPES, Block, Kernel, Op, Value
from . import philox
from .attrs import attr

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                "int32": torch.int32, "int64": torch.int64, "bool": torch.bool}

_UNARY = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "sqrt": torch.sqrt,
          "rsqrt": torch.rsqrt, "abs": torch.abs, "not": torch.logical_not, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
          "erf": torch.erf, "sin": torch.sin, "cos": torch.cos, "floor": torch.floor, "ceil": torch.ceil}
_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
           "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"), "mod": torch.remainder,
           "max": torch.maximum, "min": torch.minimum, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
           "ge": torch.ge, "eq": torch.eq, "ne": torch.ne, "and": torch.logical_and, "or": torch.logical_or,
           "rand": philox.rand, "rand8": philox.rand8}
_REDUCE = {"sum": lambda x, a: x.sum(a), "max": lambda x, a: x.amax(a), "min": lambda x, a: x.amin(a)}


def run_kernel(k: Kernel, grid: tuple[int, ...], tensors: dict[str, torch.Tensor], sizes: dict[str, int],
               scalars: dict[str, float]) -> None:
    """Run every program of `grid`; stores go straight into `tensors`."""
    grid = tuple(grid) + (1,) * (3 - len(grid))
    for pid in itertools.product(*(range(g) for g in grid)):
        _Program(k, pid, tensors, sizes, scalars).run(k.body, {})


class _Program:
    def __init__(self, k, pid, tensors, sizes, scalars):
        self.k, self.pid, self.tensors, self.sizes, self.scalars = k, pid, tensors, sizes, scalars

    def run(self, block: Block, env: dict[Value, torch.Tensor]) -> list[torch.Tensor]:
        for op in block.ops:
            if op.kind == "yield":
                return [env[v] for v in op.operands]
            outs = getattr(self, "op_" + op.kind)(op, [env[v] for v in op.operands], env)
            for r, o in zip(op.results, outs):
                env[r] = o.to(TORCH_DTYPES[r.dtype]) if isinstance(o, torch.Tensor) else o
        return []

    def op_const(self, op, a, env):
        return [torch.tensor(op.attrs["value"], dtype=TORCH_DTYPES[op.result.dtype])]

    def op_size(self, op, a, env):
        return [torch.tensor(self.sizes[op.attrs["name"]], dtype=torch.int32)]

    def op_scalar_arg(self, op, a, env):
        v = self.scalars[op.attrs["name"]]
        return [torch.tensor(int(v) if op.result.dtype in INT_DTYPES else float(v), dtype=TORCH_DTYPES[op.result.dtype])]

    def op_program_id(self, op, a, env):
        return [torch.tensor(self.pid[op.attrs["axis"]], dtype=torch.int32)]

    def op_arange(self, op, a, env):
        return [torch.arange(op.attrs["n"], dtype=torch.int32)]

    def op_full(self, op, a, env):
        return [torch.full(op.attrs["shape"], op.attrs["value"], dtype=TORCH_DTYPES[op.result.dtype])]

    def op_unary(self, op, a, env):
        x = a[0]
        if op.attrs["fn"] == "neg":
            return [-x]
        return [_UNARY[op.attrs["fn"]](_up(x))]

    def op_binary(self, op, a, env):
        x, y = (_up(t) for t in a)
        return [_BINARY[op.attrs["fn"]](x, y)]

    def op_where(self, op, a, env):
        return [torch.where(a[0], _up(a[1]), _up(a[2]))]

    def op_cast(self, op, a, env):
        return [a[0]]

    def op_expand(self, op, a, env):
        return [a[0].unsqueeze(op.attrs["axis"])]

    def op_broadcast(self, op, a, env):
        return [a[0].expand(op.attrs["shape"]).clone()]

    def op_trans(self, op, a, env):
        return [a[0].t().contiguous()]

    def op_convert(self, op, a, env):
        return [a[0]]

    op_stage = op_convert

    def op_reduce(self, op, a, env):
        return [_REDUCE[op.attrs["fn"]](_up(a[0]), op.attrs["axis"])]

    def op_scan(self, op, a, env):  # accumulated in fp32 (integers exactly), rounded once
        x = a[0]
        acc = x.to(torch.int64) if x.dtype in (torch.int32, torch.int64) else _up(x)
        return [acc.cumsum(op.attrs["axis"])]

    def op_dot(self, op, a, env):
        return [a[2].float() + a[0].float() @ a[1].float()]

    def op_dot_wait(self, op, a, env):
        return [a[0]]

    def op_for(self, op, a, env):
        start, stop, step = (int(x) for x in a[:3])
        carried = list(a[3:])
        for i in range(start, stop, step):
            inner = dict(env)
            inner[op.body.args[0]] = torch.tensor(i, dtype=torch.int32)
            inner.update(zip(op.body.args[1:], carried))
            carried = [c.to(TORCH_DTYPES[v.dtype]) for c, v in zip(self.run(op.body, inner), op.results)]
        return carried

    # --- memory --------------------------------------------------------------------------------
    def _indices(self, op: Op, a: list[torch.Tensor], first: int):
        """Per tensor dim: an index tensor (tile dims) or an int, and the in-bounds mask."""
        t = self.tensors[op.attrs["tensor"]]
        idx, mask_parts, tile_dim = [], [], 0
        for d, entry in enumerate(op.attrs["index"]):
            if entry[0] == "at":
                i = int(a[entry[1]])
                if not 0 <= i < t.shape[d]:
                    raise LaunchError(f"{self.k.name}: index {i} out of range for dim {d} of '{op.attrs['tensor']}' ({t.shape[d]})")
                idx.append(i)
                continue
            size = entry[-1]
            start = int(a[entry[1]]) * size if entry[0] == "block" else 0
            r = torch.arange(start, start + size)
            idx.append(r)
            mask_parts.append((tile_dim, r < t.shape[d]))
            tile_dim += 1
        shape = [len(i) for i in idx if isinstance(i, torch.Tensor)]
        mask = torch.ones(shape, dtype=torch.bool)
        for dim, m in mask_parts:
            view = [1] * len(shape)
            view[dim] = -1
            mask = mask & m.view(view)
        grids = torch.meshgrid(*[i for i in idx if isinstance(i, torch.Tensor)], indexing="ij") if shape else []
        full, g = [], iter(grids)
        for d, i in enumerate(idx):
            full.append(next(g).clamp(max=t.shape[d] - 1) if isinstance(i, torch.Tensor) else i)
        return t, tuple(full), mask

    def op_load(self, op, a, env):
        if attr(op, "pred") and not bool(a[-1]):  # a prefetch for no iteration: no access
            shape = op.results[0].shape
            return [torch.full(shape, float(op.attrs["other"]), dtype=TORCH_DTYPES[op.results[0].dtype])]
        t, index, mask = self._indices(op, a, 0)
        vals = t[index]
        return [torch.where(mask, vals, torch.tensor(op.attrs["other"], dtype=vals.dtype))]

    def _gathered(self, op: Op, a: list[torch.Tensor]):
        """The tensor, per dim a long index tensor (of the tiles' shape) clamped into range, and
        the mask of elements whose every index is in range."""
        t = self.tensors[op.attrs["tensor"]]
        tiles = [a[e[1]] for e in op.attrs["index"] if e[0] == "tile"]
        shape = tiles[0].shape
        idx, mask = [], torch.ones(shape, dtype=torch.bool)
        for d, e in enumerate(op.attrs["index"]):
            i = a[e[1]].long() if e[0] == "tile" else torch.full(shape, int(a[e[1]]), dtype=torch.long)
            mask &= (i >= 0) & (i < t.shape[d])
            idx.append(i.clamp(0, max(t.shape[d] - 1, 0)))
        return t, tuple(idx), mask

    def op_gather(self, op, a, env):
        t, idx, mask = self._gathered(op, a)
        vals = t[idx]
        return [torch.where(mask, vals, torch.tensor(op.attrs["other"], dtype=vals.dtype))]

    def op_scatter(self, op, a, env):
        t, idx, mask = self._gathered(op, a)
        value = a[0].to(t.dtype).expand(mask.shape)
        sel = tuple(i[mask] for i in idx)
        if op.attrs["atomic"]:
            t.index_put_(sel, value[mask], accumulate=True)
        else:
            t[sel] = value[mask]
        return []

    def op_store(self, op, a, env):
        t, index, mask = self._indices(op, a, 1)
        value = a[0].to(t.dtype)
        sel = tuple(i[mask] if isinstance(i, torch.Tensor) else i for i in index)
        t[sel] = value[mask] if value.dim() else value
        return []

    def op_atomic_add(self, op, a, env):
        t, index, mask = self._indices(op, a, 1)
        value = a[0].to(t.dtype)
        sel = tuple(i[mask] if isinstance(i, torch.Tensor) else torch.full((int(mask.sum()),), i) for i in index)
        t.index_put_(sel, value[mask], accumulate=True)
        return []


def _up(x: Any) -> torch.Tensor:
    """Upcast bf16/fp16 to fp32 for arithmetic, as the generated code does."""
    if isinstance(x, torch.Tensor) and x.dtype in (torch.bfloat16, torch.float16):
        return x.float()
    return x
