"""Check one variant of a spec on an emulated target: its kernels, as `kgen build` writes them,
run on small random inputs of the spec's domains, every output compared with the reference.

A backward spec gets saved tensors consistent with its forward (kgen.check.reference). Each
output's row names the kernels that write it; an emulation error (a race, an out-of-bounds
access, a barrier some threads miss) is a row of its own. `mutate` rewrites the built kernels
before they run: the mutation tests' way to show that a broken kernel fails the check.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..backends import emulator
from ..build import build_variant
from ..errors import KgenError
from ..hw.descriptor import Target
from ..ir.core import WRITES, walk
from ..lang import kernel_ir
from ..spec.expr import eval_expr
from ..spec.load import LoadedSpec, variant_id
from .compare import compare
from .reference import consistent_with_forward, reference
from .samples import allocate, check_sizes, random_inputs, scalar_values, with_aliases

# a scalar without a default gets this (softmax_scale-like: away from 0 and 1, which hide errors)
SCALAR = 0.17
INT_SCALAR = 3  # an int32 scalar without a default (a window, an offset)


@dataclass(frozen=True)
class Row:
    variant: str
    output: str  # an output's name, or "-" for an error before any comparison
    kernels: str  # the kernels that write it
    error: float | None
    tolerance: float | None
    verdict: str  # "ok", "mismatch" or "error"
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


def writers(ls: LoadedSpec, variant: dict[str, Any], tunables: dict[str, int]) -> dict[str, list[str]]:
    """Output name -> the kernels whose programs store into it."""
    out: dict[str, list[str]] = {n: [] for n in ls.spec.outputs()}
    for i, ks in enumerate(ls.spec.kernels):
        stored = {op.attrs.get("tensor") for op in walk(kernel_ir(ls, i, variant, tunables).body)
                  if op.kind in WRITES}
        for name in out:
            if name in stored:
                out[name].append(ks.name)
    return out


def check_variant(ls: LoadedSpec, variant: dict[str, Any], target: Target, sizes: dict[str, int] | None = None,
                  mutate: Callable[[list[Any]], list[Any]] | None = None) -> list[Row]:
    spec, vid = ls.spec, variant_id(variant)
    run = emulator(target)
    try:
        built = build_variant(ls, variant, target, compile=False)
    except KgenError as e:  # no tunable candidate fits the target: this variant's row says so
        return [Row(vid, "-", "-", None, None, "error", str(e))]
    kernels = mutate(list(built.kernels)) if mutate else built.kernels
    try:
        sizes = check_sizes(ls, variant, built.tunables, sizes)
    except ValueError as e:
        return [Row(vid, "-", "-", None, None, "error", f"{e}; pass sizes that meet it (--size NAME=VALUE)")]
    env = {**variant, **built.tunables, **sizes}
    gen = torch.Generator().manual_seed(zlib.crc32(f"{spec.name}-{vid}".encode()))
    inputs = random_inputs(spec, variant, env, gen)
    scalars = scalar_values(spec, {n: INT_SCALAR if p.dtype != "fp32" else SCALAR for n, p in spec.scalars.items()
                                   if p.default is None})
    inputs = consistent_with_forward(ls, inputs, scalars, variant)
    tensors = with_aliases(spec, {**allocate(spec, variant, env), **inputs})
    copies = {n: t.clone() for n, t in inputs.items()}
    for ks, bk in zip(spec.kernels, kernels):
        if bk.empty:
            continue
        try:
            run(bk, tuple(int(eval_expr(g, env)) for g in ks.grid), tensors, sizes, scalars)
        except KgenError as e:
            return [Row(vid, "-", ks.name, None, None, "error", e.message)]
    overwritten = set(spec.aliases().values())  # written through their aliased outputs
    wrote = [n for n in inputs if n not in overwritten and not torch.equal(tensors[n], copies[n])]
    if wrote:
        return [Row(vid, wrote[0], "-", None, None, "error", f"a kernel wrote into the input '{wrote[0]}'")]
    ref = reference(ls, {**copies, **scalars}, variant=variant)
    ref_lowp = reference(ls, {**copies, **scalars}, exact=False, variant=variant)
    by = writers(ls, variant, built.tunables)
    rows = []
    for name in spec.outputs():
        v = compare(name, tensors[name], ref[name], ref_lowp[name], spec.tensors[name].scale_tolerance)
        rows.append(Row(vid, name, ", ".join(by[name]) or "-", v.error, v.tolerance, "ok" if v.ok else "mismatch", v.detail))
    return rows
