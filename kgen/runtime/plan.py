"""A GPU call's plan, and its launch: everything but the addresses and scalars, worked out once.

A GPU call of an op depends on the inputs' shapes, strides, dtypes and device and on the options
for everything but the tensors' addresses and the scalars' values: the checks, the variant, the
loaded kernels, their grids, the outputs' shapes and each kernel's argument list. `make_plan`
works those out once per such key; `launch` then allocates the outputs, writes the addresses
(and scalars) into each kernel's argument template and launches. The host time of a call bounds
the op wherever its kernels are shorter than it (docs/PERFORMANCE.md, "where a call's time
goes"), so `launch` does no lookups by name.

A launch that writes only scratch, which no other kernel writes, from inputs alone (a block
table: specs/fa2_fwd.yaml's kernel blocks) is kept: its scratch is reused, and the launch
skipped, while the same input tensors come back unchanged (the same objects at the same
version, as torch counts in-place writes) with the same scalars, as FlexAttention's block mask
is made once and reused. Not while a CUDA graph is being captured, whose replays may see other
values at the same addresses.
"""
from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import torch

from ..lang import resolve_dtype
from ..spec.expr import eval_expr
from .binding import TORCH, bind, choose_variant, output_shape

# torch's getter of a device's current stream handle (what Triton's launcher calls);
# torch.cuda.current_stream() builds a Stream object per call. Absent from CPU-only builds.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


class Launch(NamedTuple):
    """One kernel's launch: its argument list with every address left as a hole.

    `holes`: (position, tensor index, which) to fill per call, which = -1 for the address, k for
    the tensor's k-th stride (only tensors whose strides may change per call: a tensor-copy
    input may be replaced by a contiguous copy); `scalar_holes`: (position, scalar index, int or
    float); `map_holes`: (position, tensor index, box) for tensor maps."""
    kernel: Any
    grid: tuple[int, int, int]
    threads: int
    shared_bytes: int
    signature: str
    template: tuple
    holes: tuple[tuple[int, int, int], ...]
    scalar_holes: tuple[tuple[int, int, type], ...]
    map_holes: tuple[tuple[int, int, tuple[int, ...]], ...]


class Kept(NamedTuple):
    """A launch whose scratch is reused between calls (the module's docstring): `launch` its
    index, `reads` the input indices it takes, `scalars` the scalar indices, `writes` the
    indices of its scratch in the call's tensor list."""
    launch: int
    reads: tuple[int, ...]
    scalars: tuple[int, ...]
    writes: tuple[int, ...]


class Plan(NamedTuple):
    """`outputs`: (shape, dtype, zero-filled) of each tensor a call allocates, which come after
    the inputs in the call's tensor list; `aliased`: the input index of each output written over
    an input, in the same order after them; `returned`: the tensor-list index of each of the op's
    outputs in declaration order; `mapped`: indices of inputs read through tensor maps."""
    launches: tuple[Launch, ...]
    outputs: tuple[tuple[list[int], torch.dtype, bool], ...]
    aliased: tuple[int, ...]
    returned: tuple[int, ...]
    mapped: tuple[int, ...]
    tunables: dict
    kept: tuple[Kept, ...] = ()
    memo: dict | None = None  # launch index -> (stream, what it read, its scratch): the last call's


def make_plan(op, tensors: dict[str, torch.Tensor], options: dict[str, Any], device: torch.device, target, first) -> Plan:
    """The plan of a call of `op` (a KgenOp) on these inputs. `first`: the tunables to try first
    (a forced candidate), else the tuning database's choice."""
    from .compiled import compiled_variant
    from .tuning import preferred

    ls, spec = op.ls, op.spec
    variant = choose_variant(ls, tensors, options)
    sizes = bind(ls, tensors, variant, device)
    first = first or preferred(ls, variant, target, {s: sizes[s] for s in spec.sizes if s in sizes})
    kernels, tunables = compiled_variant(ls, variant, target, first)
    env = {**variant, **sizes, **tunables}
    # an empty kernel, or one whose grid has no programs (a size expression of 0: ssd_bwd's
    # `gate` when ungated), is not launched
    kernels = tuple(rk for rk in kernels if rk.kernel is not None and all(int(eval_expr(g, env)) > 0 for g in rk.grid))

    # scratch no launched kernel takes (a block table the analysis made needless) is not allocated
    taken = {t for rk in kernels for t in rk.tensors}
    specs = tuple(s for s in allocated(op, variant, env) if s[0] in taken or spec.tensors[s[0]].role == "output")
    order = list(op.inputs) + [n for n, *_ in specs] + list(op.aliases)
    index = {n: i for i, n in enumerate(order)}
    outputs = tuple((shape, dt, zeros) for _, shape, dt, zeros in specs)
    mapped = tuple(sorted({op.inputs.index(t) for rk in kernels for t, _ in rk.tensor_maps if t in op.inputs}))
    # the strides of every tensor but a mapped input are fixed by the key (inputs) or the plan
    # (outputs are allocated contiguous; an aliased output is its input)
    strides: dict[str, tuple[int, ...]] = {n: tuple(tensors[n].stride()) for n in op.inputs}
    for n, shape, _, _ in specs:
        strides[n] = _contiguous_strides(shape)
    for out, src in op.aliases.items():
        strides[out] = strides[src]
    scalar_names = list(spec.scalars)

    launches = []
    for rk in kernels:
        template: list[Any] = []
        holes, scalar_holes, map_holes = [], [], []
        for name in rk.tensors:
            ti = index[name]
            holes.append((len(template), ti, -1))
            template.append(0)
            for k, s in enumerate(strides[name][:-1]):
                if ti in mapped:
                    holes.append((len(template), ti, k))
                template.append(s)
        template.extend(sizes[s] for s in rk.sizes)
        for s in rk.scalars:
            scalar_holes.append((len(template), scalar_names.index(s), int if spec.scalars[s].dtype != "fp32" else float))
            template.append(0)
        for t, box in rk.tensor_maps:
            map_holes.append((len(template), index[t], box))
            template.append(b"")
        grid = tuple(int(eval_expr(g, env)) for g in rk.grid) + (1,) * (3 - len(rk.grid))
        launches.append(Launch(rk.kernel, grid, rk.threads, rk.shared_bytes, rk.signature, tuple(template),
                               tuple(holes), tuple(scalar_holes), tuple(map_holes)))
    return Plan(tuple(launches), outputs, tuple(op.inputs.index(src) for src in op.aliases.values()),
                tuple(index[n] for n in op.outputs), mapped, tunables, _kept(op, kernels, index, scalar_names), {})


def _kept(op, kernels, index: dict[str, int], scalar_names: list[str]) -> tuple[Kept, ...]:
    """The launches whose scratch can be reused between calls: each writes scratch tensors
    (not zero-filled: nothing accumulates into them) that no other kernel writes, and takes no
    tensor but those and inputs."""
    spec, out = op.spec, []
    for i, rk in enumerate(kernels):
        written = set(rk.writes)
        others = {t for j, other in enumerate(kernels) if j != i for t in other.writes}
        if not written or written & others or any(spec.tensors[t].role != "scratch" or spec.tensors[t].init == "zeros"
                                                  for t in written):
            continue
        if any(t not in written and t not in op.inputs for t in rk.tensors) or set(op.aliases.values()) & set(rk.tensors):
            continue
        out.append(Kept(i, tuple(index[t] for t in rk.tensors if t in op.inputs), tuple(scalar_names.index(s) for s in rk.scalars),
                        tuple(index[t] for t in rk.tensors if t in written)))
    return tuple(out)


def launch(plan: Plan, inputs: tuple, scalars: tuple, device: torch.device, poison: bool) -> list[torch.Tensor]:
    """Allocate the outputs, launch the plan's kernels on the device's current stream; the call's
    tensors in plan order (inputs, allocated outputs, aliased outputs)."""
    all_t = list(inputs)
    for i in plan.mapped:
        all_t[i] = _tensor_map_ready(all_t[i])
    stream = current_stream(device)
    skipped, reused = _reusable(plan, inputs, scalars, stream) if plan.kept else ((), {})
    base = len(all_t)
    all_t.extend(reused.get(base + i) if base + i in reused else new_tensor(shape, dt, zeros, poison, device)
                 for i, (shape, dt, zeros) in enumerate(plan.outputs))
    for i in plan.aliased:
        all_t.append(inputs[i])
    maps: dict[tuple, bytes] = {}
    for li, ln in enumerate(plan.launches):
        if li in skipped:
            continue
        args = list(ln.template)
        for pos, ti, k in ln.holes:
            t = all_t[ti]
            args[pos] = t.data_ptr() if k < 0 else t.stride(k)
        for pos, si, conv in ln.scalar_holes:
            args[pos] = conv(scalars[si])
        for pos, ti, box in ln.map_holes:
            key = (ti, box)
            if key not in maps:
                maps[key] = _tensor_map(all_t[ti], box)
            args[pos] = maps[key]
        ln.kernel(ln.grid, (ln.threads, 1, 1), ln.shared_bytes, stream, ln.signature, args)
    if plan.kept and not _capturing():
        for kp in plan.kept:
            if kp.launch not in skipped:
                plan.memo[kp.launch] = (stream, tuple((weakref.ref(inputs[i]), inputs[i]._version) for i in kp.reads),
                                        tuple(scalars[s] for s in kp.scalars), tuple(all_t[t] for t in kp.writes))
    return all_t


def _reusable(plan: Plan, inputs: tuple, scalars: tuple, stream: int) -> tuple[set[int], dict[int, torch.Tensor]]:
    """The kept launches this call can skip, and the scratch they leave (by tensor index): those
    whose inputs are the last call's objects at the same version, with the same scalars, on the
    same stream (another stream would not wait for the kernel that wrote the scratch)."""
    skipped: set[int] = set()
    reused: dict[int, torch.Tensor] = {}
    if _capturing():
        return skipped, reused
    for kp in plan.kept:
        hit = plan.memo.get(kp.launch)
        if hit is None:
            continue
        on, reads, values, kept = hit
        if (on == stream and all(ref() is inputs[i] and version == inputs[i]._version for (ref, version), i in zip(reads, kp.reads))
                and values == tuple(scalars[s] for s in kp.scalars)):
            skipped.add(kp.launch)
            reused.update(zip(kp.writes, kept))
    return skipped, reused

def allocated(op, variant: dict[str, Any], env: dict[str, Any]) -> tuple[tuple[str, list[int], torch.dtype, bool], ...]:
    """(name, shape, dtype, zero-filled) of each output and scratch tensor a call of `op`
    allocates (not those written over an input), in declaration order."""
    spec = op.spec
    return tuple((name, [eval_expr(d, env) for d in output_shape(op.ls, name, env)], TORCH[resolve_dtype(t.dtype, variant)],
                  t.init == "zeros") for name, t in spec.tensors.items() if t.role != "input" and name not in op.aliases)


def new_tensor(shape: list[int], dtype: torch.dtype, zeros: bool, poison: bool, device: torch.device) -> torch.Tensor:
    """An output or scratch tensor: zero-filled where the spec says so, else NaN with
    KGEN_POISON (floating dtypes), else uninitialised."""
    if zeros:
        return torch.zeros(shape, dtype=dtype, device=device)
    if poison and dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _capturing() -> bool:
    """Whether the current stream is capturing a CUDA graph (never, in a CPU-only build of torch,
    whose stand-in raises)."""
    try:
        return torch.cuda.is_current_stream_capturing()
    except RuntimeError:
        return False


def current_stream(device: torch.device) -> int:
    """The handle of the device's current stream: torch.cuda.current_stream() builds a Stream
    object per call, about a tenth of an op call's host time on the H200 (cProfile,
    docs/PERFORMANCE.md)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _RAW_STREAM(index) if _RAW_STREAM is not None else torch.cuda.current_stream(index).cuda_stream


def _contiguous_strides(shape: list[int]) -> tuple[int, ...]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= max(d, 1)
    return tuple(reversed(out))


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
