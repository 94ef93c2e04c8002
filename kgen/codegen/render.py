"""Render a compiled kernel's IR to HIP or CUDA source through the backend's templates."""
from __future__ import annotations

import hashlib
import itertools
from functools import lru_cache
from typing import Any

import jinja2

from .. import __version__
from ..backends import backend
from ..hw.descriptor import Target
from ..ir.core import Kernel, walk
from ..lang import resolve_dtype
from ..paths import templates_dir
from .coords import tensor_param
from .emit import HALF_TYPE, MAX_STRIDES_MACRO, VIEWS, Emitter, ctype, literal
from .tma import map_param, tensor_maps
from .wgmma import HALF_PTX

C_FUNCS = {"cdiv": "kg::cdiv", "min": "kg::min_", "max": "kg::max_"}  # a size expression's functions in C


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=False, lstrip_blocks=False, autoescape=False)
    env.globals["fail"] = _template_failure
    return env


def _template_failure(message: str) -> None:
    """Called by a template that meets a case it has no text for (an op without a macro)."""
    raise jinja2.TemplateRuntimeError(f"{message} (templates in {templates_dir()})")


def template_hash(backend_name: str) -> str:
    """Hash of every template file the backend uses (part of the cache key)."""
    h = hashlib.sha256()
    root = templates_dir()
    b = backend(backend_name)
    for rel in sorted([b.skeleton, "common/ops.j2", "common/unit.j2", *b.headers]):
        h.update(rel.encode())
        h.update((root / rel).read_bytes())
    return h.hexdigest()[:16]


def kernel_params(k: Kernel, variant: dict[str, Any], half: str | None = None) -> tuple[list[str], str]:
    """The C parameter list and the launcher's signature string ('p' pointer, 'l' int64,
    'i' int32, 'f' float, 'T' tensor map), in the order kgen.runtime passes arguments."""
    params, sig = [], ""
    # an output written over an input (alias:) and that input are one memory: neither pointer
    # may promise the compiler it is the only way to it (nor allow read-only-cache loads)
    aliases = {n: t.alias for n, t in k.tensors.items() if t.alias is not None}
    shared = set(aliases) | set(aliases.values())
    for name, t in k.tensors.items():
        ctype_ = ctype(resolve_dtype(t.dtype, variant), half)
        const = "const " if t.role == "input" else ""
        restrict = "" if name in shared else " __restrict__"
        params.append(f"{const}{ctype_}*{restrict} {tensor_param(name)}")
        sig += "p"
        strides = len(t.shape) - 1
        if 0 < strides <= MAX_STRIDES_MACRO:  # int64_t stride_<name>_0, ... (templates/common/kgen_tile.h)
            params.append(f"KG_STRIDES{strides}({name})")
        else:
            params += [f"int64_t stride_{name}_{d}" for d in range(strides)]
        sig += "l" * strides
    for s in k.sizes:
        params.append(f"int size_{s}")
        sig += "i"
    scalar_dtypes = {op.attrs["name"]: op.result.dtype for op in walk(k.body) if op.kind == "scalar_arg"}
    for s in k.scalars:
        ctype_, letter = {"int32": ("int", "i"), "int64": ("long long", "l")}.get(scalar_dtypes.get(s), ("float", "f"))
        params.append(f"{ctype_} scalar_{s}")
        sig += letter
    for i, (t, _) in enumerate(tensor_maps(k)):  # encoded by the launcher (kgen.codegen.tma)
        params.append(f"const __grid_constant__ kg::TensorMap {map_param(i, t)}")
        sig += "T"
    return params, sig


def tensor_dims(k: Kernel) -> dict[str, list[str]]:
    """Each tensor dim's extent as a C expression: a size argument or a constant."""
    out = {}
    for name, t in k.tensors.items():
        out[name] = [c_expr(d, k) for d in t.shape]
    return out


def _c_constant(value: object) -> str:
    """A variant value or tunable as a C literal: a bool axis counts as 0 or 1 in size expressions."""
    return str(int(value)) if isinstance(value, bool) else str(value)


def c_expr(text: str | int, k: Kernel) -> str:
    """A spec size expression as C: sizes become their arguments, constants their values."""
    import ast

    if isinstance(text, int):
        return str(text)
    tree = ast.parse(str(text), mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = f"size_{node.id}" if node.id in k.sizes else (C_FUNCS.get(node.id) or _c_constant(k.constants.get(node.id, node.id)))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
            node.op = ast.Div()  # sizes are non-negative: C's division is floor division
    return "(" + ast.unparse(tree) + ")"


# C++ keywords and the CUDA/HIP built-in variables; and the names the kernel skeletons and op
# macros declare themselves (templates/): a spec name among them is spelled with a suffix.
_CPP_WORDS = frozenset("""alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
decltype default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
threadIdx blockIdx blockDim gridDim warpSize int64_t uint32_t uint64_t NULL""".split())
_TEMPLATE_LOCALS = frozenset("e g i v ks lane warp rm rn smem kg kg_bars memo".split())
_ARG_PREFIXES = ("t_", "stride_", "size_", "scalar_", "map_", "kg_")


def _spellable(name: str) -> bool:
    """A spec name usable as it is: not a keyword or template local, no clash with the kernel's
    arguments (t_q, size_H, ...), the unnamed values (v12) or the macros' temporaries (a_, y0_)."""
    return (name.isidentifier() and name.isascii() and not name.startswith("_") and not name.endswith("_")
            and "__" not in name and name not in _CPP_WORDS and name not in _TEMPLATE_LOCALS
            and not name.startswith(_ARG_PREFIXES) and not (name[0] == "v" and name[1:].isdigit()))


def name_values(k: Kernel, half: str | None = None) -> None:
    """Number the kernel's values 0, 1, ... in program order and give each its C spelling: a
    constant its literal; a view (expand, trans) its operand's name; a value the spec named (an assignment's target, a loop's variable or
    carried value) that name, with _2, _3, ... for its later values; any other v<number>. The
    numbers the IR was built with depend on everything the process built before: renumbering
    makes the source a function of the kernel alone, so generated/ and the cache see the same
    text whichever process renders it."""
    counter = itertools.count()
    taken: set[str] = set()

    def spell(v, producer=None) -> None:
        v.id = next(counter)
        if producer is not None and producer.kind == "const":
            v.cname = literal(producer.attrs["value"], v.dtype, half)
            return
        if producer is not None and producer.kind in VIEWS:  # the same registers, read by the same name
            v.cname = producer.operands[0].cname
            return
        base = v.name if _spellable(v.name) else ""
        if not base:
            v.cname = f"v{v.id}"
            return
        cname, n = base, 1
        while cname in taken:
            n += 1
            cname = f"{base}_{n}"
        taken.add(cname)
        v.cname = cname

    def visit(block) -> None:
        for v in block.args:
            spell(v)
        for op in block.ops:
            for v in op.results:
                spell(v, op)
            if op.body is not None:
                visit(op.body)

    visit(k.body)


def render_kernel(k: Kernel, target: Target, *, spec_file: str, program_line: int | str, variant: dict[str, Any],
                  half: str | None = None) -> str:
    """The kernel's source: the IR as the passes left it, every choice already recorded in it.
    With `half`, the source is written for any 16-bit float type, spelled HALF_TYPE where the
    kernel's `half` values are (a body that render_unit's units include, one per type)."""
    name_values(k, half)
    params, _ = kernel_params(k, variant, half)
    emitter = Emitter(k, target, tensor_dims(k), spec_file, half)
    body = emitter.ops(k.body)
    return environment().get_template(backend(target.backend).skeleton).render(
        version=__version__, spec_file=spec_file, kernel=k.name, target=target.name,
        program_line=program_line, threads=(k.num_warps + k.producer_warps) * target.wave_size, params=params, body=body,
        shared_bytes=k.shared_bytes, helpers=[emitter.helpers[n] for n in sorted(emitter.helpers)],
        bulk_wait=any("bulk" in op.attrs for op in walk(k.body)),  # bulk reductions: waited for at the end
        tma_barriers=k.tma_barriers, tma_barrier_offset=k.tma_barrier_offset, coord_macros=emitter.macros(),
        release_barriers=k.release_barriers, release_arrivals=k.num_warps, blocks_per_sm=_blocks_per_sm(k),
        # a block barrier: every thread's, or with a producer warpgroup the computing warps' own
        block_sync=f"kg::sync_named(1, {k.num_warps * target.wave_size});" if k.producer_warps else "kg::sync();",
        half_type=HALF_TYPE if half else "")


def _blocks_per_sm(k: Kernel) -> int:
    """The least blocks per multiprocessor the compiler is to fit (its registers capped for them):
    those a producer's registers were planned for, or the spec's occupancy; 0 for neither."""
    planned = next((op.attrs["blocks_per_sm"] for op in walk(k.body) if op.kind == "producer"), 0)
    return max(planned, k.occupancy if k.occupancy > 1 else 0)


def render_unit(kernel: str, target: Target, *, spec_file: str, half: str, body_file: str) -> str:
    """The source compiled for one 16-bit float type of a body written for any (render_kernel
    with `half`): the type's names, then the body."""
    be = backend(target.backend)
    return environment().get_template("common/unit.j2").render(
        version=__version__, spec_file=spec_file, kernel=kernel, target=target.name, half=half,
        headers=[h.rsplit("/", 1)[-1] for h in be.headers],
        half_type=HALF_TYPE, half_ctype=ctype(half), half_ptx=dict(be.asm_type_names).get(half, ""),
        half_ptx_macro=HALF_PTX, body_file=body_file)
