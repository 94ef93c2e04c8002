"""The pairing of a forward spec with its backward spec, checked when the forward loads.

The convention (docs/SPEC_LANGUAGE.md, "Autograd"): a backward input is a tensor the forward
saves (`autograd.saves`) or `d<out>`, the incoming gradient of a differentiable forward output;
a backward output is `d<in>`, the gradient of a forward input, and every input that takes a
gradient (`grad: true`, the default) has one (an input marked `grad: false` may still have one:
it is computed and dropped, so that a gradient can be switched off in the forward spec alone). A name off that convention would otherwise drop a
gradient silently (`a.grad` is None) or fail only at the first backward call.
"""
from __future__ import annotations

import difflib

from ..errors import SpecError
from .load import LoadedSpec
from .model import INT_DTYPE_NAMES


def _suggest(name: str, expected: list[str]) -> str:
    close = difflib.get_close_matches(name, expected, n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def check_pairing(fwd: LoadedSpec, bwd: LoadedSpec) -> None:
    """Raise a SpecError at the backward spec's tensor that breaks the convention."""
    f, b = fwd.spec, bwd.spec
    assert f.autograd is not None
    inputs = [n for n, t in f.tensors.items() if t.role == "input"]
    takes_grad = [n for n in inputs if f.tensors[n].grad and f.tensors[n].dtype not in INT_DTYPE_NAMES]  # indices have none
    diff_outputs = [n for n, t in f.tensors.items() if t.role == "output" and t.grad]
    saves = f.autograd.saves
    gradients = ["d" + n for n in takes_grad]
    incoming = ["d" + n for n in diff_outputs]
    for name, t in b.tensors.items():
        here = bwd.where("tensors", name, "<key>")
        if t.role == "output" and name not in ["d" + n for n in inputs]:
            raise SpecError(f"backward output '{name}' is not the gradient of a forward input that takes one; "
                            f"a gradient output is named d<input>: expected {', '.join(gradients) or 'none'}"
                            + _suggest(name, gradients), here)
        if t.role == "input" and name not in saves and name not in incoming:
            raise SpecError(f"backward input '{name}' is neither a tensor {fwd.path.name} saves (autograd.saves: "
                            f"{', '.join(saves) or 'none'}) nor the gradient of a differentiable forward output "
                            f"(d<output>: {', '.join(incoming) or 'none'})" + _suggest(name, saves + incoming), here)
    computed = {n for n, t in b.tensors.items() if t.role == "output"}
    for name in takes_grad:
        if "d" + name not in computed:
            raise SpecError(f"forward input '{name}' takes a gradient but {bwd.path.name} computes no 'd{name}'; "
                            f"add that output, or give {name} grad: false in {fwd.path.name}", bwd.where("tensors"))
