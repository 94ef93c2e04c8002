"""A spec's tunable candidates, in the order the build tries them, and the completion of a
choice that names only some tunables.

The order is the product of the tunables' lists (the first tunable's first value first), within
the constraints, regrouped per variant by the spec's `prefer:` conditions: the candidates that
meet the first come first, then those meeting the second, the rest last, each group keeping the
product order. A preference changes which candidate a variant tries first without taking any
out of what `kgen tune` times (a constraint would).

A choice written before a spec gained a tunable (a test's tiles, a caller's forced tunables)
names fewer tunables than the spec has (a tuning entry cannot: its key is the spec's text); it is completed with the first candidate,
in the variant's order and within its constraints, that agrees with what it names: what the
spec would have taken for the tunables it leaves out (fa2_bwd's tiles of 64 keys over 4 warps
take the recomputed dq at head_dim 128, which its preference puts first, and where
deterministic is set; 128 keys take the atomic one otherwise).
"""
from __future__ import annotations

import itertools
from typing import Any

from ..errors import SpecError
from .expr import eval_expr
from .load import LoadedSpec
from .refs import tunable_constraints


def tunable_candidates(ls: LoadedSpec, variant: dict[str, Any] | None = None) -> list[dict[str, int]]:
    """Every combination of tunable values, in order; with a variant, those its constraints on
    tunables allow (refs.tunable_constraints), in the order its preferences give."""
    names = list(ls.spec.tunables)
    lists = [v if isinstance(v, list) else [v] for v in ls.spec.tunables.values()]
    combos = [dict(zip(names, combo)) for combo in itertools.product(*lists)]
    if variant is None:
        return combos
    rules = tunable_constraints(ls.spec)
    allowed = [t for t in combos if all(eval_expr(c, {**variant, **t}) for c in rules)]
    if not allowed:
        raise SpecError(f"no tunable choice of variant {variant} meets the constraints {', '.join(rules)}", ls.where("constraints"))
    prefer = ls.spec.prefer
    if not prefer:
        return allowed

    hooks = {name: (h.args, h.body) for name, h in ls.spec.hooks.items()}

    def rank(t: dict[str, int]) -> int:
        return next((i for i, c in enumerate(prefer) if eval_expr(c, {**variant, **t}, hooks)), len(prefer))
    return sorted(allowed, key=rank)  # stable: each group keeps the product order


def complete_tunables(ls: LoadedSpec, variant: dict[str, Any], given: dict[str, int]) -> dict[str, int]:
    """`given` with the tunables it leaves out taken from the first candidate that agrees with
    it; `given` itself where it names every tunable or where no candidate agrees (a choice
    outside the constraints stays the caller's, checked where it is used)."""
    if set(given) >= set(ls.spec.tunables):
        return given
    for candidate in tunable_candidates(ls, variant):
        if all(candidate.get(name) == value for name, value in given.items()):
            return candidate
    return given
