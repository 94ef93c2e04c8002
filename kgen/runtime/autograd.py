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


def direct_function(fwd, bwd) -> type[torch.autograd.Function]:
    """The autograd.Function of a call that skips the dispatcher (KgenOp.__call__ on plain CUDA
    tensors): the same formulas as the registered autograd kernel, around the op's run."""
    setup_context, backward = _formulas(fwd, bwd)

    def forward(ctx, *args):
        outs = fwd.run(*args)
        output = outs[0] if len(outs) == 1 else outs
        setup_context(ctx, args, output)
        return output

    # forward(ctx, ...) rather than a setup_context method: Function.apply binds a separate
    # setup_context's arguments through inspect.signature on every call
    return type(f"{fwd.opname}_direct", (torch.autograd.Function,), {
        "forward": staticmethod(forward), "backward": staticmethod(backward)})


def _formulas(fwd, bwd):
    """setup_context(ctx, inputs, outputs) and backward(ctx, *grads), over every output of the
    forward in declaration order. Names are resolved to positions here, once: these run on every
    call that records a graph and on every backward (host time, docs/PERFORMANCE.md)."""
    n_in = len(fwd.inputs)
    by_position = list(fwd.inputs) + list(fwd.outputs)  # setup_context's inputs, then outputs
    saved_at = [by_position.index(n) for n in fwd.spec.autograd.saves]
    diff_outputs = [j for j, n in enumerate(fwd.outputs) if fwd.spec.tensors[n].grad]
    # an output written over an input is the input itself, rebased onto this op (mark_dirty);
    # marking it non-differentiable as well would leave it the input's old history
    nondiff = [j for j, n in enumerate(fwd.outputs) if not fwd.spec.tensors[n].grad and n not in fwd.aliases]
    saves = list(fwd.spec.autograd.saves)
    # each backward input: a saved tensor (its index in saved_tensors) or an output's gradient
    from_saved = [(n, saves.index(n)) for n in bwd.inputs if n in saves]
    from_grad = [(n, fwd.outputs.index(n[1:])) for n in bwd.inputs
                 if n not in saves and n.startswith("d") and n[1:] in fwd.outputs]
    # a backward that writes over one of its inputs gets a copy: a saved tensor serves every
    # backward through this graph (retain_graph), and an incoming gradient is autograd's
    copied = sorted(set(bwd.aliases.values()) & {n for n, _ in from_saved + from_grad})
    extra_names = list(fwd.spec.scalars) + fwd.options + list(fwd.passed)
    extra_to = [(n, extra_names.index(n)) for n in list(bwd.spec.scalars) + bwd.options if n in extra_names]
    # an input marked grad: false gets no gradient even if the backward computes one
    grad_from = [bwd.outputs.index("d" + n) if fwd.spec.tensors[n].grad and "d" + n in bwd.outputs else None
                 for n in fwd.inputs]

    def setup_context(ctx, inputs, output):
        outs = output if isinstance(output, tuple) else (output,)
        every = list(inputs[:n_in]) + list(outs)
        ctx.save_for_backward(*(every[i] for i in saved_at))
        # an output the loss does not use gets None, not a zero tensor: PyTorch would otherwise
        # fill one for every output, non-differentiable ones included (ssd_fwd's prev_states,
        # half of x's size: 0.02-0.04 ms of the Mamba-2 backward on the H200); zeros are made
        # below only for the gradients the backward reads
        ctx.set_materialize_grads(False)
        ctx.out_like = {j: (outs[j].shape, outs[j].dtype, outs[j].device) for j in diff_outputs}
        ctx.extra = inputs[n_in:]
        ctx.in_dtypes = [x.dtype if isinstance(x, torch.Tensor) else None for x in inputs[:n_in]]
        if nondiff:
            ctx.mark_non_differentiable(*(outs[j] for j in nondiff))

    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        args: dict[str, Any] = {n: saved[k] for n, k in from_saved}
        for n, j in from_grad:
            g = grads[j]
            if g is None:
                shape, dtype, device = ctx.out_like[j]
                g = torch.zeros(shape, dtype=dtype, device=device)
            args[n] = g.contiguous()
        for n in copied:
            args[n] = args[n].clone()
        for n, k in extra_to:
            args[n] = ctx.extra[k]
        outs = bwd(**args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        # a gradient the backward adds up in fp32 (a hook's tensor: tensor_grads) comes back in
        # the input's dtype
        result = []
        for k, dtype in zip(grad_from, ctx.in_dtypes):
            g = None if k is None else outs[k]
            result.append(g.to(dtype) if g is not None and dtype is not None and g.dtype != dtype else g)
        return tuple(result) + (None,) * len(ctx.extra)

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
