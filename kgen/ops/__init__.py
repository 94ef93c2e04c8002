"""kgen's shipped ops, built from specs/ for the local GPU on first use and cached.

    from kgen.ops import flash_attn_func, flash_attn_varlen_func, mamba_chunk_scan_combined, softmax, rmsnorm, matmul
    from kgen.ops import causal_conv1d_fn, mamba_split_conv1d_scan_combined

Every shipped spec with a forward role is an attribute (its KgenOp, with autograd when the spec
pairs a backward); `flash_attn_func` and `flash_attn_varlen_func` are the flash-attn style
entry points over fa2_fwd/fa2_bwd and their variants, `mamba_chunk_scan_combined` mamba-ssm's
over ssd_fwd and ssd_bwd, `causal_conv1d_fn` causal-conv1d's over causal_conv1d, and
`mamba_split_conv1d_scan_combined` mamba-ssm's fused Mamba-2 layer over the two.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..paths import shipped_specs_dir
from .attention import _register as _register_attention
from .attention import flash_attn_func
from .conv import _register as _register_conv
from .conv import causal_conv1d_fn
from .mamba_split import mamba_split_conv1d_scan_combined
from .ssd import _register as _register_ssd
from .ssd import mamba_chunk_scan_combined
from .varlen import flash_attn_varlen_func


@lru_cache(maxsize=None)
def _op(name: str):
    from ..runtime.op import load

    return load(shipped_specs_dir() / f"{name}.yaml")


@lru_cache(maxsize=None)
def _variant(op_name: str):
    """The op of a spec in specs/variants, by its op name."""
    from ..runtime.op import load
    from ..spec.load import load_spec

    for path in sorted((shipped_specs_dir() / "variants").glob("*.yaml")):
        if load_spec(path).spec.name == op_name:
            return load(path)
    raise AttributeError(f"kgen.ops: no spec in specs/variants is named '{op_name}'")


def __getattr__(name: str) -> Any:
    if name.startswith("_") or not (shipped_specs_dir() / f"{name}.yaml").is_file():
        raise AttributeError(f"kgen.ops has no op '{name}'; shipped: {', '.join(available())}")
    return _op(name)


def available() -> list[str]:
    return sorted(p.stem for p in shipped_specs_dir().glob("*.yaml"))


_register_attention()
_register_ssd()
_register_conv()


__all__ = ["available", "causal_conv1d_fn", "flash_attn_func", "flash_attn_varlen_func", "mamba_chunk_scan_combined",
           "mamba_split_conv1d_scan_combined"]
