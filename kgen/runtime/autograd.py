"""Autograd for a forward spec from its backward spec.

The forward saves the tensors its `autograd.saves` names; the backward op receives them by name,
plus `d<out>` for each differentiable output, and returns `d<in>` for the inputs it names.
An op without a backward spec (a backward op itself) gets an autograd kernel that refuses to be
differentiated, so that double backward fails loudly instead of silently returning no gradient.
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import LaunchError


def register(fwd, bwd) -> None:
    saves = fwd.spec.autograd.saves
    diff_outputs = [n for n in fwd.outputs if fwd.spec.tensors[n].grad]

    def setup_context(ctx, inputs, output):
        outs = output if isinstance(output, tuple) else (output,)
        by_name = {**dict(zip(fwd.inputs, inputs)), **dict(zip(fwd.outputs, outs))}
        ctx.save_for_backward(*(by_name[n] for n in saves))
        # an output the loss does not use gets None, not a zero tensor: PyTorch would otherwise
        # fill one for every output, non-differentiable ones included (ssd_fwd's prev_states,
        # half of x's size: 0.02-0.04 ms of the Mamba-2 backward on the H200); zeros are made
        # below only for the gradients the backward reads
        ctx.set_materialize_grads(False)
        ctx.out_like = {n: (o.shape, o.dtype, o.device) for n, o in zip(fwd.outputs, outs) if n in diff_outputs}
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
                if g is None:
                    shape, dtype, device = ctx.out_like[n[1:]]
                    g = torch.zeros(shape, dtype=dtype, device=device)
                args[n] = g.contiguous()
        extra = dict(zip(list(fwd.spec.scalars) + fwd.options + list(fwd.passed), ctx.extra))
        for n in list(bwd.spec.scalars) + bwd.options:
            if n in extra:
                args[n] = extra[n]
        outs = bwd(**args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        by_name = dict(zip(bwd.outputs, outs))
        # an input marked grad: false gets no gradient even if the backward computes one
        return tuple(by_name.get("d" + n) if fwd.spec.tensors[n].grad else None for n in fwd.inputs) + tuple(None for _ in ctx.extra)

    torch.library.register_autograd(fwd.qualname, backward, setup_context=setup_context)


def register_no_backward(op) -> None:
    """Register an autograd kernel for `op` whose backward raises.

    Without one, PyTorch's fallback gives the outputs a node that only warns when reached and
    passes no gradient on, so a double backward (create_graph=True through a kgen op) would be
    silently wrong; opcheck also rejects an op that has no kernel at the Autograd key.
    """
    def backward(ctx, *grads):
        raise LaunchError(f"{op.qualname} cannot be differentiated: its spec has no autograd.backward "
                          f"(kgen ops have a first derivative only, so double backward is not supported)")

    torch.library.register_autograd(op.qualname, backward, setup_context=lambda ctx, inputs, output: None)
