"""Shared test code: run a spec's kernels, compute its reference, compare with a fair tolerance.

Used by the CPU interpreter tests (tests/ir) and meant for the GPU tests as well: nothing here
depends on where the kernels run except `run_spec_cpu`.

Import it from a test file with

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
    import helpers

(pytest runs with --import-mode=importlib, so tests/ is not on sys.path by itself).
"""
from __future__ import annotations

import ast
import math
from typing import Any

import torch

from kgen.build import tunable_candidates
from kgen.ir.interp import TORCH_DTYPES, run_kernel
from kgen.lang import kernel_ir, resolve_dtype
from kgen.spec.expr import eval_expr
from kgen.spec.load import LoadedSpec, load_spec
from kgen.spec.model import Spec

# Tolerance floors, added to 2x the error of PyTorch doing the same computation in the input
# dtype. They only matter when PyTorch's error happens to be (near) zero, e.g. when its result
# rounds exactly onto the float64 reference. The test data are O(1) (torch.randn), so absolute
# floors suffice:
#   fp32: 1e-6 is ~8 fp32 ulps at 1.0 (2^-23 ~ 1.2e-7): room for a few roundings of fp32
#         arithmetic (exp, a sum over ~100 terms), far below any real indexing/masking bug.
#   bf16/fp16: 1e-3 is one fp16 ulp at 1.0 (2^-10) and a quarter of a bf16 ulp at 1.0 (2^-8):
#         below the rounding step of any 16-bit output of magnitude >= 1, so it never hides an
#         error of one 16-bit ulp or more there.
FLOOR = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 1e-3}


def _spec(spec: Spec | LoadedSpec) -> Spec:
    return spec.spec if isinstance(spec, LoadedSpec) else spec


def default_tunables(spec: Spec | LoadedSpec, variant: dict[str, Any] | None = None) -> dict[str, int]:
    """The spec's tunables, taking the first (preferred) candidate of each list; with a variant
    (and a loaded spec), the first candidate its constraints on tunables allow."""
    if variant is not None and isinstance(spec, LoadedSpec):
        return tunable_candidates(spec, variant)[0]
    return {k: (v[0] if isinstance(v, list) else v) for k, v in _spec(spec).tunables.items()}


def torch_dtype(spec: Spec | LoadedSpec, name: str, variant: dict[str, Any]) -> torch.dtype:
    return TORCH_DTYPES[resolve_dtype(_spec(spec).tensors[name].dtype, variant)]


def tensor_shape(spec: Spec | LoadedSpec, name: str, env: dict[str, Any]) -> tuple[int, ...]:
    """The shape of tensor `name` with sizes, variant values and tunables from `env` (entries of
    outputs and scratch may be expressions, as in [cdiv(M, BLOCK_M), N])."""
    return tuple(int(eval_expr(d, env)) for d in _spec(spec).tensors[name].shape)


def bind_sizes(spec: Spec | LoadedSpec, tensors: dict[str, torch.Tensor]) -> dict[str, int]:
    """The spec's sizes read off the shapes of the given tensors (any role), checked for agreement.

    Sizes that no given tensor mentions are left out; shape entries that are variant axes or
    tunables are not checked here (they need a variant and tunables to compare with).
    """
    s = _spec(spec)
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


def derive_sizes(spec: Spec | LoadedSpec, sizes: dict[str, int], constants: dict[str, Any]) -> dict[str, int]:
    """`sizes` plus the sizes that constraints of the form `NAME == expr` define.

    A stopgap for sizes that are functions of other sizes and tunables (rmsnorm_bwd's
    MB == cdiv(M, BLOCK_M)): the schema cannot say that a shape entry is an expression.
    """
    s = _spec(spec)
    out = dict(sizes)
    for c in s.constraints:
        node = ast.parse(c, mode="eval").body
        if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)
                and isinstance(node.left, ast.Name) and node.left.id in s.sizes and node.left.id not in out):
            out[node.left.id] = int(eval_expr(ast.unparse(node.comparators[0]), {**constants, **out}))
    return out


def check_constraints(spec: Spec | LoadedSpec, env: dict[str, Any]) -> None:
    for c in _spec(spec).constraints:
        if not eval_expr(c, env):
            raise ValueError(f"{_spec(spec).name}: the sizes break the constraint '{c}' ({env})")


def random_inputs(spec: Spec | LoadedSpec, variant: dict[str, Any], env: dict[str, Any],
                  generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Fresh torch.randn inputs (never zeros: zeros hide missing loads and masks)."""
    s = _spec(spec)
    out = {}
    for name in s.inputs():
        dt = torch_dtype(s, name, variant)
        shape = tensor_shape(s, name, env)
        if dt.is_floating_point:
            out[name] = torch.randn(shape, generator=generator, dtype=torch.float32).to(dt)
        else:
            out[name] = torch.randint(-100, 100, shape, generator=generator, dtype=torch.int32).to(dt)
    return out


def packed_seq_idx(batch: int, seqlen: int, starts=()) -> torch.Tensor:
    """seq_idx (batch, seqlen) int32 for sequences packed one after another, the same in every
    row: 0 up to the first of `starts`, one more at each start (all 0 without starts)."""
    pos = torch.arange(seqlen)[:, None]
    return (pos >= torch.tensor(list(starts) or [seqlen])).sum(-1).to(torch.int32).expand(batch, seqlen).contiguous()


def allocate(spec: Spec | LoadedSpec, variant: dict[str, Any], env: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Outputs and scratch: zeros where the spec says `init: zeros`, else NaN (so that an element
    no kernel writes, or a scratch element read before it is written, shows up)."""
    s = _spec(spec)
    out = {}
    for name, t in s.tensors.items():
        if t.role == "input":
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


def scalar_values(spec: Spec | LoadedSpec, scalars: dict[str, float]) -> dict[str, float]:
    """`scalars` with the spec's defaults filled in."""
    s = _spec(spec)
    out = {}
    for name, p in s.scalars.items():
        if name in scalars:
            out[name] = float(scalars[name])
        elif p.default is not None:
            out[name] = float(p.default)
        else:
            raise ValueError(f"{s.name}: scalar '{name}' has no default; pass a value")
    return out


def forward_of(ls: LoadedSpec) -> LoadedSpec | None:
    """The spec in the same folder whose autograd pairs it with `ls` as its backward, if any."""
    for path in sorted(ls.path.parent.glob("*.yaml")):
        if path == ls.path:
            continue
        other = load_spec(path)
        if other.spec.autograd is not None and (path.parent / other.spec.autograd.backward).resolve() == ls.path.resolve():
            return other
    return None


def consistent_with_forward(ls: LoadedSpec, inputs: dict[str, torch.Tensor], scalars: dict[str, float],
                            variant: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A backward spec's inputs with the forward's outputs among them (attention's o and lse,
    rmsnorm's rstd) replaced by what the forward's reference computes from the other inputs:
    a backward is only defined on consistent saved tensors. Unchanged when `ls` is no backward,
    or when the forward needs an input the backward does not receive."""
    fwd = forward_of(ls)
    if fwd is None or not all(n in inputs for n in fwd.spec.inputs()):
        return inputs
    fwd_variant = {a: variant[a] for a in fwd.spec.variants if a in variant}
    fwd_scalars = {k: v for k, v in scalars.items() if k in fwd.spec.scalars}
    outs = reference(fwd, {**{n: inputs[n] for n in fwd.spec.inputs()}, **fwd_scalars}, variant=fwd_variant)
    return {n: (outs[n].to(t.dtype) if n in outs else t) for n, t in inputs.items()}


def run_spec_cpu(loaded_spec: LoadedSpec, variant: dict[str, Any], tensors: dict[str, torch.Tensor],
                 sizes: dict[str, int], scalars: dict[str, float],
                 tunables: dict[str, int] | None = None) -> dict[str, torch.Tensor]:
    """Run all the spec's kernels in order with the CPU interpreter.

    `tensors` holds at least the inputs; outputs and scratch it lacks are allocated (see
    `allocate`). Returns every tensor by name, outputs written in place.
    """
    s = loaded_spec.spec
    tunables = default_tunables(loaded_spec, variant) if tunables is None else tunables
    env = {**variant, **tunables, **sizes}
    check_constraints(s, env)
    all_t = {**allocate(s, variant, env), **tensors}
    missing = [n for n in s.tensors if n not in all_t]
    if missing:
        raise ValueError(f"{s.name}: missing tensors {missing}")
    scalars = scalar_values(s, scalars)
    for i, ks in enumerate(s.kernels):
        k = kernel_ir(loaded_spec, i, variant, tunables)
        grid = tuple(int(eval_expr(g, env)) for g in ks.grid)
        run_kernel(k, grid, all_t, sizes, scalars)
    return all_t


def reference(loaded_spec: LoadedSpec | Spec, inputs: dict[str, Any], *, exact: bool = True,
              variant: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
    """The spec's `reference` code run with torch; returns its outputs as float64.

    `inputs`: the input tensors by name, and optionally scalar values (defaults are used for
    the others). exact=True converts floating inputs to float64 first (the ground truth);
    exact=False runs the code on the inputs in their own dtype: what PyTorch itself gets for the
    same computation in that precision, the yardstick of `check_close`. The namespace also has
    `torch`, `math`, the variant's values (as in `if causal:`) and the sizes bound from the input
    shapes.
    """
    s = _spec(loaded_spec)
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    ns: dict[str, Any] = {"torch": torch, "math": math, **(variant or {}), **bind_sizes(s, tensors)}
    ns.update(scalar_values(s, {k: v for k, v in inputs.items() if k in s.scalars}))
    for k, v in tensors.items():
        ns[k] = v.double() if exact and v.dtype.is_floating_point else v
    with torch.no_grad():
        exec(compile(s.reference, f"<{s.name} reference>", "exec"), ns)
    out = {}
    for name in s.outputs():
        if name not in ns or not isinstance(ns[name], torch.Tensor):
            raise ValueError(f"{s.name}: the reference does not assign the output '{name}'")
        out[name] = ns[name].detach().double()
    return out


def max_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Max |got - ref|, with equal infinities (a logsumexp of a fully masked row) counting as 0."""
    got, ref = got.detach().double(), ref.detach().double()
    d = (got - ref).abs()
    d[got == ref] = 0.0
    return float(d.max()) if got.numel() else 0.0


def check_close(name: str, got: torch.Tensor, ref: torch.Tensor, ref_lowp: torch.Tensor) -> None:
    """Assert |got - ref| <= 2 * |ref_lowp - ref| + floor, in the max norm.

    `ref` is the float64 reference; `ref_lowp` the reference computed by PyTorch on the inputs in
    their own dtype. `ref_lowp` is first rounded to got's dtype: the kernel's output is stored in
    that dtype, so PyTorch's answer must pay for that rounding too (a reference that upcasts to
    float64 by itself, like softmax's, would otherwise look exact).
    """
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)}, reference {tuple(ref.shape)}"
    got64 = got.double()
    bad = ~torch.isfinite(got64) & torch.isfinite(ref)
    if bad.any():
        first = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(f"{name}: {int(bad.sum())} of {got.numel()} elements are not finite "
                             f"(first at {first}: {float(got64[first])}; unwritten outputs are NaN)")
    err = max_err(got64, ref)
    err_torch = max_err(ref_lowp.to(got.dtype).double(), ref)
    floor = FLOOR.get(got.dtype, 0.0)
    bound = 2 * err_torch + floor
    if not err <= bound:
        d = (got64 - ref).abs()
        d[got64 == ref] = 0.0
        where = tuple(int(i) for i in torch.unravel_index(d.nan_to_num(float('inf')).flatten().argmax(), got.shape))
        raise AssertionError(f"{name} ({got.dtype}): max error {err:.3g} at {where} "
                             f"(got {float(got64[where]):.6g}, reference {float(ref[where]):.6g}) exceeds "
                             f"2 * {err_torch:.3g} (PyTorch in the input dtype) + {floor:g}")



# Inputs outside an op's domain, mapped into it: Mamba-2's A is -exp(A_log) < 0; a positive A
# with dt > 0 (softplus) grows exp(dt * A) past fp32 over a chunk; seq_idx numbers the sequences
# packed in a row, non-decreasing from 0.
DOMAINS = {name: (lambda t: {**t, "A": -torch.exp(t["A"]), "seq_idx": torch.sort(t["seq_idx"].abs() % 3, dim=1).values})
           for name in ("ssd_fwd", "ssd_bwd")}
# Gradients of parameters shared by every position: sums over batch and positions of terms each
# within bf16 rounding, where PyTorch's own error can cancel to far below the terms' (a packed
# ssd_bwd variant: the kernels' ddt_bias 0.35% of its scale off, PyTorch's 0.07%, while on its
# terms, ddt, the kernels' error was 0.3% and PyTorch's 0.7%). There the bound is also met by 1%
# of the scale, tests/ir/test_ssd_bwd.py's bound (whose ablations show 1% sees a missing term).
SUMS = {"ssd_bwd": ("dA", "ddt_bias")}


def check_outputs(loaded_spec: LoadedSpec, got: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor],
                  scalars: dict[str, float], variant: dict[str, Any]) -> None:
    """Every output of the spec against its reference (check_close; SUMS' gradients may take 1%
    of the scale instead)."""
    spec = loaded_spec.spec
    ref = reference(loaded_spec, {**inputs, **scalars}, variant=variant)
    ref_lowp = reference(loaded_spec, {**inputs, **scalars}, exact=False, variant=variant)
    for name in spec.outputs():
        try:
            check_close(name, got[name], ref[name], ref_lowp[name])
        except AssertionError:
            if name not in SUMS.get(spec.name, ()):
                raise
            err, scale = max_err(got[name], ref[name]), float(ref[name].abs().max())
            assert err <= 0.01 * scale, f"{name}: max error {err:.3g} over 1% of max |ref| = {scale:.3g}"

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
