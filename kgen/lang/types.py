"""Dtype promotion and shape broadcasting for the tile language (numpy/torch-like, small)."""
from __future__ import annotations

FLOAT_RANK = {"bf16": 1, "fp16": 1, "fp32": 2}
INTS = ("int32", "int64")


def promote(a: str, b: str) -> str:
    """The dtype of a binary op on dtypes a and b, as torch promotes them: bool gives way to
    anything, an integer to a float, int32 to int64 (which then stays 64-bit, as in torch and
    Triton)."""
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    if a in INTS and b in INTS:
        return "int64"
    if a in INTS:
        return b
    if b in INTS:
        return a
    # two different floats: bf16+fp16 and anything with fp32 go to fp32
    return "fp32"


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy broadcasting of two shapes; None if they do not broadcast."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + a
    b = (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)
