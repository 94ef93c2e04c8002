"""The kernel's coordinate macros (kgen.codegen.coords.CoordMacros) written out in an emitted
expression, as the C preprocessor would: what lane_sim evaluates."""
from __future__ import annotations

import re


def expand_macros(text: str, macros: list[dict]) -> str:
    """`text` with the kernel's coordinate macros written out as the preprocessor would: `tcN_`
    by its body, `rcN_(x)` by its body with x for e (templates/*/kernel.*.j2 defines them)."""
    for m in macros:
        name, params = (m["name"][:-3], True) if m["name"].endswith("(e)") else (m["name"], False)
        while (at := _find_word(text, name)) >= 0:
            end = at + len(name)
            if not params:
                text = text[:at] + m["body"] + text[end:]
                continue
            depth, close = 0, end
            for close in range(end, len(text)):
                depth += text[close] == "("
                depth -= text[close] == ")"
                if depth == 0:
                    break
            arg = text[end + 1:close]
            text = text[:at] + re.sub(r"\be\b", arg, m["body"]) + text[close + 1:]
    return text


def expand_all(ctx, macros: list[dict]):
    """A copy of op contexts (dicts, lists, strings) with every string's macros expanded."""
    if isinstance(ctx, str):
        return expand_macros(ctx, macros)
    if isinstance(ctx, dict):
        return {k: expand_all(v, macros) for k, v in ctx.items()}
    if isinstance(ctx, list):
        return [expand_all(v, macros) for v in ctx]
    return ctx


def _find_word(text: str, word: str) -> int:
    m = re.search(r"\b" + re.escape(word) + r"\b", text)
    return m.start() if m else -1
