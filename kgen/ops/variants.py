"""Which attention op runs a call: the variant files of specs/variants that flash-attn's keywords
ask for, composed where there are several.

A call asks for parts, each a variant file (by stem) with the inputs and scalars it adds, in the
order their hooks apply (flash-attn's): the packing (document, varlen), the window, softcap, then
ALiBi (on the capped score), then dropout. No part runs fa2_fwd, one its variant, the window with
softcap the shipped window_softcap, any other set their composition (kgen.compose, built once per
process: its op is defined outside torch.compile's tracing, as the shipped ones are at import).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

from ..paths import shipped_specs_dir
from ..runtime.op import call_op

# the variant files with an op of their own, by the parts they are
SHIPPED = {(): "fa2_fwd", ("sliding_window",): "fa2_window", ("softcap",): "fa2_softcap", ("alibi",): "fa2_alibi",
           ("dropout",): "fa2_dropout", ("document",): "fa2_document", ("varlen",): "fa2_varlen",
           ("sliding_window", "softcap"): "fa2_window_softcap"}
ORDER = ("document", "varlen", "sliding_window", "softcap", "alibi", "dropout")

Part = tuple[str, dict[str, Any]]


def attend(parts: list[Part], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **common: Any):
    """(o, lse) of the op that runs `parts` on q, k, v (keywords: each part's inputs and scalars,
    then `common`: softmax_scale, head_dim, causal, deterministic)."""
    parts = sorted(parts, key=lambda p: ORDER.index(p[0]))
    stems = tuple(s for s, _ in parts)
    name = SHIPPED.get(stems) or _composed(stems)
    given = {k_: v_ for _, adds in parts for k_, v_ in adds.items()}
    return call_op(name, q, k, v, **given, **common)


@torch.compiler.disable
@lru_cache(maxsize=None)
def _composed(stems: tuple[str, ...]) -> str:
    from ..runtime.compose import compose

    variants = shipped_specs_dir() / "variants"
    return compose(*(variants / f"{s}.yaml" for s in stems), name="fa2_" + "_".join(stems)).opname
