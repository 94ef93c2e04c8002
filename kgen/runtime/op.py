"""A spec as a PyTorch op: torch.library registration, fake implementation, autograd.

`kgen.load(path)` returns a KgenOp. Calling it checks the inputs, picks the variant from their
dtypes (and keyword options for the other axes), allocates the outputs and runs the spec's
kernels in order: on a GPU from the compiled code objects (kgen.runtime.compiled), on the CPU
through the IR interpreter (slow; for tests and debugging), or, loaded with emulate=True, on the
CPU as a target's own kernels in its emulation (kgen.emulate: gfx942's HIP, wave64). The op is
registered as `kgen::<name>` (`kgen::<name>_emulated_<target>`) so that torch.compile sees one
opaque node and `torch.library.opcheck` applies.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..errors import LaunchError, SpecError, TargetError
from ..hw.descriptor import Target, load_target
from ..knobs import call_knobs, knobs
from ..lang import kernel_ir, resolve_dtype
from ..ir.core import WRITES, walk
from ..spec.expr import eval_expr
from ..spec.load import LoadedSpec, backward_spec, load_spec
from ..spec.pairing import check_pairing
from .binding import TORCH, axis_from_shape, bind, check_aliased, check_option, choose_variant, dtype_axes, output_shape
from .plan import Plan, allocated, launch, make_plan, new_tensor

_ops: dict[str, "KgenOp"] = {}
_autograd_done: set[str] = set()
_lib = torch.library.Library("kgen", "FRAGMENT")


def device_target(device: torch.device) -> Target:
    """The target of a GPU: KGEN_TARGET, else the device's architecture."""
    if knobs().target:
        return load_target(knobs().target)
    if torch.version.hip:
        arch = torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]
        return load_target(arch)
    major, minor = torch.cuda.get_device_capability(device)
    try:
        return load_target(f"sm_{major}{minor}")
    except TargetError:
        raise TargetError(f"this GPU is sm_{major}{minor}; kgen builds for gfx90a, gfx942, sm_80 and sm_90") from None


class KgenOp:
    def __init__(self, ls: LoadedSpec, passed: dict[str, list[Any]] | None = None, emulated: Target | None = None):
        self.ls, self.spec = ls, ls.spec
        self.emulated = emulated  # the target whose kernels run in emulation on CPU tensors, or None
        self.opname = ls.spec.name + (f"_emulated_{emulated.name}" if emulated else "")
        self._emulated_builds: dict[tuple, Any] = {}
        self.inputs = ls.spec.inputs()
        self.outputs = ls.spec.outputs()
        # outputs written over an input (`alias:`): the torch.library op mutates that input
        # (`Tensor(a!)`) and returns the other outputs; calling the KgenOp returns them all
        self.aliases = ls.spec.aliases()
        self.returned = [n for n in self.outputs if n not in self.aliases]
        # the variant axes a call may name: not those an input's dtype or a size's bucket decides
        self.options = [a for a in ls.spec.variants if a not in dtype_axes(ls) and a not in ls.spec.buckets]
        # backward variant axes this forward takes as arguments only to hand them to its
        # backward (autograd.options), with the values the backward accepts
        self.passed = dict(passed or {})
        self.backward_op: KgenOp | None = None
        self.qualname = f"kgen::{self.opname}"
        # each argument a call takes, in schema order: (name, the values an axis accepts, the scalar)
        self._names = self.inputs + list(self.spec.scalars) + self.options + list(self.passed)
        self._kinds = {n: (n, self.spec.variants.get(n) or self.passed.get(n), self.spec.scalars.get(n)) for n in self._names}
        self._plans: dict[tuple, Plan] = {}
        self._direct_fn: type[torch.autograd.Function] | None = None  # autograd of a direct call
        self._forced: dict[str, int] | None = None  # kgen tune: the candidate being timed
        self.last_tunables: dict[str, int] | None = None  # what the last planned call was built with
        self._register()

    def force_tunables(self, tunables: dict[str, int] | None) -> None:
        """Build every variant with `tunables` first (kgen tune times each candidate), or, with
        None, go back to the tuning database's choice or the spec's order."""
        self._forced = tunables
        self._plans.clear()

    # --- calling --------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any):
        positional = self._positional(args, kwargs)
        direct = self._direct(positional)
        if direct is not None:
            return direct
        out = getattr(torch.ops.kgen, self.opname)(*positional)
        if not self.aliases:
            return out
        return self.all_outputs(positional, out if len(self.returned) != 1 else (out,))

    def _direct(self, positional: list[Any]):
        """The outputs of a call that skips the dispatcher, or None where it must not.

        On the H200 the path through torch.ops (dispatcher, torch.library's autograd kernel,
        the dispatcher again, the Python kernel) was most of an op call's host time, as long as
        the kernels of a 4096-wide row op (docs/PERFORMANCE.md). A call on plain tensors outside
        torch.compile, torch.jit.trace, functorch transforms, torch function and dispatch modes
        and the profiler sees nothing of the dispatcher but its checks, which run() repeats, so
        it runs directly, through autograd.Function where a gradient is wanted (on CPU tensors
        too, so that the CPU tests take the path GPU calls take). Every other call, and every op
        that writes over an input or has no backward while a gradient is wanted, takes the
        registered op."""
        inputs = positional[:len(self.inputs)]
        if (self.aliases or not inputs or torch.compiler.is_compiling() or _functorch_stack() is not None
                or _dispatch_modes() or _function_modes() or _profiling() or _jit_tracing()):
            return None
        for t in inputs:
            if type(t) is not torch.Tensor or not (t.is_cuda or t.is_cpu):
                return None
        if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
            if self._direct_fn is None:
                return None
            return self._direct_fn.apply(*positional)
        outs = self.run(*positional)
        return outs[0] if len(outs) == 1 else outs

    def all_outputs(self, args, returned) -> Any:
        """Every output in declaration order from the op's arguments and the outputs its schema
        returns: an aliased output is the input tensor it was written over."""
        it = iter(returned or ())
        outs = tuple(args[self.inputs.index(self.aliases[n])] if n in self.aliases else next(it) for n in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def _positional(self, args, kwargs) -> list[Any]:
        names = self._names
        if len(args) > len(names):
            raise LaunchError(f"{self.spec.name}() takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
        for k in kwargs:
            if k not in self._kinds:
                raise LaunchError(f"{self.spec.name}() got an unknown argument '{k}'; accepted: {', '.join(names)}")
        out = []
        for i, (n, values, scalar) in enumerate(self._kinds.values()):
            given = i < len(args) or n in kwargs
            v = args[i] if i < len(args) else kwargs.get(n)
            if given and values is not None:
                check_option(self.spec if n in self.spec.variants else self.backward_op.spec, n, v, self.spec.name)  # here: the schema would turn 1 into True
            if given and scalar is not None:
                try:  # here: the schema's int or float would turn it into its own error
                    out.append(scalar.value(v))
                except ValueError as e:
                    raise LaunchError(f"{self.spec.name}: scalar '{n}' {e}") from None
            elif given:
                out.append(v)
            elif scalar is not None and scalar.default is not None:
                out.append(scalar.default)
            elif n in self.options:  # an axis that sizes an input is read off its shape
                out.append(axis_from_shape(self.spec, dict(zip(names, args), **kwargs), n, self.spec.variants[n][0]))
            elif n in self.passed:
                out.append(self.passed[n][0])
            else:
                raise LaunchError(f"{self.spec.name}() is missing the argument '{n}'")
        return out

    def run(self, *args: Any) -> tuple[torch.Tensor, ...]:
        """The op's outputs in declaration order, from its arguments in schema order (inputs,
        scalars, options, passed axes): what the registered op's kernels call."""
        n_in, n_fixed = len(self.inputs), len(self.inputs) + len(self.spec.scalars)
        inputs = args[:n_in]
        options = args[n_fixed:n_fixed + len(self.options)]
        for axis, value in zip(self.passed, args[n_fixed + len(self.options):]):
            check_option(self.backward_op.spec, axis, value, self.spec.name)
        device = inputs[0].device
        kn = call_knobs()
        if device.type == "cpu" or self.emulated is not None:
            if device.type != "cpu":
                raise LaunchError(f"{self.opname} runs {self.emulated.name}'s kernels in emulation on the CPU; "
                                  f"pass CPU tensors, got them on {device}")
            # the interpreter computes with torch ops: without no_grad they would record a graph
            # onto the outputs (differentiating the interpreter, not the op)
            with torch.no_grad():
                return self._run_on_cpu(dict(zip(self.inputs, inputs)), dict(zip(self.spec.scalars, args[n_in:n_fixed])),
                                        dict(zip(self.options, options)), device, kn.poison)
        # everything but the addresses and scalars follows from this key (kgen.runtime.plan);
        # each input's device is in it, so that bind()'s one-device check runs for a new mix
        key = (tuple((t.shape, t.stride(), t.dtype, t.get_device()) for t in inputs), options, kn.target)
        plan = self._plans.get(key)
        if self.aliases:  # addresses are not in the key
            check_aliased(self.ls, dict(zip(self.inputs, inputs)))
        if plan is None:
            target = device_target(device)
            plan = make_plan(self, dict(zip(self.inputs, inputs)), dict(zip(self.options, options)), device, target, self._forced)
            if len(self._plans) >= 256:
                self._plans.clear()
            self._plans[key] = plan
        self.last_tunables = plan.tunables
        all_t = launch(plan, inputs, args[n_in:n_fixed], device, kn.poison)
        return tuple(all_t[i] for i in plan.returned)

    def _allocate(self, tensors, specs, device, poison: bool) -> dict[str, torch.Tensor]:
        """The inputs, each allocated output and scratch tensor (NaN with KGEN_POISON), and each
        aliased output as the very input it is written over: never poisoned, it holds the input."""
        all_t = dict(tensors)
        for name, shape, dt, zeros in specs:
            all_t[name] = new_tensor(shape, dt, zeros, poison, device)
        for out, src in self.aliases.items():
            all_t[out] = tensors[src]
        return all_t

    def _run_on_cpu(self, tensors, scalars, options, device, poison) -> tuple[torch.Tensor, ...]:
        from ..spec.candidates import tunable_candidates

        variant = choose_variant(self.ls, tensors, options)
        sizes = bind(self.ls, tensors, variant, device)
        if self.emulated is not None:
            built = self._emulated_build(variant)
            tunables = built.tunables
        else:  # the interpreter runs any candidate: the forced one (kgen tune), else the first
            tunables = self._forced if self._forced in tunable_candidates(self.ls, variant) else tunable_candidates(self.ls, variant)[0]
        self.last_tunables = tunables
        env = {**variant, **sizes, **tunables}
        all_t = self._allocate(tensors, allocated(self, variant, env), device, poison)
        if self.emulated is not None:
            self._run_emulated(built.kernels, all_t, sizes, scalars, env)
        else:
            self._run_cpu(all_t, sizes, scalars, variant, tunables, env)
        return tuple(all_t[n] for n in self.outputs)

    def _emulated_build(self, variant):
        """The variant's kernels as `kgen build` writes them for the emulated target (with a
        forced candidate first, as on a GPU)."""
        from ..build import build_variant
        from ..spec.load import variant_id

        key = (variant_id(variant), tuple(sorted((self._forced or {}).items())))
        if key not in self._emulated_builds:
            self._emulated_builds[key] = build_variant(self.ls, variant, self.emulated, compile=False, first=self._forced)
        return self._emulated_builds[key]

    def _run_emulated(self, kernels, tensors, sizes, scalars, env) -> None:
        from ..backends import emulator

        run = emulator(self.emulated)
        for ks, bk in zip(self.spec.kernels, kernels):
            if bk.empty:
                continue
            run(bk, tuple(int(eval_expr(g, env)) for g in ks.grid), tensors, sizes, scalars)

    def _run_cpu(self, tensors, sizes, scalars, variant, tunables, env) -> None:
        from ..ir.interp import run_kernel

        for i, ks in enumerate(self.spec.kernels):
            k = kernel_ir(self.ls, i, variant, tunables)
            if not any(op.kind in WRITES for op in walk(k.body)):  # an empty kernel (BuiltKernel.empty)
                continue
            run_kernel(k, tuple(eval_expr(g, env) for g in ks.grid), tensors, sizes, scalars)

    # --- torch.library ---------------------------------------------------------------------------
    def _schema(self) -> str:
        # an input an output is written over is mutated: Tensor(a!), one alias set per input
        letters = iter("abcdefghijklmnopqrstuvwxyz")
        over = set(self.aliases.values())
        params = [f"Tensor({next(letters)}!) {n}" if n in over else f"Tensor {n}" for n in self.inputs]
        params += [f"{'float' if p.dtype == 'fp32' else 'int'} {n}" for n, p in self.spec.scalars.items()]
        for a in self.options + list(self.passed):
            v = (self.spec.variants[a] if a in self.options else self.passed[a])[0]
            kind = "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "float" if isinstance(v, float) else "str"
            params.append(f"{kind} {a}")
        outs = ", ".join("Tensor" for _ in self.returned)
        return f"({', '.join(params)}) -> " + (outs if len(self.returned) == 1 else f"({outs})")

    def _register(self) -> None:
        name = self.opname
        if not hasattr(torch.ops.kgen, name) or name not in _ops:
            if not _op_defined(name):
                _lib.define(name + self._schema())

            def returned(op, outs):
                """What the schema returns of every output: not those written over an input."""
                outs = tuple(o for n, o in zip(op.outputs, outs) if n not in op.aliases)
                return outs[0] if len(outs) == 1 else outs or None

            def impl(*args):
                return returned(_ops[name], _ops[name].run(*args))

            def fake(*args):
                op = _ops[name]
                tensors = dict(zip(op.inputs, args))
                n_fixed = len(op.inputs) + len(op.spec.scalars)
                options = dict(zip(op.options, args[n_fixed:n_fixed + len(op.options)]))
                variant = choose_variant(op.ls, tensors, options)
                env = {**variant}
                for n in op.inputs:
                    for d, s in zip(op.spec.tensors[n].shape, tensors[n].shape):
                        if isinstance(d, str):
                            env.setdefault(d, s)
                dev = next(iter(tensors.values())).device
                outs = tuple(torch.empty(output_shape(op.ls, n, env), dtype=TORCH[resolve_dtype(op.spec.tensors[n].dtype, variant)], device=dev)
                             if n not in op.aliases else None for n in op.outputs)
                return returned(op, outs)

            _lib.impl(name, impl, "CPU")
            _lib.impl(name, impl, "CUDA")
            torch.library.register_fake(self.qualname, fake, lib=_lib)
            if self.aliases:
                from .autograd import register_version_bump

                register_version_bump(self, _lib)
        _ops[name] = self

    def attach_backward(self, bwd: "KgenOp") -> None:
        from .autograd import direct_function, register

        if self.backward_op is None and self.qualname not in _autograd_done:
            register(self, bwd, _lib)
            _autograd_done.add(self.qualname)
        if not self.aliases:
            self._direct_fn = direct_function(self, bwd)
        self.backward_op = bwd
        _ops[bwd.opname] = bwd


def call_op(name: str, *args: Any, **kwargs: Any) -> Any:
    """The registered op kgen::<name> called as torch.ops calls it (keywords by schema name, the
    outputs the schema returns): through its KgenOp, which skips the dispatcher where it may
    (KgenOp._direct), or through torch.ops while torch.compile traces, so that dynamo records
    the op as one node instead of tracing kgen's Python."""
    op = _ops.get(name)
    if op is None or op.aliases or torch.compiler.is_compiling():
        return getattr(torch.ops.kgen, name)(*args, **kwargs)
    return op(*args, **kwargs)


# what decides whether a call may skip the dispatcher (KgenOp._direct)
_functorch_stack = torch._C._functorch.peek_interpreter_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_profiling = torch._C._autograd._profiler_enabled
_jit_tracing = torch._C._is_tracing


def _op_defined(name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"kgen::{name}", "")
        return True
    except RuntimeError:
        return False


def _forbid_backward(op: KgenOp) -> None:
    from .autograd import register_no_backward

    if op.qualname not in _autograd_done:
        register_no_backward(op, _lib)
        _autograd_done.add(op.qualname)


def load(path: str | Path, *, target: str | None = None, emulate: bool = False) -> KgenOp:
    """The op of a spec file (and of its backward spec, for autograd), ready to call. With
    emulate=True it runs `target`'s kernels (gfx942, gfx90a) in emulation on CPU tensors."""
    ls = load_spec(path)
    emulated = None
    if emulate or target is not None:
        from ..backends import emulator

        if not emulate:
            raise LaunchError(f"load({str(path)!r}, target={target!r}) picks a target for emulation only; add emulate=True "
                              "(on a GPU the op runs the kernels of the GPU it is given)")
        if target is None:
            raise LaunchError("load(..., emulate=True) needs the target to emulate: target='gfx942' or 'gfx90a'")
        emulated = load_target(target)
        emulator(emulated)
    if ls.spec.autograd is None:
        op = KgenOp(ls, emulated=emulated)
        _forbid_backward(op)
    else:
        bwd_ls = backward_spec(ls)
        check_pairing(ls, bwd_ls)
        passed = {}
        for i, axis in enumerate(ls.spec.autograd.options):
            if axis not in bwd_ls.spec.variants or axis in ls.spec.variants:
                raise SpecError(f"autograd.options: '{axis}' must be a variant axis of {bwd_ls.path.name} and not of this spec; "
                                f"the backward's axes: {', '.join(bwd_ls.spec.variants) or 'none'}", ls.where("autograd", "options", i))
            passed[axis] = bwd_ls.spec.variants[axis]
        op = KgenOp(ls, passed, emulated)
        op.attach_backward(KgenOp(bwd_ls, emulated=emulated))
        _forbid_backward(op.backward_op)
    return op
