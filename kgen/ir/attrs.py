"""The attributes each op kind may carry: name, type, and the value an absent optional one has.

An op's attributes are a dict (`Op.attrs`) so that a pass can record a decision with one
assignment, but what may be in it is fixed here: the verifier (kgen/ir/verify.py) rejects an
attribute its kind does not declare, one of the wrong type or outside its choices, and a
required one that is missing (one a pass decides, `by`, once that pass has run; a buffer's
offset once plan_shared_memory has placed it). Code that reads an optional attribute reads it
through `attr(op, name)`, so its default is written once, here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REQUIRED = object()  # the default of an attribute every op of its kind has
NUMBER = (int, float)  # bool is an int in Python: a literal of any dtype


@dataclass(frozen=True)
class Attr:
    types: tuple[type, ...]
    default: Any = REQUIRED
    choices: tuple = ()  # the values allowed, when the type alone says too little
    by: str | None = None  # the pass that decides it (kgen/ir/pipeline.py): required once it ran

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


_FN_UNARY = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "neg", "not", "sigmoid", "tanh", "erf", "sin", "cos",
             "floor", "ceil")
_FN_BINARY = ("add", "sub", "mul", "div", "floordiv", "mod", "max", "min", "lt", "le", "gt", "ge", "eq", "ne",
              "and", "or", "pow", "rand", "rand8")
# staged rows padded by 16 bytes, core matrices, 128-byte swizzle; a sum kept by thread and register
# (passes/shared_sums.py)
_LAYOUTS = ("rows", "cores", "sw128", "threads")
# how a dot reads an operand (passes/operands.py): from its registers, by fragment loads from a
# staged buffer (transposing or not), by vector reads of one, or by a matrix descriptor (wgmma)
_LOADS = ("reg", "matrix", "matrix_trans", "vec", "desc")
_TILING, _OPERANDS = "choose_dot_tiling", "place_dot_operands"
_INDEX = Attr((tuple,))  # ("at", operand) | ("block", operand, size) | ("all", size) per tensor dim
# a buffer in shared memory (passes/operands.py stages, passes/async_copy.py allocates)
_BUFFER = {"role": Attr((str,)), "inner": Attr((int,)), "rows": Attr((int,)), "ld": Attr((int,)),
           "bytes": Attr((int,)), "smem_offset": Attr((int,), None), "smem_layout": Attr((str,), "rows", _LAYOUTS),
           # the slots a loop's pipelined copy into it is to have where they fit (passes/row_loads.py,
           # a kernel's row_load_slots); None: async_copy.SLOTS
           "slots_asked": Attr((int,), None)}

SCHEMA: dict[str, dict[str, Attr]] = {
    "const": {"value": Attr(NUMBER)},
    "size": {"name": Attr((str,))},
    "scalar_arg": {"name": Attr((str,))},
    "program_id": {"axis": Attr((int,), choices=(0, 1, 2))},
    "arange": {"n": Attr((int,))},
    "full": {"shape": Attr((tuple,)), "value": Attr(NUMBER), "unwritten": Attr((bool,), False)},
    "unary": {"fn": Attr((str,), choices=_FN_UNARY)},
    "binary": {"fn": Attr((str,), choices=_FN_BINARY)},
    "where": {},
    "cast": {"dtype": Attr((str,))},
    "expand": {"axis": Attr((int,))},
    "broadcast": {"shape": Attr((tuple,))},
    "trans": {},
    "reduce": {"fn": Attr((str,), choices=("sum", "max", "min")), "axis": Attr((int,)),
               "smem_offset": Attr((int,), None), "sync_before": Attr((bool,), True),
               # a sum across warps that shares the next one's barrier (passes/sum_groups.py)
               "joins_next": Attr((bool,), False)},
    "scan": {"fn": Attr((str,), choices=("sum",)), "axis": Attr((int,)), "smem_offset": Attr((int,), None)},
    "cdiv": {},
    "dot": {"instr": Attr((str,), by=_TILING), "warps_m": Attr((int,), by=_TILING), "warps_n": Attr((int,), by=_TILING),
            "reps_m": Attr((int,), by=_TILING), "reps_n": Attr((int,), by=_TILING),
            # each warpgroup issues it in a branch of its own, its index a constant (CompileOptions.constant_groups)
            "group_branches": Attr((bool,), False),
            "a_load": Attr((str,), choices=_LOADS, by=_OPERANDS), "b_load": Attr((str,), choices=_LOADS, by=_OPERANDS),
            "a_major": Attr((str,), None, ("k", "mn")), "b_major": Attr((str,), None, ("k", "mn")),
            "deferred": Attr((bool,), False), "zero_start": Attr((bool,), False),
            # its start is computed before the asynchronous dot issued ahead of it (passes/dot_issue.py)
            "early_start": Attr((bool,), False)},
    "dot_wait": {"pending": Attr((int,))},
    "load": {"tensor": Attr((str,)), "index": _INDEX, "other": Attr(NUMBER, 0), "pred": Attr((bool,), False)},
    "store": {"tensor": Attr((str,)), "index": _INDEX},
    "gather": {"tensor": Attr((str,)), "index": _INDEX, "other": Attr(NUMBER, 0)},
    "scatter": {"tensor": Attr((str,)), "index": _INDEX, "atomic": Attr((bool,), False)},
    "atomic_add": {"tensor": Attr((str,)), "index": _INDEX, "bulk": Attr((dict,), None),
                   "smem_offset": Attr((int,), None)},
    "for": {},
    "yield": {},
    # `private` (a copied row, passes/row_loads.py): each thread copies what it alone reads back
    "stage": {**_BUFFER, "sync_before": Attr((bool,), True), "sync_after": Attr((bool,), True),
              "private": Attr((bool,), False)},
    # registers -> a slot of a buffer allocated before its loop (passes/staged_loads.py); `ahead`:
    # the slot the next iteration reads, which no read of this iteration touches; `private`: each
    # thread writes only what it alone reads back (passes/shared_sums.py), no barrier either side
    "stage_into": {**{a: _BUFFER[a] for a in ("role", "inner", "rows", "ld", "smem_layout")},
                   "sync_before": Attr((bool,), True), "sync_after": Attr((bool,), True), "ahead": Attr((bool,), False),
                   "private": Attr((bool,), False)},
    # a register tile read from a staged buffer (or slot) in its layout (passes/row_loads.py);
    # `private`: what this thread wrote itself (passes/shared_sums.py)
    "read_shared": {"private": Attr((bool,), False)},
    "convert": {"smem_offset": Attr((int,), None), "sync_before": Attr((bool,), True)},
    "view_shared": {},
    "alloc_shared": {**_BUFFER, "slots": Attr((int,), 1), "slot_bytes": Attr((int,), None),
                     "tma": Attr((bool,), False), "bar": Attr((int,), None), "empty_bar": Attr((int,), None)},
    "slot": {"slots": Attr((int,)), "slot_bytes": Attr((int,))},
    "copy_async": {"tensor": Attr((str,)), "index": _INDEX, "shape": Attr((tuple,)), "ld": Attr((int,)),
                   "rows": Attr((int,)), "smem_layout": Attr((str,), "rows", _LAYOUTS), "pred": Attr((bool,), False),
                   "sync_before": Attr((bool,), True), "tma": Attr((bool,), False),
                   "stepped": Attr((bool,), False), "slot_steps": Attr((bool,), False), "private": Attr((bool,), False)},
    "wait_async": {"pending": Attr((int,)), "barrier": Attr((bool,), True), "tma": Attr((bool,), False),
                   "ring": Attr((bool,), False), "private": Attr((bool,), False)},
    "tma_reset": {},
    # warp specialization (passes/specialize.py): the producer warpgroup's program, and the ring's
    # two sides: a slot taken by the producer, given back by the consumers
    "producer": {"warps": Attr((int,)), "regs": Attr((int,)), "consumer_regs": Attr((int,)),
                 "blocks_per_sm": Attr((int,))},
    "acquire": {},
    "release": {},
    # ping-pong of two computing warpgroups (passes/pingpong.py)
    "turn": {"step": Attr((str,), choices=("start", "take", "give", "finish"))},
}

# ops that own shared memory once plan_shared_memory has placed it (passes/memory.py)
PLACED = ("stage", "alloc_shared", "convert")


def attr(op, name: str) -> Any:
    """op.attrs[name], or the declared default when an optional attribute is absent; an
    attribute the op's kind does not declare is a bug (KeyError)."""
    spec = SCHEMA[op.kind][name]
    value = op.attrs.get(name, spec.default)
    if value is REQUIRED:
        raise KeyError(f"{op.kind} op without its required attribute {name!r}")
    return value


def problems(op, done: frozenset[str] = frozenset()) -> list[str]:
    """What is wrong with an op's attributes (empty when nothing is), after the passes `done`."""
    schema = SCHEMA.get(op.kind)
    if schema is None:
        return [f"unknown op kind {op.kind!r}"]
    out = [f"attribute {a!r} is not one of {op.kind}'s ({', '.join(schema) or 'none'})" for a in op.attrs if a not in schema]
    for a, spec in schema.items():
        if a not in op.attrs:
            if spec.required and (spec.by is None or spec.by in done):
                out.append(f"required attribute {a!r} is missing" + (f" after {spec.by}" if spec.by else ""))
            elif a == "smem_offset" and op.kind in PLACED and "plan_shared_memory" in done:
                out.append("a buffer without its shared-memory offset after plan_shared_memory")
            continue
        value = op.attrs[a]
        if value is None and not spec.required and spec.default is None:
            continue
        bool_mismatch = spec.types != NUMBER and (bool in spec.types) != isinstance(value, bool)  # True is an int too
        if not isinstance(value, spec.types) or bool_mismatch:
            out.append(f"attribute {a!r} is {value!r} ({type(value).__name__}), expected "
                       f"{' or '.join(t.__name__ for t in spec.types)}")
        elif spec.choices and value not in spec.choices:
            out.append(f"attribute {a!r} is {value!r}, expected one of {', '.join(map(repr, spec.choices))}")
    return out
