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
from typing import Any, NamedTuple

import torch

from ..errors import LaunchError, SpecError, TargetError
from ..hw.descriptor import Target, load_target
from ..knobs import call_knobs, knobs
from ..lang import kernel_ir, resolve_dtype
from ..spec.expr import eval_expr
from ..spec.load import LoadedSpec, backward_spec, load_spec
from ..spec.pairing import check_pairing
from .binding import TORCH, axis_from_shape, bind, check_aliased, check_option, choose_variant, dtype_axes, output_shape

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


class _Plan(NamedTuple):
    """What a GPU call needs besides pointers and scalars: kernels with their grids, outputs
    (name, shape, dtype, zero-filled) and the sizes by name."""
    kernels: tuple
    outputs: tuple
    sizes: dict
    mapped: tuple = ()  # inputs some kernel reads through a tensor map (tensor copies)


class KgenOp:
    def __init__(self, ls: LoadedSpec, passed: dict[str, list[Any]] | None = None, emulated: Target | None = None):
        self.ls, self.spec = ls, ls.spec
        self.emulated = emulated  # the target whose kernels run in emulation on CPU tensors, or None
        self.opname = ls.spec.name + (f"_emulated_{emulated.name}" if emulated else "")
        self._emulated_builds: dict[str, Any] = {}
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
        self._plans: dict[tuple, _Plan] = {}
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
        out = getattr(torch.ops.kgen, self.opname)(*positional)
        if not self.aliases:
            return out
        return self.all_outputs(positional, out if len(self.returned) != 1 else (out,))

    def all_outputs(self, args, returned) -> Any:
        """Every output in declaration order from the op's arguments and the outputs its schema
        returns: an aliased output is the input tensor it was written over."""
        it = iter(returned or ())
        outs = tuple(args[self.inputs.index(self.aliases[n])] if n in self.aliases else next(it) for n in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def _positional(self, args, kwargs) -> list[Any]:
        names = self.inputs + list(self.spec.scalars) + self.options + list(self.passed)
        if len(args) > len(names):
            raise LaunchError(f"{self.spec.name}() takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise LaunchError(f"{self.spec.name}() got an unknown argument '{k}'; accepted: {', '.join(names)}")
            bound[k] = v
        out = []
        for n in names:
            values = self.spec.variants.get(n) or self.passed.get(n)
            if n in bound and values is not None:
                check_option(self.spec.name, n, bound[n], values)  # here: the schema would turn 1 into True
            if n in bound and n in self.spec.scalars:
                try:  # here: the schema's int or float would turn it into its own error
                    out.append(self.spec.scalars[n].value(bound[n]))
                except ValueError as e:
                    raise LaunchError(f"{self.spec.name}: scalar '{n}' {e}") from None
            elif n in bound:
                out.append(bound[n])
            elif n in self.spec.scalars and self.spec.scalars[n].default is not None:
                out.append(self.spec.scalars[n].default)
            elif n in self.options:  # an axis that sizes an input is read off its shape
                out.append(axis_from_shape(self.spec, bound, n, self.spec.variants[n][0]))
            elif n in self.passed:
                out.append(self.passed[n][0])
            else:
                raise LaunchError(f"{self.spec.name}() is missing the argument '{n}'")
        return out

    def run(self, *args: Any) -> tuple[torch.Tensor, ...]:
        tensors = dict(zip(self.inputs, args))
        scalars = dict(zip(self.spec.scalars, args[len(self.inputs):]))
        n_fixed = len(self.inputs) + len(self.spec.scalars)
        options = dict(zip(self.options, args[n_fixed:n_fixed + len(self.options)]))
        for axis, value in zip(self.passed, args[n_fixed + len(self.options):]):
            check_option(self.spec.name, axis, value, self.passed[axis])
        device = next(iter(tensors.values())).device
        kn = call_knobs()
        if self.emulated is not None and device.type != "cpu":
            raise LaunchError(f"{self.opname} runs {self.emulated.name}'s kernels in emulation on the CPU; "
                              f"pass CPU tensors, got them on {device}")
        if device.type == "cpu":
            return self._run_on_cpu(tensors, scalars, options, device, kn.poison)
        # Everything but the pointers and scalars follows from the inputs' shapes, strides,
        # dtypes and device and the options: the checks, the variant, the loaded kernels, the
        # grids and the output shapes are worked out once per such key (host time per call was
        # hundreds of microseconds, as long as the kernels at small sizes).
        key = (tuple((tuple(t.shape), t.stride(), t.dtype, t.device) if isinstance(t, torch.Tensor) else None
                     for t in tensors.values()), tuple(options.items()), kn.target)
        plan = self._plans.get(key)
        if self.aliases:  # addresses are not in the key
            check_aliased(self.ls, tensors)
        if plan is None:
            plan = self._plan(tensors, options, device)
            if len(self._plans) >= 256:
                self._plans.clear()
            self._plans[key] = plan
        all_t = self._allocate(tensors, plan.outputs, device, kn.poison)
        stream = _current_stream(device)
        for name in plan.mapped:
            all_t[name] = _tensor_map_ready(all_t[name])
        # each tensor's pointer and strides, and each (tensor, box)'s map, once per call whichever
        # kernels take them; each kernel takes the arguments it reads (ir/passes/arguments.py)
        pointers = {name: (x.data_ptr(), *x.stride()[:-1]) for name, x in all_t.items()}
        maps: dict[tuple, bytes] = {}
        for rk, grid in plan.kernels:
            args: list[Any] = [a for name in rk.tensors for a in pointers[name]]
            args.extend(plan.sizes[s] for s in rk.sizes)
            args.extend(self.spec.scalars[s].value(scalars[s]) for s in rk.scalars)
            for key in rk.tensor_maps:
                if key not in maps:
                    maps[key] = _tensor_map(all_t[key[0]], key[1])
                args.append(maps[key])
            rk.kernel(grid, (rk.threads, 1, 1), rk.shared_bytes, stream, rk.signature, args)
        return tuple(all_t[n] for n in self.outputs)

    def _plan(self, tensors, options, device) -> "_Plan":
        from .compiled import compiled_variant
        from .tuning import preferred

        variant = choose_variant(self.ls, tensors, options)
        sizes = bind(self.ls, tensors, variant, device)
        target = device_target(device)
        first = self._forced or preferred(self.ls, variant, target, {s: sizes[s] for s in self.spec.sizes if s in sizes})
        kernels, tunables = compiled_variant(self.ls, variant, target, first)
        self.last_tunables = tunables
        env = {**variant, **sizes, **tunables}
        grids = tuple((rk, tuple(eval_expr(g, env) for g in rk.grid) + (1,) * (3 - len(rk.grid))) for rk in kernels)
        mapped = tuple(sorted({t for rk in kernels for t, _ in rk.tensor_maps if t in self.inputs}))
        return _Plan(grids, self._output_specs(variant, env), {s: sizes[s] for s in self.spec.sizes}, mapped)

    def _output_specs(self, variant, env) -> tuple[tuple[str, list[int], torch.dtype, bool], ...]:
        """The outputs and scratch tensors a call allocates (not those written over an input)."""
        return tuple((name, [eval_expr(d, env) for d in output_shape(self.ls, name, env)],
                      TORCH[resolve_dtype(t.dtype, variant)], t.init == "zeros")
                     for name, t in self.spec.tensors.items() if t.role != "input" and name not in self.aliases)

    def _allocate(self, tensors, specs, device, poison: bool) -> dict[str, torch.Tensor]:
        """The inputs, each allocated output and scratch tensor (NaN with KGEN_POISON), and each
        aliased output as the very input it is written over: never poisoned, it holds the input."""
        all_t = dict(tensors)
        for name, shape, dt, zeros in specs:
            if zeros:
                all_t[name] = torch.zeros(shape, dtype=dt, device=device)
            elif poison and dt.is_floating_point:
                all_t[name] = torch.full(shape, float("nan"), dtype=dt, device=device)
            else:
                all_t[name] = torch.empty(shape, dtype=dt, device=device)
        for out, src in self.aliases.items():
            all_t[out] = tensors[src]
        return all_t

    def _run_on_cpu(self, tensors, scalars, options, device, poison) -> tuple[torch.Tensor, ...]:
        from ..build import tunable_candidates

        variant = choose_variant(self.ls, tensors, options)
        sizes = bind(self.ls, tensors, variant, device)
        if self.emulated is not None:
            built = self._emulated_build(variant)
            tunables = built.tunables
        else:  # the interpreter runs any candidate: the forced one (kgen tune), else the first
            tunables = self._forced if self._forced in tunable_candidates(self.ls, variant) else tunable_candidates(self.ls, variant)[0]
        self.last_tunables = tunables
        env = {**variant, **sizes, **tunables}
        all_t = self._allocate(tensors, self._output_specs(variant, env), device, poison)
        if self.emulated is not None:
            self._run_emulated(built.kernels, all_t, sizes, scalars, env)
        else:
            self._run_cpu(all_t, sizes, scalars, variant, tunables, env)
        return tuple(all_t[n] for n in self.outputs)

    def _emulated_build(self, variant):
        """The variant's kernels as `kgen build` writes them for the emulated target."""
        from ..build import build_variant
        from ..spec.load import variant_id

        key = variant_id(variant)
        if key not in self._emulated_builds:
            self._emulated_builds[key] = build_variant(self.ls, variant, self.emulated, compile=False)
        return self._emulated_builds[key]

    def _run_emulated(self, kernels, tensors, sizes, scalars, env) -> None:
        from ..backends import emulator

        run = emulator(self.emulated)
        for ks, bk in zip(self.spec.kernels, kernels):
            run(bk, tuple(int(eval_expr(g, env)) for g in ks.grid), tensors, sizes, {k: float(v) for k, v in scalars.items()})

    def _run_cpu(self, tensors, sizes, scalars, variant, tunables, env) -> None:
        from ..ir.interp import run_kernel

        for i, ks in enumerate(self.spec.kernels):
            k = kernel_ir(self.ls, i, variant, tunables)
            run_kernel(k, tuple(eval_expr(g, env) for g in ks.grid), tensors, sizes, scalars)

    # --- torch.library ---------------------------------------------------------------------------
    def _schema(self) -> str:
        # an input an output is written over is mutated: Tensor(a!), one alias set per input
        letters = iter("abcdefghijklmnopqrstuvwxyz")
        over = set(self.aliases.values())
        params = [f"Tensor({next(letters)}!) {n}" if n in over else f"Tensor {n}" for n in self.inputs]
        params += [f"{'int' if p.dtype == 'int32' else 'float'} {n}" for n, p in self.spec.scalars.items()]
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
                # the CPU interpreter computes with torch ops: without no_grad they would record a
                # graph onto the outputs (differentiating the interpreter, not the op)
                with torch.no_grad():
                    outs = _ops[name].run(*args)
                return returned(_ops[name], outs)

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
        from .autograd import register

        if self.backward_op is None and self.qualname not in _autograd_done:
            register(self, bwd, _lib)
            _autograd_done.add(self.qualname)
        self.backward_op = bwd
        _ops[bwd.opname] = bwd


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # absent from CPU-only builds


def _current_stream(device: torch.device) -> int:
    """The handle of the device's current stream: torch's raw getter where it has one (what Triton's
    launcher calls), as torch.cuda.current_stream() builds a Stream object per call, about a
    tenth of an op call's host time on the H200 (cProfile, docs/PERFORMANCE.md)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _RAW_STREAM(index) if _RAW_STREAM is not None else torch.cuda.current_stream(index).cuda_stream


def _tensor_map_ready(x: torch.Tensor) -> torch.Tensor:
    """`x`, or a contiguous copy of it where a tensor map could not describe it: the copy engine
    needs a 16-byte aligned address and byte strides that are multiples of 16 (CUDA driver API,
    cuTensorMapEncodeTiled), and kgen asks for strides that shrink towards the last dim. Outputs
    and scratch are allocated contiguous, and kernels copy only tiles that span the (static) last
    dim, so a copy always qualifies."""
    e = x.element_size()
    strides = x.stride()[:-1]
    if (x.data_ptr() % 16 == 0 and all(s * e % 16 == 0 for s in strides)
            and all(a >= b for a, b in zip(strides, strides[1:]))):
        return x
    return torch.empty_like(x, memory_format=torch.contiguous_format).copy_(x)


def _tensor_map(x: torch.Tensor, box: tuple[int, ...]) -> bytes:
    """The 'T' argument of a kernel's tensor copies of `x` (kgen.codegen.tma): dims and byte
    strides innermost first."""
    from .launcher import get_launcher

    e = x.element_size()
    return get_launcher().encode_tensor_map(x.data_ptr(), e, list(reversed(x.shape)),
                                            [s * e for s in reversed(x.stride()[:-1])], list(box))


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
