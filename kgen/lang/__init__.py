"""The tile language front end: a spec's kernel, specialised for one variant, -> typed IR."""
from __future__ import annotations

from typing import Any

from ..errors import SpecError
from ..ir.core import Kernel
from ..spec.expr import eval_expr
from ..spec.load import LoadedSpec
from ..spec.model import IntRange, Offsets, Segments
from .parse import Hook, Origin, parse_program
from .terms import TensorRef

# a row buffer's slots: four slots of two 16384-wide bf16 rows fill 256 KB, more than a block's
# shared memory on sm_90 (227 KB) or gfx942 (64 KB)
ROW_LOAD_SLOTS_MAX = 4


def resolve_dtype(spec_dtype: str, variant: dict[str, Any]) -> str:
    return str(variant[spec_dtype[1:]]) if spec_dtype.startswith("$") else spec_dtype


def kernel_ir(ls: LoadedSpec, kernel_index: int | str, variant: dict[str, Any], tunables: dict[str, int]) -> Kernel:
    """Parse one kernel's tile program (by index, or by name) with the variant's values and the
    tunables bound."""
    spec = ls.spec
    if isinstance(kernel_index, str):
        kernel_index = [k.name for k in spec.kernels].index(kernel_index)
    ks = spec.kernels[kernel_index]
    constants = {**variant, **tunables}
    tensors = {}
    for name, t in spec.tensors.items():
        dims = tuple(d if isinstance(d, int) else constants.get(d) for d in t.shape)
        ordered = isinstance(t.domain, (Offsets, Segments)) or (isinstance(t.domain, IntRange) and t.domain.sorted)
        runs = ((t.domain.segments, tuple(str(d) for d in spec.tensors[t.domain.segments].shape))
                if isinstance(t.domain, Segments) else None)
        tensors[name] = TensorRef(name, dims, resolve_dtype(t.dtype, variant), writable=t.role != "input", ordered=ordered,
                                  runs=runs)
    line, col = ls.yaml.block_origin(("kernels", kernel_index, "program"))
    file = ls.where("kernels", kernel_index, "program").file  # the base's, for a program a spec extends
    body = parse_program(ks.program, Origin(file, line, col), constants=constants,
                         sizes=list(spec.sizes), scalars={n: p.dtype for n, p in spec.scalars.items()}, tensors=tensors,
                         hooks=hooks_of(ls))
    warps = ks.warps if isinstance(ks.warps, int) else constants.get(ks.warps)
    if not isinstance(warps, int) or warps <= 0 or warps & (warps - 1):
        raise SpecError(f"warps must be a power of two or a tunable's name, got {ks.warps!r}", ls.where("kernels", kernel_index, "warps"))
    bulk, specialize, row_loads, sums = (_per_variant(ls, kernel_index, field, constants) for field in
                                         ("bulk_reductions", "warp_specialize", "shared_row_loads", "shared_accumulators"))
    occupancy = _occupancy(ls, kernel_index, constants)
    prefetch = _prefetch_budget(ls, kernel_index, constants)
    slots = _evaluated(ls, kernel_index, "row_load_slots", constants, f"an integer from 2 to {ROW_LOAD_SLOTS_MAX}")
    if isinstance(slots, bool) or not isinstance(slots, int) or not 2 <= slots <= ROW_LOAD_SLOTS_MAX:
        raise SpecError(f"row_load_slots must be an integer from 2 to {ROW_LOAD_SLOTS_MAX} (slots of each buffer "
                        f"a row is copied into), got {slots!r}", ls.where("kernels", kernel_index, "row_load_slots"))
    return Kernel(name=f"{spec.name}_{ks.name}", body=body, tensors=dict(spec.tensors), sizes=list(spec.sizes),
                  scalars=list(spec.scalars), num_warps=warps, constants=constants, prefetch_loads=prefetch,
                  bulk_reductions=bulk, warp_specialize=specialize, shared_row_loads=row_loads, occupancy=occupancy,
                  shared_accumulators=bool(sums), row_load_slots=slots)


def hooks_of(ls: LoadedSpec) -> dict[str, Hook]:
    """The spec's hooks, each with the place of its body (in the file that gave it)."""
    out = {}
    for name, h in ls.spec.hooks.items():
        path = ("hooks", name, "body")
        loc = ls.where(*path)
        if path in ls.yaml.block_scalars:
            line, col = ls.yaml.block_origin(path)
        else:  # a one-line body: where its text starts (0-based column, as a block's indent)
            line, col = loc.line, loc.col - 1
        out[name] = Hook(tuple(h.args), h.body, Origin(loc.file, line, col))
    return out


def _occupancy(ls: LoadedSpec, kernel_index: int, constants: dict[str, Any]) -> int:
    """The programs per multiprocessor the kernel asks for, evaluated for this variant: a
    positive integer."""
    value = _evaluated(ls, kernel_index, "occupancy", constants, "a positive integer")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"occupancy must be a positive integer (programs a multiprocessor holds at once), "
                        f"got {value!r}", ls.where("kernels", kernel_index, "occupancy"))
    return value


def _per_variant(ls: LoadedSpec, kernel_index: int, field: str, constants: dict[str, Any]) -> bool | None:
    """A kernel's per-variant choice: true, false or an expression of the variant axes and
    tunables, evaluated for this variant; None where the spec leaves it to kgen."""
    value = _evaluated(ls, kernel_index, field, constants, "true, false")
    return None if value is None else bool(value)


def _prefetch_budget(ls: LoadedSpec, kernel_index: int, constants: dict[str, Any]) -> bool | int:
    """prefetch_loads for this variant: false (or 0), true, or a budget of 1 to 64 elements per
    thread; an expression (of a tunable, so that kgen tune times both) is evaluated first."""
    accepted = "true, false or an integer from 0 to 64"
    value = _evaluated(ls, kernel_index, "prefetch_loads", constants, accepted)
    if isinstance(value, bool):
        return value
    if not isinstance(value, int) or not 0 <= value <= 64:
        raise SpecError(f"prefetch_loads must be {accepted} (elements per thread one loop may prefetch), got "
                        f"{value!r} for {constants}", ls.where("kernels", kernel_index, "prefetch_loads"))
    return value if value else False


def _evaluated(ls: LoadedSpec, kernel_index: int, field: str, constants: dict[str, Any], accepted: str) -> Any:
    """A kernel field as given, or, given as an expression, its value for this variant's axes and
    tunables; an expression that cannot be evaluated is an error at the field's place."""
    value = getattr(ls.spec.kernels[kernel_index], field)
    if not isinstance(value, str):
        return value
    try:
        return eval_expr(value, constants)
    except Exception as e:  # an unknown name or a malformed expression
        raise SpecError(f"{field} must be {accepted} or an expression of the variant axes and tunables; "
                        f"'{value}' could not be evaluated ({e})", ls.where("kernels", kernel_index, field)) from None
