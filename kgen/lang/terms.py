"""The values a tile program names besides tiles: tensor references, block indices, dtype names.

Shared by the parser (parse.py) and the calls it parses (calls.py), which therefore need not
import each other.
"""
from __future__ import annotations

from dataclasses import dataclass

from .builder import Operand

UNARY_FNS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sigmoid", "tanh", "erf", "sin", "cos", "floor", "ceil")


@dataclass(frozen=True)
class TensorRef:
    name: str
    dims: tuple[int | None, ...]  # static size of each dim, None when it is a runtime size
    dtype: str
    writable: bool = True  # outputs and scratch; a kernel must not write its op's inputs
    ordered: bool = False  # non-decreasing along the last dim (its domain says so): block_phases relies on it
    # segment ids: the input holding each id's first position (domain segments:) and its declared shape
    runs: tuple[str, tuple[str, ...]] | None = None


@dataclass(frozen=True)
class BlockIndex:
    index: Operand
    size: int


class _DType(str):
    """A dtype name used as a value (fp32, or a variant axis whose value is a dtype)."""
