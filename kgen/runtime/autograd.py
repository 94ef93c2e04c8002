"""Autograd for a forward spec from its backward spec.

The forward saves the tensors its `autograd.saves` names; the backward op receives them by name,
plus `d<out>` for each differentiable output, and returns `d<in>` for the inputs it names.
An op without a backward spec (a backward op itself) gets an autograd kernel that refuses to be
differentiated, so that double backward fails loudly instead of silently returning no gradient.

An op with an output written over an input (`alias:`) mutates that input, which
torch.library.register_autograd refuses (it takes functional schemas only). Such an op gets an
autograd kernel of its own, a torch.autograd.Function that marks the input dirty, as PyTorch's
in-place ops do: the input's history is rebased onto the op, so a gradient reaching it later
flows through the backward spec, and a tensor saved elsewhere that the op overwrote fails that
backward with PyTorch's version-counter error instead of giving a wrong gradient.
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import LaunchError


def register(fwd, bwd, lib) -> None:
    setup_context, backward = _formulas(fwd, bwd)
    if fwd.aliases:
        _register_inplace(fwd, setup_context, backward, lib)
    else:
        torch.library.register_autograd(fwd.qualname, backward, setup_context=setup_context)


def _formulas(fwd, bwd):
    """setup_context(ctx, inputs, outputs) and backward(ctx, *grads), over every output of the
    forward in declaration order."""
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
        ctx.in_dtypes = [x.dtype if isinstance(x, torch.Tensor) else None for x in inputs[:len(fwd.inputs)]]
        # an output written over an input is the input itself, rebased onto this op (mark_dirty);
        # marking it non-differentiable as well would leave it the input's old history
        nondiff = [o for n, o in zip(fwd.outputs, outs) if not fwd.spec.tensors[n].grad and n not in fwd.aliases]
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
        # a backward that writes over one of its inputs gets a copy: a saved tensor serves every
        # backward through this graph (retain_graph), and an incoming gradient is autograd's
        for n in set(bwd.aliases.values()) & set(args):
            args[n] = args[n].clone()
        extra = dict(zip(list(fwd.spec.scalars) + fwd.options + list(fwd.passed), ctx.extra))
        for n in list(bwd.spec.scalars) + bwd.options:
            if n in extra:
                args[n] = extra[n]
        outs = bwd(**args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        by_name = dict(zip(bwd.outputs, outs))
        # an input marked grad: false gets no gradient even if the backward computes one; a
        # gradient the backward adds up in fp32 (a hook's tensor: tensor_grads) comes back in the
        # input's dtype
        out = []
        for n, dtype in zip(fwd.inputs, ctx.in_dtypes):
            g = by_name.get("d" + n) if fwd.spec.tensors[n].grad else None
            out.append(g.to(dtype) if g is not None and dtype is not None and g.dtype != dtype else g)
        return tuple(out) + tuple(None for _ in ctx.extra)

    return setup_context, backward


def register_no_backward(op, lib) -> None:
    """Register an autograd kernel for `op` whose backward raises.

    Without one, PyTorch's fallback gives the outputs a node that only warns when reached and
    passes no gradient on, so a double backward (create_graph=True through a kgen op) would be
    silently wrong; opcheck also rejects an op that has no kernel at the Autograd key.
    """
    def backward(ctx, *grads):
        raise LaunchError(f"{op.qualname} cannot be differentiated: its spec has no autograd.backward "
                          f"(kgen ops have a first derivative only, so double backward is not supported)")

    if op.aliases:
        _register_inplace(op, lambda ctx, inputs, output: None, backward, lib)
    else:
        torch.library.register_autograd(op.qualname, backward, setup_context=lambda ctx, inputs, output: None)


def register_version_bump(op, lib) -> None:
    """The ADInplaceOrView kernel of an op that writes over inputs: their version counters move
    on each call, as an in-place ATen op's do (torch.library.custom_op registers the same), so
    that autograd sees a saved tensor the op overwrote. The kernels write through raw pointers,
    which no counter notices."""
    overload = getattr(torch.ops.kgen, op.opname).default
    over = [op.inputs.index(src) for src in op.aliases.values()]

    def bump(keyset, *args):
        for i in over:
            torch.autograd.graph.increment_version(args[i])
        return overload.redispatch(keyset & torch._C._after_ADInplaceOrView_keyset, *args)

    lib.impl(op.opname, bump, "ADInplaceOrView", with_keyset=True)


def _register_inplace(op, setup_context, backward, lib) -> None:
    """The Autograd kernel of an op that writes over inputs: below autograd when nothing needs a
    gradient, else a Function that marks those inputs dirty (what PyTorch accepts for in-place
    results); every output goes through it, the aliased ones as their inputs."""
    overload = getattr(torch.ops.kgen, op.opname).default
    over = {src: out for out, src in op.aliases.items()}

    def below(keyset, args):
        with torch._C._AutoDispatchBelowAutograd():
            return overload.redispatch(keyset & torch._C._after_autograd_keyset, *args)

    def forward(ctx, keyset, *args):
        outs = op.all_outputs(args, _as_tuple(below(keyset, args), len(op.returned)))
        outs = outs if isinstance(outs, tuple) else (outs,)
        ctx.mark_dirty(*(args[op.inputs.index(src)] for src in over))
        setup_context(ctx, args, outs)
        return outs

    def backward_(ctx, *grads):
        return (None, *backward(ctx, *grads))

    # named after the op: grad_fn shows <op>Backward
    Inplace = type(op.opname, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward_)})

    def autograd_kernel(keyset, *args):
        if not (torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)):
            return below(keyset, args)
        for src, out in over.items():
            t = args[op.inputs.index(src)]
            if t.is_leaf and t.requires_grad:  # refused here, before the kernels overwrite it
                raise LaunchError(f"{op.spec.name}: '{src}' is a leaf tensor that requires grad, and output '{out}' is "
                                  f"written over it (alias: {src}), which PyTorch does not allow for a leaf; pass a "
                                  f"tensor computed from it ({src}.clone()) or call under torch.no_grad()")
        outs = Inplace.apply(keyset, *args)
        kept = tuple(o for n, o in zip(op.outputs, outs) if n not in op.aliases)
        return kept[0] if len(kept) == 1 else kept or None

    lib.impl(op.opname, autograd_kernel, "Autograd", with_keyset=True)


def _as_tuple(out, n: int) -> tuple:
    """The schema's returns as a tuple: None for none, a tensor for one, a tuple for more."""
    return () if n == 0 else (out,) if n == 1 else tuple(out)
