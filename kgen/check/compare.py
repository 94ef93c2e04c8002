"""An output against its reference, at a tolerance set by PyTorch's own error: the max error
must be at most 2x that of PyTorch doing the same computation in the input dtype, plus a floor."""
from __future__ import annotations

from dataclasses import dataclass

import torch

# Tolerance floors, added to 2x the error of PyTorch doing the same computation in the input
# dtype. They only matter when PyTorch's error happens to be (near) zero, e.g. when its result
# rounds exactly onto the float64 reference. The check data are O(1) (torch.randn), so absolute
# floors suffice:
#   fp32: 1e-6 is ~8 fp32 ulps at 1.0 (2^-23 ~ 1.2e-7): room for a few roundings of fp32
#         arithmetic (exp, a sum over ~100 terms), far below any real indexing/masking bug.
#   bf16/fp16: 1e-3 is one fp16 ulp at 1.0 (2^-10) and a quarter of a bf16 ulp at 1.0 (2^-8):
#         below the rounding step of any 16-bit output of magnitude >= 1, so it never hides an
#         error of one 16-bit ulp or more there.
FLOOR = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 1e-3}


@dataclass(frozen=True)
class Verdict:
    name: str
    error: float  # max |got - ref| (inf where got is not finite and ref is)
    tolerance: float
    ok: bool
    detail: str  # why not, with the worst element; empty when ok


def max_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Max |got - ref|, with equal infinities (a logsumexp of a fully masked row) counting as 0."""
    got, ref = got.detach().double(), ref.detach().double()
    d = (got - ref).abs()
    d[got == ref] = 0.0
    return float(d.max()) if got.numel() else 0.0


def compare(name: str, got: torch.Tensor, ref: torch.Tensor, ref_lowp: torch.Tensor,
            scale_tolerance: float | None = None) -> Verdict:
    """|got - ref| <= 2 * |ref_lowp - ref| + floor in the max norm, or with `scale_tolerance`
    also <= that fraction of max |ref|.

    `ref` is the float64 reference; `ref_lowp` the reference computed by PyTorch on the inputs in
    their own dtype, first rounded to got's dtype: the kernel's output is stored in that dtype,
    so PyTorch's answer must pay for that rounding too (a reference that upcasts to float64 by
    itself, like softmax's, would otherwise look exact).
    """
    if got.shape != ref.shape:
        return Verdict(name, float("inf"), 0.0, False, f"{name}: shape {tuple(got.shape)}, reference {tuple(ref.shape)}")
    got64 = got.double()
    err_torch = max_err(ref_lowp.to(got.dtype).double(), ref)
    bound = 2 * err_torch + FLOOR.get(got.dtype, 0.0)
    bad = ~torch.isfinite(got64) & torch.isfinite(ref)
    if bad.any():
        first = tuple(int(i) for i in bad.nonzero()[0])
        return Verdict(name, float("inf"), bound, False,
                       f"{name}: {int(bad.sum())} of {got.numel()} elements are not finite "
                       f"(first at {first}: {float(got64[first])}; unwritten outputs are NaN)")
    err = max_err(got64, ref)
    if err <= bound:
        return Verdict(name, err, bound, True, "")
    if scale_tolerance is not None:
        scale = scale_tolerance * float(ref.abs().max())
        if err <= scale:
            return Verdict(name, err, scale, True, "")
    d = (got64 - ref).abs()
    d[got64 == ref] = 0.0
    where = tuple(int(i) for i in torch.unravel_index(d.nan_to_num(float("inf")).flatten().argmax(), got.shape))
    also = f" and {scale_tolerance:g} of max |ref|" if scale_tolerance is not None else ""
    return Verdict(name, err, bound, False,
                   f"{name} ({got.dtype}): max error {err:.3g} at {where} (got {float(got64[where]):.6g}, "
                   f"reference {float(ref[where]):.6g}) exceeds 2 * {err_torch:.3g} (PyTorch in the input dtype) + "
                   f"{FLOOR.get(got.dtype, 0.0):g}{also}")
