"""How an IR value is spelled in the generated C: its name, one element of it, and that element
read as the type arithmetic is done in."""
from __future__ import annotations

from ..ir.core import Value


def name(v: Value) -> str:
    """The value in C: its name from the spec or v<id> (render.name_values), or a constant's literal."""
    return v.cname or f"v{v.id}"


def elem(v: Value, idx: str = "e") -> str:
    return name(v) if v.is_scalar else f"{name(v)}[{idx}]"


def as_compute(v: Value, idx: str = "e") -> str:
    """The element read as the type arithmetic is done in (float for the float dtypes)."""
    return f"kg::f32({elem(v, idx)})" if v.dtype in ("bf16", "fp16") else elem(v, idx)
