"""Autograd for a forward spec from its backward spec.

The forward saves the tensors its `autograd.saves` names; the backward op receives them by name,
plus `d<out>` for each differentiable output, and returns `d<in>` for the inputs it names.
"""
from __future__ import annotations

from typing import Any

import torch


def register(fwd, bwd) -> None:
    saves = fwd.spec.autograd.saves
    diff_outputs = [n for n in fwd.outputs if fwd.spec.tensors[n].grad]

    def setup_context(ctx, inputs, output):
        outs = output if isinstance(output, tuple) else (output,)
        by_name = {**dict(zip(fwd.inputs, inputs)), **dict(zip(fwd.outputs, outs))}
        ctx.save_for_backward(*(by_name[n] for n in saves))
        ctx.extra = list(inputs[len(fwd.inputs):])
        nondiff = [o for n, o in zip(fwd.outputs, outs) if not fwd.spec.tensors[n].grad]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)

    def backward(ctx, *grads):
        saved = dict(zip(saves, ctx.saved_tensors))
        grad_of = dict(zip(fwd.outputs, grads))
        args: dict[str, Any] = {}
        for n in bwd.inputs:
            if n in saved:
                args[n] = saved[n]
            elif n.startswith("d") and n[1:] in grad_of:
                g = grad_of[n[1:]]
                args[n] = g.contiguous() if g is not None else torch.zeros_like(saved.get(n[1:]))
        extra = dict(zip(list(fwd.spec.scalars) + fwd.options, ctx.extra))
        for n in list(bwd.spec.scalars) + bwd.options:
            if n in extra:
                args[n] = extra[n]
        outs = bwd(**args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        by_name = dict(zip(bwd.outputs, outs))
        return tuple(by_name.get("d" + n) for n in fwd.inputs) + tuple(None for _ in ctx.extra)

    torch.library.register_autograd(fwd.qualname, backward, setup_context=setup_context)
    del diff_outputs
