"""A spec's `reference:` code run with torch: in float64 (the ground truth) and in the inputs'
own dtype (PyTorch's error, the yardstick of kgen.check.compare); and the saved tensors of a
backward spec made consistent with its forward."""
from __future__ import annotations

import math
import traceback
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from ..errors import KgenError, SourceLoc, SpecError
from ..ir import philox
from ..spec.load import LoadedSpec, load_spec
from ..spec.model import Spec
from .samples import scalar_values, spec_of
from .torch_hooks import grad, torch_hooks


def bind_sizes(spec: Spec | LoadedSpec, tensors: dict[str, torch.Tensor]) -> dict[str, int]:
    """The spec's sizes read off the shapes of the given tensors (any role), checked for agreement.

    Sizes that no given tensor mentions are left out; shape entries that are variant axes or
    tunables are not checked here (they need a variant and tunables to compare with).
    """
    s = spec_of(spec)
    sizes: dict[str, int] = {}
    for name, t in tensors.items():
        if name not in s.tensors:
            continue
        shape = s.tensors[name].shape
        if t.dim() != len(shape):
            raise ValueError(f"{s.name}: '{name}' has {t.dim()} dims {tuple(t.shape)}, the spec says {shape}")
        for d, (want, got) in enumerate(zip(shape, t.shape)):
            if isinstance(want, int):
                if got != want:
                    raise ValueError(f"{s.name}: '{name}' dim {d} is {got}, the spec says {want}")
            elif want in s.sizes:
                if sizes.setdefault(want, got) != got:
                    raise ValueError(f"{s.name}: '{name}' dim {d} is {got}, but {want} = {sizes[want]} from another tensor")
    return sizes


def reference(loaded_spec: LoadedSpec | Spec, inputs: dict[str, Any], *, exact: bool = True,
              variant: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
    """The spec's `reference` code run with torch; returns its outputs as float64.

    `inputs`: the input tensors by name, and optionally scalar values (defaults are used for
    the others). exact=True converts floating inputs to float64 first (the ground truth);
    exact=False runs the code on the inputs in their own dtype: what PyTorch itself gets for the
    same computation in that precision. The namespace also has `torch`, `math`, `rand` and
    `rand8` (the tile language's, kgen/ir/philox.py), the variant's values (as in `if causal:`),
    the sizes bound from the input shapes and the spec's hooks as torch functions, with
    `grad(hook, i)` (kgen/check/torch_hooks.py), and `grad_inputs`: the floating inputs whose
    gradient the spec writes (d<name>) by name.
    """
    s = spec_of(loaded_spec)
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    ns: dict[str, Any] = {"torch": torch, "math": math, "rand": philox.rand, "rand8": philox.rand8, **(variant or {}),
                          **bind_sizes(s, tensors)}
    ns.update(scalar_values(s, {k: v for k, v in inputs.items() if k in s.scalars}))
    for k, v in tensors.items():
        ns[k] = v.double() if exact and v.dtype.is_floating_point else v
    # the floating inputs whose gradient the spec writes (d<name>), as tensors of their own that
    # the code and the hooks both see, so that a backward's reference may differentiate through
    # them with torch.autograd
    ns["grad_inputs"] = {k: ns[k].detach() for k in tensors if f"d{k}" in s.outputs() and ns[k].dtype.is_floating_point}
    ns.update(ns["grad_inputs"])
    if s.hooks:
        ns.update(torch_hooks(s, ns), grad=grad)
    # exact: float64 also where torch picks its default dtype (a 0-d float tensor times an integer
    # tensor, a new tensor made without a dtype)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64 if exact else default)
    name = f"<{s.name} reference>"
    try:
        with torch.no_grad():
            exec(compile(s.reference, name, "exec"), ns)
    except KgenError:
        raise
    except Exception as e:  # the spec's own code: one sentence at its line, not a traceback
        sizes = ", ".join(f"{k}={ns[k]}" for k in s.sizes if isinstance(ns.get(k), int))
        raise SpecError(f"the reference raised {type(e).__name__} at sizes {sizes or '(none)'}: {e}",
                        _reference_line(loaded_spec, e, name)) from None
    finally:
        torch.set_default_dtype(default)
    out = {}
    for name in s.outputs():
        if name not in ns or not isinstance(ns[name], torch.Tensor):
            raise ValueError(f"{s.name}: the reference does not assign the output '{name}'")
        out[name] = ns[name].detach().double()
    return out


def _reference_line(loaded_spec: LoadedSpec | Spec, e: BaseException, name: str) -> SourceLoc | None:
    """Where in the spec file the reference code raised `e`: the line of its frame in the code
    (or of a syntax error) from the block's first line; None without the file's positions."""
    if not isinstance(loaded_spec, LoadedSpec):
        return None
    line = e.lineno if isinstance(e, SyntaxError) and e.filename == name else None
    for frame, lineno in traceback.walk_tb(e.__traceback__):
        if frame.f_code.co_filename == name:
            line = lineno
    first, col = loaded_spec.yaml.block_origin(("reference",))
    return SourceLoc(str(loaded_spec.path), first + (line or 1) - 1, col + 1)


def forward_of(ls: LoadedSpec) -> LoadedSpec | None:
    """The spec in the same folder whose autograd pairs it with `ls` as its backward, if any."""
    folder = ls.path.parent
    stamp = tuple((p.name, p.stat().st_mtime_ns) for p in sorted(folder.glob("*.yaml")))
    return _backwards_in(folder, stamp).get(ls.path.resolve())


@lru_cache(maxsize=16)
def _backwards_in(folder: Path, stamp: tuple) -> dict[Path, LoadedSpec]:
    """Backward spec -> its forward spec, for the specs of a folder as they are at `stamp` (names
    and modification times, so that an edited folder is read again)."""
    pairs = {}
    for name, _ in stamp:
        try:
            other = load_spec(folder / name)
        except KgenError:  # a broken neighbour is no spec's forward
            continue
        if other.spec.autograd is not None:
            pairs[(folder / other.spec.autograd.backward).resolve()] = other
    return pairs


def consistent_with_forward(ls: LoadedSpec, inputs: dict[str, torch.Tensor], scalars: dict[str, float],
                            variant: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A backward spec's inputs with the forward's outputs among them (attention's o and lse,
    rmsnorm's rstd) replaced by what the forward's reference computes from the other inputs,
    rounded to their dtype: what autograd saves, since a backward is only defined on consistent
    saved tensors. Unchanged when `ls` is no backward, or when the forward needs an input the
    backward does not receive."""
    fwd = forward_of(ls)
    if fwd is None or not all(n in inputs for n in fwd.spec.inputs()):
        return inputs
    fwd_variant = {a: variant[a] for a in fwd.spec.variants if a in variant}
    fwd_scalars = {k: v for k, v in scalars.items() if k in fwd.spec.scalars}
    outs = reference(fwd, {**{n: inputs[n] for n in fwd.spec.inputs()}, **fwd_scalars}, variant=fwd_variant)
    return {n: (outs[n].to(t.dtype) if n in outs else t) for n, t in inputs.items()}
