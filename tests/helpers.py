"""Shared test code: run a spec's kernels, compute its reference, compare with a fair tolerance.

Used by the CPU interpreter tests (tests/ir), the emulation tests and the GPU tests: the
sampling, reference and comparison live in kgen.check (what `kgen check` uses); this module adds
what only the tests need, `run_spec_cpu` and asserting forms of the comparison.

Import it from a test file with

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
    import helpers

(pytest runs with --import-mode=importlib, so tests/ is not on sys.path by itself).
"""
from __future__ import annotations

from typing import Any

import torch

from kgen.build import tunable_candidates
from kgen.check.compare import FLOOR, compare, max_err  # noqa: F401 (re-exported for the tests)
from kgen.check.reference import bind_sizes, consistent_with_forward, forward_of, reference  # noqa: F401
from kgen.check.samples import (allocate, check_constraints, derive_sizes, random_inputs,  # noqa: F401
                                scalar_values, spec_of, tensor_shape, torch_dtype, with_aliases)
from kgen.ir.interp import run_kernel
from kgen.lang import kernel_ir
from kgen.spec.expr import eval_expr
from kgen.spec.load import LoadedSpec
from kgen.spec.model import Spec


def default_tunables(spec: Spec | LoadedSpec, variant: dict[str, Any] | None = None) -> dict[str, int]:
    """The spec's tunables, taking the first (preferred) candidate of each list; with a variant
    (and a loaded spec), the first candidate its constraints on tunables allow."""
    if variant is not None and isinstance(spec, LoadedSpec):
        return tunable_candidates(spec, variant)[0]
    return {k: (v[0] if isinstance(v, list) else v) for k, v in spec_of(spec).tunables.items()}


def packed_seq_idx(batch: int, seqlen: int, starts=()) -> torch.Tensor:
    """seq_idx (batch, seqlen) int32 for sequences packed one after another, the same in every
    row: 0 up to the first of `starts`, one more at each start (all 0 without starts)."""
    pos = torch.arange(seqlen)[:, None]
    return (pos >= torch.tensor(list(starts) or [seqlen])).sum(-1).to(torch.int32).expand(batch, seqlen).contiguous()


def run_spec_cpu(loaded_spec: LoadedSpec, variant: dict[str, Any], tensors: dict[str, torch.Tensor],
                 sizes: dict[str, int], scalars: dict[str, float],
                 tunables: dict[str, int] | None = None) -> dict[str, torch.Tensor]:
    """Run all the spec's kernels in order with the CPU interpreter.

    `tensors` holds at least the inputs; outputs and scratch it lacks are allocated (see
    `allocate`). Returns every tensor by name, outputs written in place; an output written over
    an input (`alias:`) is that input, so pass copies of inputs the reference needs unchanged.
    """
    s = loaded_spec.spec
    tunables = default_tunables(loaded_spec, variant) if tunables is None else tunables
    env = {**variant, **tunables, **sizes}
    check_constraints(s, env)
    all_t = with_aliases(s, {**allocate(s, variant, env), **tensors})
    missing = [n for n in s.tensors if n not in all_t]
    if missing:
        raise ValueError(f"{s.name}: missing tensors {missing}")
    scalars = scalar_values(s, scalars)
    for i, ks in enumerate(s.kernels):
        k = kernel_ir(loaded_spec, i, variant, tunables)
        grid = tuple(int(eval_expr(g, env)) for g in ks.grid)
        run_kernel(k, grid, all_t, sizes, scalars)
    return all_t


def check_close(name: str, got: torch.Tensor, ref: torch.Tensor, ref_lowp: torch.Tensor) -> None:
    """Assert |got - ref| <= 2 * |ref_lowp - ref| + floor, in the max norm (kgen.check.compare)."""
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)}, reference {tuple(ref.shape)}"
    v = compare(name, got, ref, ref_lowp)
    if not v.ok:
        raise AssertionError(v.detail)


def check_outputs(loaded_spec: LoadedSpec, got: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor],
                  scalars: dict[str, float], variant: dict[str, Any]) -> None:
    """Every output of the spec against its reference, at the spec's scale_tolerance where it
    gives one."""
    spec = loaded_spec.spec
    ref = reference(loaded_spec, {**inputs, **scalars}, variant=variant)
    ref_lowp = reference(loaded_spec, {**inputs, **scalars}, exact=False, variant=variant)
    for name in spec.outputs():
        v = compare(name, got[name], ref[name], ref_lowp[name], spec.tensors[name].scale_tolerance)
        if not v.ok:
            raise AssertionError(v.detail)


def no_gpu_reason() -> str | None:
    """Why GPU tests cannot run here (no CUDA/HIP device, or one kgen does not build for), or None."""
    from kgen.errors import TargetError
    from kgen.runtime.op import device_target

    if not torch.cuda.is_available():
        return "needs a GPU (torch.cuda.is_available() is False)"
    try:
        device_target(torch.device("cuda"))
    except TargetError as e:
        return str(e)
    return None


def dropout_factors(b: int, h: int, sq: int, sk: int, p: float, seed: int) -> torch.Tensor:
    """(B, H, SQ, SK) float64 factors of specs/variants/dropout.yaml: 1 / kept where rand8(seed,
    offset) >= p, else 0, kept = 1 - ceil(256 p) / 256; the offset numbers 16 x 16 tiles of (i, j)
    in turn, sixteen calls of sixteen bytes a tile, call (i % 8 // 2, j % 8 // 2), byte
    (i % 2, i // 8 % 2, j % 2, j // 8 % 2)."""
    import math

    from kgen.ir.philox import rand8

    i, j = torch.arange(sq).view(1, 1, -1, 1), torch.arange(sk).view(1, 1, 1, -1)
    bh = torch.arange(b).view(-1, 1, 1, 1) * h + torch.arange(h).view(1, -1, 1, 1)
    tile = (bh * -(-sq // 16) + i // 16) * -(-sk // 16) + j // 16
    call = i % 8 // 2 * 4 + j % 8 // 2
    byte = i % 2 * 8 + i // 8 % 2 * 4 + j % 2 * 2 + j // 8 % 2
    scale = torch.tensor(1.0 / (1.0 - math.ceil(p * 256.0) / 256.0), dtype=torch.float64)
    return torch.where(rand8(seed, (tile * 16 + call) * 16 + byte) >= p, scale, 0.0)


def check_row_backward(op, spec: str, tiles: dict, m: int, n: int, device: str) -> None:
    """Run `op` (the spec's op, the form forced) on fresh bf16 inputs of m x n: dx, dw (and db)
    against float64 within twice the error of the same computation in bf16."""
    op.force_tunables(tiles)
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(m, n, generator=g) * 2 + 0.5).to(torch.bfloat16)
    w = (torch.rand(n, generator=g) + 0.5).to(torch.bfloat16)
    dy = torch.randn(m, n, generator=g).to(torch.bfloat16)
    xd, wd, dyd = x.double(), w.double(), dy.double()
    layer = spec == "layernorm_bwd"
    rstd = torch.rsqrt(xd.var(-1, unbiased=False) + 1e-5) if layer else torch.rsqrt((xd * xd).mean(-1) + 1e-6)
    mean = xd.mean(-1)

    def reference(x, w, dy, mean, rstd):
        gw = dy * w
        if not layer:
            dx = rstd[:, None] * (gw - x * rstd[:, None] ** 2 * (gw * x).mean(-1, keepdim=True))
            return dx, (dy * x * rstd[:, None]).sum(0)
        xh = (x - mean[:, None]) * rstd[:, None]
        dx = rstd[:, None] * (gw - gw.mean(-1, keepdim=True) - xh * (gw * xh).mean(-1, keepdim=True))
        return dx, (dy * xh).sum(0), dy.sum(0)

    args = (x, w, mean.float(), rstd.float(), dy) if layer else (x, w, rstd.float(), dy)
    got = op(*(a.to(device) for a in args))
    assert op.last_tunables == {**tiles, "BLOCK_C": 256}
    ref = reference(xd, wd, dyd, mean, rstd)
    low = reference(x, w, dy, mean.to(torch.bfloat16), rstd.to(torch.bfloat16))
    for name, a, r, lo in zip(("dx", "dw", "db"), got, ref, low):
        check_close(name, a.cpu(), r, lo)
