"""The spec schema (pydantic v2): what a YAML op spec may say, and nothing more.

Every model forbids unknown fields and is frozen. Cross-field checks (a dtype naming a variant
axis that does not exist, a shape naming an undeclared size) run in Spec's model validator
(kgen.spec.refs); they raise errors carrying the path of the offending value, so that
`kgen.spec.load` can report them at its YAML position.
"""
from __future__ import annotations

import re
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .expr import eval_expr
from .refs import FieldError, check_references, expr_at

IDENT = r"^[A-Za-z_][A-Za-z0-9_]*$"
DTYPE_NAMES = ("bf16", "fp16", "fp32", "int32", "int64")
INT_DTYPE_NAMES = ("int32", "int64")  # integer tensors: ids, offsets, targets; they take no gradient
Scalar = Union[bool, int, float, str]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntRange(Strict):
    """Integer inputs drawn uniformly from [low, high) (expressions of sizes and variant axes)."""
    range: list[Union[str, int]] = Field(min_length=2, max_length=2, description="[low, high): high excluded")
    sorted: bool = Field(False, description="non-decreasing along the last dim (sequence numbers of packed rows)")


class Offsets(Strict):
    """Integer inputs that are offsets into a packed dim: 0 first, `offsets` last, non-decreasing
    between (cu_seqlens of varlen attention)."""
    offsets: Union[str, int] = Field(description="the last offset: the packed dim's length")


class Segments(Strict):
    """Integer inputs that number segments along the last dim (packed documents' ids): id d
    from starts[..., d] up to starts[..., d + 1], where `segments` names the input of those
    starts (an offsets input with the same outer dims). Non-decreasing; drawn from the starts."""
    segments: str = Field(description="the offsets input whose entries start each id's run")


FloatDomain = Literal["normal", "positive", "negative"]


class TensorParam(Strict):
    shape: list[Union[str, int]] = Field(description="sizes, variant axes or integers, outermost first")
    dtype: str = Field(description="bf16, fp16, fp32, int32, int64, or $axis for a variant axis")
    role: Literal["input", "output", "scratch"] = "input"
    alias: str | None = Field(
        None, description="outputs: an input whose storage this output is written into, in place (same shape and "
        "dtype); the op allocates nothing for it and returns that input tensor")
    grad: bool = Field(True, description="outputs: whether autograd flows through it; inputs: whether a gradient is returned")
    init: Literal["empty", "zeros"] = Field("empty", description="outputs and scratch: initial contents")
    domain: Union[FloatDomain, IntRange, Offsets, Segments, None] = Field(
        None, description="inputs: the values a check draws (kgen check, the tests): normal (torch.randn, the "
        "default for floats), positive (exp of it), negative (minus that); integers: {range: [low, high], sorted} or "
        "{offsets: total} or {segments: <offsets input>}; integers without one are drawn from [-100, 100)")
    scale_tolerance: float | None = Field(
        None, gt=0, description="outputs: also accepted when the max error is within this fraction of the reference's "
        "largest magnitude (a gradient summed over every position, whose PyTorch error can cancel far below its terms')")

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        if v.startswith("$"):
            if not re.match(IDENT, v[1:]):
                raise ValueError(f"'{v}' is not a variant reference; write $name")
        elif v not in DTYPE_NAMES:
            raise ValueError(f"unknown dtype '{v}'; accepted: {', '.join(DTYPE_NAMES)} or $axis")
        return v


class ScalarParam(Strict):
    dtype: Literal["fp32", "int32", "int64"] = "fp32"
    default: float | int | None = None

    @model_validator(mode="after")
    def _integral_default(self) -> "ScalarParam":
        if self.dtype != "fp32" and self.default is not None and (isinstance(self.default, bool) or self.default != int(self.default)):
            raise ValueError(f"an {self.dtype} scalar's default must be an integer, got {self.default!r}")
        return self

    def value(self, given: Any) -> float | int:
        """`given` as the kernel receives it: an int for an int32 scalar (an integral float is
        accepted), else a float."""
        if self.dtype != "fp32":
            bits = 32 if self.dtype == "int32" else 64
            if isinstance(given, bool) or not isinstance(given, (int, float)) or given != int(given) or not -2**(bits - 1) <= given < 2**(bits - 1):
                raise ValueError(f"must be an {self.dtype} integer, got {given!r}")
            return int(given)
        return float(given)


class KernelSpec(Strict):
    name: str = Field(pattern=IDENT)
    grid: list[str | int] = Field(min_length=1, max_length=3, description="programs per grid axis: 'cdiv(M, BLOCK_M), B * H' or a list")
    warps: int | str = Field(4, description="warps (NVIDIA) or waves (AMD) per program, or a tunable's name")
    program: str = Field(min_length=1, description="the tile program")
    prefetch_loads: bool | int | str = Field(False, description="issue the program's small register loads in loops one "
                                             "iteration ahead (kgen/ir/passes/prefetch.py); per kernel, as it speeds some "
                                             "loops and slows others. true: tiles of at most 8 elements per thread, 16 per "
                                             "loop; an integer N (1 to 64): tiles and loops of at most N; 0 or false: off; or "
                                             "an expression of the variant axes and tunables giving one of these (a tunable "
                                             "lets kgen tune time it)")

    @field_validator("prefetch_loads")
    @classmethod
    def _prefetch_budget(cls, v):
        if isinstance(v, int) and not isinstance(v, bool) and not 1 <= v <= 64:
            raise ValueError(f"prefetch_loads {v} is out of range; accepted: true, false or an integer from 1 to 64 "
                             "(elements per thread one loop may prefetch)")
        return v
    bulk_reductions: bool | str | None = Field(None, description="fp32 tile atomic adds through shared memory, one bulk "
                                               "reduction per row, where the target has them (kgen/ir/passes/bulk_reduce.py): "
                                               "true, false or an expression of the variant axes and tunables; absent, "
                                               "the descriptor's byte model decides per add")
    occupancy: int | str = Field(1, description="programs a multiprocessor (CU) is to hold at once at least: the "
                                 "compiler caps each thread's registers so that this many fit (CUDA: "
                                 "__launch_bounds__'s minimum blocks), spilling where it must; an integer, or an "
                                 "expression of the variant axes and tunables (a tunable lets kgen tune time it)")
    shared_row_loads: bool | str | None = Field(None, description="a loop body's register loads too large to prefetch "
                                                "in registers copied an iteration ahead into shared memory and read "
                                                "from there, where the target has cp.async (kgen/ir/passes/row_loads.py): "
                                                "true, false or an expression of the variant axes and tunables; absent, "
                                                "the compile options decide (off by default)")
    row_load_slots: int | str = Field(2, description="slots of each buffer shared_row_loads copies into: iteration "
                                      "n copies the rows of iteration n + slots - 1, so that slots - 1 "
                                      "iterations' rows are in flight (kgen/ir/passes/async_copy.py); 2 to 4, "
                                      "or an expression of the variant axes and tunables")
    shared_accumulators: bool | str = Field(False, description="the fp32 sums its loops carry (a tile added to "
                                            "every iteration) kept in shared memory, each thread's elements its "
                                            "own, instead of in registers (kgen/ir/passes/shared_sums.py): true, "
                                            "false or an expression of the variant axes and tunables")
    warp_specialize: bool | str = Field(False, description="loops of tensor copies fed by a producer warpgroup through "
                                        "rings of mbarriers, the computing warps' registers raised, where the target "
                                        "can (kgen/ir/passes/specialize.py): true, false or an expression of the variant "
                                        "axes and tunables")


    @field_validator("grid", mode="before")
    @classmethod
    def _grid(cls, v):
        # `grid: cdiv(M, BM), H` is one YAML string; a flow list [T, cdiv(H, BH)] is split by YAML
        # at every comma, inside the call too: items with unbalanced parentheses are joined again
        if (isinstance(v, list) and len(v) > 1 and all(isinstance(x, (str, int)) for x in v)
                and any(isinstance(x, str) and x.count("(") != x.count(")") for x in v)):
            joined = ", ".join(str(x) for x in v)
            if _expressions(joined) is not None:
                v = joined
        if isinstance(v, str):
            items = _expressions(v)
            if items is None:
                raise ValueError(f"'{v}' is not a comma-separated list of expressions")
            return items
        return v


def _expressions(text: str) -> list[str] | None:
    """The comma-separated Python expressions of `text`, each unparsed; None if it does not parse."""
    import ast

    try:
        return [ast.unparse(e) for e in ast.parse(f"({text},)", mode="eval").body.elts]
    except SyntaxError:
        return None


class HookSpec(Strict):
    """A named function the spec's programs call and a spec that extends it may override
    (docs/SPEC_LANGUAGE.md, "Hooks and extends")."""

    args: list[str] = Field(description="its parameters' names")
    body: str = Field(min_length=1, description="a tile-language expression, or statements that end in "
                      "`return <expression>`, over its parameters and the spec's sizes, scalars, tensors and constants")
    combine: Literal["all", "any", "chain"] | None = Field(
        None, description="how a spec that extends several specs at once joins their overrides of this hook: all "
        "(each must hold, as FlexAttention's and_masks), any (one must hold), chain (each applied to the previous "
        "one's result, the first argument threaded, in the order extends lists them); without it two overrides "
        "are an error")

    @field_validator("args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        for a in v:
            if not re.match(IDENT, a):
                raise ValueError(f"hook argument '{a}' is not an identifier")
        if len(set(v)) != len(v):
            raise ValueError(f"hook arguments repeat: {', '.join(v)}")
        return v


class Autograd(Strict):
    backward: str = Field(description="the backward spec's file, relative to this spec")
    saves: list[str] = Field(default_factory=list, description="tensors of the forward that the backward reads")
    options: list[str] = Field(default_factory=list, description="variant axes of the backward that the forward op "
                               "accepts as arguments and hands to it (e.g. deterministic)")


class Spec(Strict):
    kgen: Literal[1]
    name: str = Field(pattern=IDENT)
    summary: str
    variants: dict[str, list[Scalar]] = Field(default_factory=dict)
    open_variants: dict[str, Union[str, list[Scalar]]] = Field(
        default_factory=dict, description="variant axis -> a condition on it (the axis also takes, at a call, any "
        "integer meeting it) or a list of further values (a dtype axis' other types): built at their first call; the "
        "axis' listed values are those built ahead (kgen build, the checks)")
    exclude: list[dict[str, Scalar]] = Field(default_factory=list, description="variant combinations to leave out")
    sizes: list[str] = Field(default_factory=list)
    scalars: dict[str, ScalarParam] = Field(default_factory=dict)
    tensors: dict[str, TensorParam]
    constraints: list[str] = Field(default_factory=list, description="conditions on sizes, checked at call time")
    tunables: dict[str, Union[int, list[int]]] = Field(default_factory=dict, description="a value, or candidates in order of preference")
    prefer: list[str] = Field(default_factory=list, description="conditions on variant axes and tunables that order "
                              "the candidates per variant: those meeting the first come first, then the second's, "
                              "the rest last, each group in the tunables' order")
    kernels: list[KernelSpec] = Field(min_length=1)
    reference: str = Field(description="PyTorch code computing the outputs from the inputs, for tests")
    autograd: Autograd | None = None
    buckets: dict[str, str] = Field(default_factory=dict, description="variant axis -> size: at a call the axis "
                                    "takes its smallest value at least the size (integers, ascending), so that "
                                    "programs may size tiles by it (a row in registers up to the bucket)")
    hooks: dict[str, HookSpec] = Field(default_factory=dict, description="named functions the programs and the "
                                       "reference call, which a spec that extends this one may override")
    extends: str | list[str] | None = Field(
        None, description="the spec this one extends (a path relative to this file), or several that extend one "
        "base (composed: kgen/spec/compose.py); kgen.spec.load merges them before validating")

    @field_validator("variants")
    @classmethod
    def _variants(cls, v: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        for axis, values in v.items():
            if not re.match(IDENT, axis):
                raise ValueError(f"variant axis '{axis}' is not an identifier")
            if not values:
                raise ValueError(f"variant axis '{axis}' has no values")
        return v

    @model_validator(mode="after")
    def _cross_refs(self) -> "Spec":
        if not any(t.role == "output" for t in self.tensors.values()):
            raise FieldError(("tensors",), "a spec needs at least one tensor with role: output")
        for axis, size in self.buckets.items():
            values = self.variants.get(axis)
            if values is None:
                raise FieldError(("buckets", axis, "<key>"), f"buckets: '{axis}' is not a variant axis; axes: "
                                 f"{', '.join(self.variants) or 'none'}")
            if size not in self.sizes:
                raise FieldError(("buckets", axis), f"buckets: '{size}' is not a size; sizes: {', '.join(self.sizes) or 'none'}")
            if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in values) or values != sorted(set(values)):
                raise FieldError(("variants", axis), f"variant axis '{axis}' buckets size {size}: its values must be "
                                 f"positive integers in ascending order, got {values}")
        for axis, condition in self.open_variants.items():
            values = self.variants.get(axis)
            if values is None:
                raise FieldError(("open_variants", axis, "<key>"), f"'{axis}' is not a variant axis; axes: "
                                 f"{', '.join(self.variants) or 'none'}")
            if isinstance(condition, list):
                again = [str(v) for v in condition if v in values]
                if not condition or again:
                    raise FieldError(("open_variants", axis), f"open_variants.{axis} lists the values the axis takes "
                                     f"beyond its listed ones ({', '.join(map(str, values))}); got "
                                     f"{', '.join(again) + ' again' if again else 'none'}")
                continue
            if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
                raise FieldError(("variants", axis), f"variant axis '{axis}' is open (open_variants): its values must be "
                                 f"integers, got {values}")
            expr_at(("open_variants", axis), condition, [axis])
        check_references(self, DTYPE_NAMES)
        return self

    def opens(self, axis: str, value: Scalar) -> bool:
        """Whether `value`, not among the axis' listed values, is one of its open ones
        (open_variants): built at its first call."""
        condition = self.open_variants.get(axis)
        if isinstance(condition, list):
            return any(type(v) is type(value) and v == value for v in condition)
        return (condition is not None and isinstance(value, int) and not isinstance(value, bool)
                and bool(eval_expr(condition, {axis: value})))

    def inputs(self) -> list[str]:
        return [n for n, t in self.tensors.items() if t.role == "input"]

    def outputs(self) -> list[str]:
        return [n for n, t in self.tensors.items() if t.role == "output"]

    def aliases(self) -> dict[str, str]:
        """Output -> the input it is written over (`alias:`), in declaration order."""
        return {n: t.alias for n, t in self.tensors.items() if t.alias is not None}
