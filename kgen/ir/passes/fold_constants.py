"""Fold the integer scalar arithmetic whose result is known, read each launch value once, and
drop pure ops nothing reads.

Specialisation leaves arithmetic on constants behind: a variant's tunable of 1 makes
`floordiv(pid, 1)` and `mod(pid, 1)`, a pipeline's first slot `0 % 2`, a prologue's `0 < 4`. An
int32 or bool scalar op whose operands are constants becomes a constant; `x + 0`, `x - 0`,
`x * 1` and `floordiv(x, 1)` become x; `x * 0` and `mod(x, 1)` become 0. A size, scalar argument
or program id the spec reads twice is read once. Then any op without
effects whose results nobody reads (a size read only by what was folded, a program id) is
removed. Integer arithmetic is exact and kg::floordiv / kg::mod round toward negative infinity
(templates/common/kgen_tile.h), as Python's // and % do, so the folded value is the one the
kernel would compute. Runs after every pass that decides something, so the decisions see the
program as written; what it changes is only how the source spells the same values (the
compiler folds these too).
"""
from __future__ import annotations

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..analysis import producers
from ..core import Block, Kernel, Op, Value, rename_operands, use_counts

INT32 = (-(2 ** 31), 2 ** 31 - 1)
_EXACT = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "floordiv": lambda a, b: a // b if b else None, "mod": lambda a, b: a % b if b else None,
          "max": max, "min": min, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
          "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}
# ops with no effect but their results: removable when nothing reads them
PURE = ("const", "size", "scalar_arg", "program_id", "unary", "binary", "where", "cast", "expand", "broadcast",
        "full", "arange", "trans")


def fold_constants(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    renamed = _repeated_reads(k.body)
    _fold_block(k.body, producers(k.body), renamed)
    for op in k.body.ops:
        rename_operands(op, renamed)
    _drop_unread(k.body)
    return k


def _repeated_reads(block: Block) -> dict[int, Value]:
    """A size, scalar argument or program id read again in the kernel's outer block: the later
    reads renamed to the first (they read the same launch-wide value)."""
    first: dict[tuple, Value] = {}
    renamed: dict[int, Value] = {}
    for op in block.ops:
        if op.kind in ("size", "scalar_arg", "program_id"):
            key = (op.kind, tuple(sorted(op.attrs.items())))
            if key in first:
                renamed[id(op.result)] = first[key]
            else:
                first[key] = op.result
    return renamed


def _const_value(v: Value, made_by: dict[int, Op]):
    p = made_by.get(id(v))
    return p.attrs["value"] if p is not None and p.kind == "const" and v.dtype in ("int32", "bool") else None


def _fold_block(block: Block, made_by: dict[int, Op], renamed: dict[int, Value]) -> None:
    for i, op in enumerate(block.ops):
        if op.body is not None:
            _fold_block(op.body, made_by, renamed)
            continue
        if op.kind != "binary" or not op.result.is_scalar or op.result.dtype not in ("int32", "bool"):
            continue
        a, b = (renamed.get(id(v), v) for v in op.operands)
        if a.dtype != "int32" or b.dtype != "int32":
            continue
        fn, x, y = op.attrs["fn"], _const_value(a, made_by), _const_value(b, made_by)
        value, keep = None, None
        if x is not None and y is not None:
            value = _EXACT[fn](int(x), int(y)) if fn in _EXACT else None
        elif (fn == "mul" and 0 in (x, y)) or (fn == "mod" and y == 1):
            value = 0
        elif (fn in ("add", "sub") and y == 0) or (fn in ("mul", "floordiv") and y == 1):
            keep = a
        elif (fn == "add" and x == 0) or (fn == "mul" and x == 1):
            keep = b
        if keep is not None:
            renamed[id(op.result)] = keep
            continue
        if value is None or (op.result.dtype == "int32" and not INT32[0] <= value <= INT32[1]):
            continue
        value = bool(value) if op.result.dtype == "bool" else int(value)
        block.ops[i] = Op("const", [], op.results, {"value": value}, loc=op.loc)
        made_by[id(op.result)] = block.ops[i]


def _drop_unread(block: Block) -> None:
    """Remove pure ops whose results nothing reads, until none is left (a removal can leave its
    operands' producers unread)."""
    while True:
        uses = use_counts(block)
        removed = _drop_in(block, uses)
        if not removed:
            return


def _drop_in(block: Block, uses: dict[int, int]) -> bool:
    kept, removed = [], False
    for op in block.ops:
        if op.body is not None:
            removed |= _drop_in(op.body, uses)
        if op.kind in PURE and op.body is None and not any(uses.get(id(r), 0) for r in op.results):
            removed = True
            continue
        kept.append(op)
    block.ops[:] = kept
    return removed
