"""How the generated source spells each tile dtype: its C type, its literals, the identities an
integer reduction starts from, and a conversion between two dtypes."""
from __future__ import annotations

import math
from typing import Any

HALF_TYPE = "kg_half"  # the typedef a shared source's unit gives its 16-bit float type (templates/*/kernel.*.j2)
# int64 is `long long` on both backends (kgen_hip.h's int64_t; CUDA's int64_t is `long` on Linux,
# another type for overloads): the header's int64 overloads (floordiv, mod, abs_, shfl_xor) take it
CTYPE = {"bf16": "kg::bf16", "fp16": "kg::fp16", "fp32": "float", "int32": "int", "int64": "long long", "bool": "bool"}
FLOAT = ("bf16", "fp16", "fp32")
INTEGER = ("int32", "int64")
# integer tiles reduce in their own type (exact): the identities of sum, max and min
REDUCE_INIT_INT = {
    "int32": {"sum": "0", "max": "(-2147483647 - 1)", "min": "2147483647"},
    "int64": {"sum": "0LL", "max": "(-9223372036854775807LL - 1)", "min": "9223372036854775807LL"},
}


def ctype(dtype: str, half: str | None = None) -> str:
    """The C type of a dtype; the kernel's 16-bit float type `half` as HALF_TYPE (a source
    shared by the bf16 and fp16 variants, kgen.codegen.render)."""
    return HALF_TYPE if dtype == half else CTYPE[dtype]


def literal(value: Any, dtype: str, half: str | None = None) -> str:
    if dtype == "bool":
        return "true" if value else "false"
    if dtype == "int32":
        return str(int(value)) if value >= 0 else f"({int(value)})"
    if dtype == "int64":  # typed long long, so that kg::max_(x, 5LL) deduces one type
        v = int(value)
        if v == -2**63:  # 9223372036854775808LL is not a literal C accepts
            return "(-9223372036854775807LL - 1)"
        return f"{v}LL" if v >= 0 else f"({v}LL)"
    value = float(value)
    if math.isinf(value):
        text = "kg::inf()" if value > 0 else "-kg::inf()"
    elif math.isnan(value):
        text = "kg::nan()"
    else:
        text = repr(value) + "f"
    return text if dtype == "fp32" else f"kg::cvt<{ctype(dtype, half)}>({text})"


def integer_cast(src: str, dst: str) -> bool:
    """Whether a cast from dtype src to dst is between integers (bool included) with an int64
    side, written as a C cast: kg::cvt takes a float, which would round an int64 to 24 bits."""
    ints = INTEGER + ("bool",)
    return "int64" in (src, dst) and src in ints and dst in ints
