"""The tile language's questions about a hook, answered when the spec is read: `is_identity`
(does it return an argument unchanged), `uses` (does its body read an argument) and
`block_phases` (which blocks of an index a mask lets the other index's span see, by
kgen/lang/mask_bounds.py), with `block_table`, the statement that measures at run time what the
analysis cannot bound, into a table a later kernel's block_phases reads. Called by the parser
with itself."""
from __future__ import annotations

import ast
import copy
from typing import TYPE_CHECKING, Any, NamedTuple

from . import mask_bounds
from .hooks import Hook, hook_body as _hook_body

if TYPE_CHECKING:  # the parser hands itself in; only its type is named here
    from .parse import _Parser


def _hook_call(p: _Parser, node: ast.AST, what: str) -> tuple[str, Hook]:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in p.hooks):
        raise p.fail(node, f"{what} takes a call of one of the spec's hooks ({', '.join(p.hooks) or 'none'})")
    return node.func.id, p.hooks[node.func.id]


def _expanded(p: _Parser, name: str, hook: Hook, bound: dict[str, ast.expr]) -> ast.expr:
    hooks = {n: (h.args, _hook_body(n, h)) for n, h in p.hooks.items()}
    saved = p.origin
    p.origin = hook.origin
    try:
        return mask_bounds.expand(_hook_body(name, hook), bound, hooks, p.static, (name,))
    except mask_bounds.NotAnalyzable as e:
        raise p.fail(e.node, f"{name}: {e}") from None
    finally:
        p.origin = saved


def is_identity(p: _Parser, node: ast.Call) -> bool:
    """`is_identity(hook, i)`: whether the hook returns its argument i unchanged (known when
    the spec is read), so that a base can keep a cheaper form for the trivial hook."""
    name, wrt = _hook_argument(p, node, "is_identity", "is_identity(score_mod, 0)")
    body = _marked_body(p, name)
    return isinstance(body, ast.Name) and body.id == f"__arg{wrt}"


def uses(p: _Parser, node: ast.Call) -> bool:
    """`uses(hook, i)`: whether the hook's body (other hooks it calls expanded, compile-time
    choices made) reads its argument i, so that a table measured from a mask that ignores the
    head is measured once for every head (FlexAttention's create_block_mask with H=None)."""
    name, wrt = _hook_argument(p, node, "uses", "uses(mask_mod, 'h')")
    return any(isinstance(n, ast.Name) and n.id == f"__arg{wrt}" for n in ast.walk(_marked_body(p, name)))


def _marked_body(p: _Parser, name: str) -> ast.expr:
    """The hook's body as one expression with its argument i written __arg{i}."""
    hook = p.hooks[name]
    marks = {a: ast.Name(id=f"__arg{i}", ctx=ast.Load()) for i, a in enumerate(hook.args)}
    return _expanded(p, name, hook, marks)


def _hook_argument(p: _Parser, node: ast.Call, what: str, example: str) -> tuple[str, int]:
    """The hook and the position of the argument that `what(hook, i)` names (by position or name)."""
    if node.keywords or len(node.args) != 2 or not isinstance(node.args[1], ast.Constant):
        raise p.fail(node, f"{what}() takes a hook and the index or name of one of its arguments: {example}")
    if not (isinstance(node.args[0], ast.Name) and node.args[0].id in p.hooks):
        raise p.fail(node.args[0], f"{what}() takes a hook of the spec ({', '.join(p.hooks) or 'none'})")
    name, which = node.args[0].id, node.args[1].value
    hook = p.hooks[name]
    wrt = hook.args.index(which) if which in hook.args else which
    if isinstance(wrt, bool) or not isinstance(wrt, int) or not 0 <= wrt < len(hook.args):
        raise p.fail(node, f"{what}({name}, {which!r}): {name} takes ({', '.join(hook.args)})")
    return name, wrt


class _Site(NamedTuple):
    """A call `block_phases(mask(..., span(lo, hi), ...), BLOCK, N, ...)` taken apart: the
    hook, the call's arguments, which of them is the free index (`...`) and which the span, the
    block size, N, and the keywords."""
    name: str
    hook: Hook
    call: ast.Call
    free: int
    span: int
    block: int
    n: ast.expr
    keywords: dict[str, ast.expr]


def _site(p: _Parser, node: ast.Call) -> _Site:
    what = "block_phases()"
    usage = "block_phases(mask(..., span(lo, hi), ...), BLOCK, N[, whole=False][, bounded=False][, table=t[i, ..., :]])"
    if len(node.args) != 3 or any(k.arg not in ("whole", "bounded", "table") for k in node.keywords):
        raise p.fail(node, f"{what} is written {usage}")
    name, hook = _hook_call(p, node.args[0], what)
    call = node.args[0]
    if len(call.args) != len(hook.args) or call.keywords:
        raise p.fail(call, f"{name} takes {len(hook.args)} arguments ({', '.join(hook.args)}), got {len(call.args)}")
    free = [i for i, a in enumerate(call.args) if isinstance(a, ast.Constant) and a.value is Ellipsis]
    spans = [i for i, a in enumerate(call.args) if isinstance(a, ast.Call) and isinstance(a.func, ast.Name) and a.func.id == "span"]
    if len(free) != 1 or len(spans) != 1:
        raise p.fail(call, f"{what}: give {name} one argument '...' (the index whose blocks are asked "
                           "for) and one span(lo, hi) (the range of the other index, both ends included)")
    span = call.args[spans[0]]
    if len(span.args) != 2 or span.keywords:
        raise p.fail(span, "span(lo, hi) takes the first and last value of the range")
    block = _static(p, node.args[1], f"{what}'s block size")
    return _Site(name, hook, call, free[0], spans[0], block, node.args[2], {k.arg: k.value for k in node.keywords})


def _analysed(p: _Parser, site: _Site, node: ast.Call, bounded: bool) -> tuple[dict[str, Any], bool]:
    """The site's block ends as parsed values (first, end, and full_first / full_end where the
    analysis has them), and whether a term met no rule."""
    span = site.call.args[site.span]
    env = {mask_bounds.FIXED_LO: p.expr(span.args[0]), mask_bounds.FIXED_HI: p.expr(span.args[1])}
    bound: dict[str, ast.expr] = {}
    for i, (a, arg) in enumerate(zip(site.hook.args, site.call.args)):
        mark = mask_bounds.FREE if i == site.free else mask_bounds.FIXED if i == site.span else f"__arg{i}"
        bound[a] = ast.Name(id=mark, ctx=ast.Load())
        if i not in (site.free, site.span):
            env[mark] = p.expr(arg)
    saved = (p.env, p.origin)
    p.env = {**p.globals, **env}
    try:
        expanded = _expanded(p, site.name, site.hook, bound)
        p.origin = site.hook.origin
        ordered = frozenset(n for n, t in p.tensors.items() if t.ordered)
        segments = {n: t.runs for n, t in p.tensors.items() if t.runs is not None}
        possible, sure, unknown = mask_bounds.analyse(expanded, p.static, ordered, segments)
        p.env, p.origin = {**p.globals, **env}, saved[1]
        p.env["__n"] = p.expr(site.n)
        ends = mask_bounds.block_range(possible, sure, site.block, ast.Name(id="__n", ctx=ast.Load()), bounded)
        p.at(node)
        v = {k: p.expr(_placed(e, node)) for k, e in ends.items() if k != "full_end" or e is not ends["end"]}
        if "full_end" in ends and ends["full_end"] is ends["end"]:
            v["full_end"] = v["end"]  # the same value: no phase after the whole blocks
    finally:
        p.env, p.origin = saved
    return v, unknown


class BlockAt:
    """The fourth value of a phase: the block at position i of the walk. For ends (measured or
    bounded) position i is block i; for a table of block lists (block_table with a row of
    2 + cdiv(N, BLOCK) entries) it is the list's i-th entry, the phases' positions running
    over the blocks with any but not all visible first and then those with all, so that
    at(i - 1) is the block walked before at(i) across phases too. A position past the lists
    reads an entry of the same row; every block read is clamped to [0, NB) (an entry never
    written is never walked, but a pipelined copy may read it ahead)."""

    def __init__(self, row: ast.expr | None = None, masked: Any = None, nb: Any = None):
        self.row, self.masked, self.nb = row, masked, nb

    @property
    def identity(self) -> bool:
        return self.row is None

    def __call__(self, p: _Parser, node: ast.Call) -> Any:
        if len(node.args) != 1 or node.keywords:
            raise p.fail(node, "a phase's at() takes one position of the walk: at(i)")
        if self.identity:
            return p.expr(node.args[0])
        saved = p.env
        p.env = {**saved, "__bt_i": p.expr(node.args[0]), "__bt_nm": self.masked, "__bt_NB": self.nb}
        try:
            slot = _placed(ast.parse(f"where(__bt_i < __bt_nm, {LIST_HEAD} + __bt_i, __bt_NB + {LIST_HEAD - 1} - __bt_i + __bt_nm)",
                                     mode="eval").body, node)
            p.env["__bt_e"] = _table_entry(p, self.row, slot, node)
            return p.expr(_placed(ast.parse("minimum(maximum(__bt_e, 0), __bt_NB - 1)", mode="eval").body, node))
        finally:
            p.env = saved


IDENTITY = BlockAt()


def block_phases(p: _Parser, node: ast.Call) -> tuple:
    """`block_phases(mask(args with one span(lo, hi) and one ...), BLOCK, N, whole=True, bounded=True)`:
    the blocks of [0, N) that the `...` argument of the mask hook can see while the spanned
    argument runs over [lo, hi], as phases (masked, start, stop, at) to loop over in order,
    positions i in range(start, stop) of block at(i): blocks visible whole and below N in an
    unmasked phase, the others that may see something in masked phases before and after it
    (kgen/lang/mask_bounds.py). A mask that is true everywhere has only N to mask: the blocks
    below N form the unmasked phase and the partial last one a masked phase after it (with
    bounded=False, one unmasked phase); whole=False merges the phases into one masked phase;
    bounded=False lets a whole block pass N (for a program that tests N in every phase
    itself). Where a term of the mask meets no rule of the analysis, the program first
    measures the blocks within the analysis's bounds at run time (_measured_ends), or, with
    table=t[..., :], reads what block_table measured there: four ends, or lists of blocks
    (BlockAt). Except with lists, at(i) is i, and a loop may unpack the first three only."""
    site = _site(p, node)
    flags = {k: p.static(v) for k, v in site.keywords.items() if k != "table"}
    whole, bounded = flags.get("whole", True), flags.get("bounded", True)
    if not isinstance(whole, bool) or not isinstance(bounded, bool):
        raise p.fail(node, "block_phases(..., whole=, bounded=) take bools known at compile time")
    v, unknown = _analysed(p, site, node, bounded)
    if unknown:
        table = site.keywords.get("table")
        if table is not None and _lists(p, table):  # lists measured by an earlier kernel's block_table
            masked, full = (_table_entry(p, table, k) for k in range(2))
            p.at(node)
            at = BlockAt(table, masked, p.expr(_placed(_blocks_of(site), node)))
            total = p.b.binary("add", masked, full)
            return ((True, 0, total, at),) if not whole else ((True, 0, masked, at), (False, masked, total, at))
        if table is not None:  # measured by an earlier kernel's block_table into this row
            first, full_first, full_end, end = (_table_entry(p, table, k) for k in range(4))
        else:
            first, full_first, full_end, end = _measured_ends(p, site, node, v["first"], v["end"])
        if not whole:
            return ((True, first, end, IDENTITY),)
        return ((True, first, full_first, IDENTITY), (False, full_first, full_end, IDENTITY), (True, full_end, end, IDENTITY))
    if not whole or "full_end" not in v:
        return ((True, v["first"], v["end"], IDENTITY),)
    phases = [] if "full_first" not in v else [(True, v["first"], v["full_first"], IDENTITY)]
    start = v.get("full_first", v["first"])
    after = [] if v["full_end"] is v["end"] else [(True, v["full_end"], v["end"], IDENTITY)]
    return tuple(phases + [(False, start, v["full_end"], IDENTITY)] + after)


def block_table(p: _Parser, node: ast.Call) -> None:
    """`block_table(t[i, ..., :], mask(..., span(lo, hi), ...), BLOCK, N[, when=c])`: a statement
    that measures, where a term of the mask meets no rule of the interval analysis, the blocks
    block_phases would measure for the same question (_measured_ends) and stores the four ends
    (first, full_first, full_end, end) in the row t[i, ..., 0:4] (int32), or, where the row has
    2 + cdiv(N, BLOCK) entries (its dim a run-time size), the lists of blocks (_MEASURE_LISTS,
    BlockAt), for a later kernel's
    `block_phases(..., table=t[i, ..., :])`: FlexAttention's create_block_mask, launched once
    before the kernels that walk the blocks instead of measured in each of their programs.
    Where the analysis bounds the mask it emits nothing (block_phases does not read the table,
    and a kernel left with no work is not launched). `when`, a run-time condition: where false
    the program measures nothing and stores nothing (the rows a mask that ignores an index
    would repeat)."""
    usage = "block_table(t[i, ..., :], mask(..., span(lo, hi), ...), BLOCK, N[, when=c])"
    if len(node.args) != 4 or any(k.arg != "when" for k in node.keywords):
        raise p.fail(node, f"block_table() is written {usage}")
    site = _site(p, ast.copy_location(ast.Call(func=node.func, args=node.args[1:], keywords=[]), node))
    _table_row(p, node.args[0])
    v, unknown = _analysed(p, site, node, True)
    if not unknown:
        return
    when = next((k.value for k in node.keywords), None)
    j0, j1 = v["first"], v["end"]
    saved = p.env
    p.env = {**saved, "__bt_j0": j0, "__bt_j1": j1}
    try:
        if when is not None:  # where false: no block measured, and the indices below are past the row
            p.env["__bt_when"] = p.expr(when)
        if _lists(p, node.args[0]):
            p.env["__bt_j1"] = p.expr(_placed(ast.parse("where(__bt_when, __bt_j1, __bt_j0)", mode="eval").body, node)) if when is not None else j1
            p.env.setdefault("__bt_when", True)
            rows = {"__bt_AT": _table_row(p, node.args[0], ast.Name(id="__bt_at", ctx=ast.Load())),
                    "__bt_ROW": _table_row(p, node.args[0], ast.Name(id="__bt_slot", ctx=ast.Load()))}
            p.statements(_measure_body(site, node, TABLE_CHUNK, _MEASURE_LISTS, rows))
            return
        body = ast.parse(_STORE_GUARDED if when is not None else _STORE).body
        measure = _measure_body(site, node, TABLE_CHUNK)
        body[-1].value.args[0] = _table_row(p, node.args[0], ast.Name(id="__bt_k", ctx=ast.Load()))
        for s_ in body:
            for sub in ast.walk(s_):
                ast.copy_location(sub, node)
        p.statements(body[:-1] + measure + body[-1:] if when is None else body[:1] + measure + body[1:])
    finally:
        p.env = saved


# block_table's store: the four ends as one (4,) tile scattered into the row (an index past the
# row writes nothing: kgen/lang/calls.py _gather_scatter), after _MEASURE has run
_STORE = """
__bt_k = arange(4)
store(__bt_ROW, where(__bt_k == 0, __bt_first, where(__bt_k == 1, __bt_ff, where(__bt_k == 2, __bt_fe, __bt_end))))
"""
_STORE_GUARDED = """
__bt_j1 = where(__bt_when, __bt_j1, __bt_j0)
__bt_k = where(__bt_when, arange(4), 4)
store(__bt_ROW, where(__bt_k == 0, __bt_first, where(__bt_k == 1, __bt_ff, where(__bt_k == 2, __bt_fe, __bt_end))))
"""


def _table_row(p: _Parser, ref: ast.expr, k: int | ast.expr | None = None) -> ast.Subscript:
    """The table row `t[i, ..., :]` checked (a tensor of the spec, int32, its last index ':'),
    or, with k (an entry, or an expression of the entries), the subscript that takes it."""
    if not (isinstance(ref, ast.Subscript) and isinstance(ref.value, ast.Name) and ref.value.id in p.tensors):
        raise p.fail(ref, "a block table is a row of an int32 tensor of the spec, written t[i, ..., :]")
    items = list(ref.slice.elts) if isinstance(ref.slice, ast.Tuple) else [ref.slice]
    t = p.tensors[ref.value.id]
    last = items[-1]
    if (not isinstance(last, ast.Slice) or last.lower or last.upper or last.step or any(isinstance(i, ast.Slice) for i in items[:-1])
            or t.dtype != "int32" or len(items) != len(t.dims) or t.dims[-1] not in (4, None)):
        raise p.fail(ref, f"a block table row is t[i, ..., :] of an int32 tensor whose last dim is 4 (the ends first, "
                          f"full_first, full_end, end) or 2 + cdiv(N, BLOCK) (block lists); '{ast.unparse(ref)}' is not")
    if k is None:
        return ref
    out = copy.deepcopy(ref)
    out.slice = ast.Tuple(elts=[*copy.deepcopy(items[:-1]), ast.Constant(k) if isinstance(k, int) else k], ctx=ast.Load())
    return out


def _lists(p: _Parser, ref: ast.expr) -> bool:
    """Whether the table row holds block lists (its last dim a run-time size, 2 + cdiv(N, BLOCK))
    rather than four ends (last dim 4)."""
    return p.tensors[_table_row(p, ref).value.id].dims[-1] is None


def _blocks_of(site: _Site) -> ast.expr:
    """cdiv(N, BLOCK): the blocks of the free index, as the lists' length."""
    return ast.Call(func=ast.Name(id="cdiv", ctx=ast.Load()), args=[copy.deepcopy(site.n), ast.Constant(site.block)], keywords=[])


def _table_entry(p: _Parser, ref: ast.expr, k: int | ast.expr, where: ast.AST | None = None) -> Any:
    """Entry k of the table row, loaded where `where` (else the row) stands in the spec."""
    load = ast.Call(func=ast.Name(id="load", ctx=ast.Load()), args=[_table_row(p, ref, k)], keywords=[])
    return p.expr(_placed(load, where if where is not None else ref))


# The loop a program runs where the analysis cannot bound the mask: for each block j of the
# free index within the analysis's bounds [j0, j1), whether the mask shows any of it (a) and
# all of it below N (w) to the span's positions, taken CHUNK positions of the span at a time.
# Names start with __bt_, which no spec may use (the parser's own).
_VISIBILITY = """
for __bt_j in range(__bt_j0, __bt_j1):
    __bt_cols = __bt_j * __bt_BLOCK + arange(__bt_BLOCK)
    __bt_any = zeros((__bt_CHUNK, __bt_BLOCK), int32)
    __bt_all = full((__bt_CHUNK, __bt_BLOCK), 1, int32)
    for __bt_c in range(cdiv(__bt_hi - __bt_lo + 1, __bt_CHUNK)):
        __bt_rows = __bt_lo + __bt_c * __bt_CHUNK + arange(__bt_CHUNK)
        __bt_in = (__bt_rows <= __bt_hi)[:, None]
        __bt_vis = where(__bt_cols[None, :] < __bt_N and __bt_MASK, 1, 0)
        __bt_any = maximum(__bt_any, where(__bt_in, __bt_vis, 0))
        __bt_all = minimum(__bt_all, where(__bt_in, __bt_vis, 1))
    __bt_a = max(max(__bt_any, axis=1), axis=0) > 0
    __bt_w = min(min(__bt_all, axis=1), axis=0) > 0
"""
# ends: the hull of the blocks with any, and the longest run of blocks with all (the first of
# equal runs)
_MEASURE = """
__bt_first = __bt_j1
__bt_end = __bt_j0
__bt_ff = __bt_j0
__bt_fe = __bt_j0
__bt_rs = __bt_j0
""" + _VISIBILITY + """
    __bt_first = minimum(__bt_first, where(__bt_a, __bt_j, __bt_j1))
    __bt_end = where(__bt_a, __bt_j + 1, __bt_end)
    __bt_rs = where(__bt_w, __bt_rs, __bt_j + 1)
    __bt_longer = __bt_w and __bt_j + 1 - __bt_rs > __bt_fe - __bt_ff
    __bt_ff = where(__bt_longer, __bt_rs, __bt_ff)
    __bt_fe = where(__bt_longer, __bt_j + 1, __bt_fe)
__bt_first = minimum(__bt_first, __bt_end)
__bt_whole = __bt_fe > __bt_ff
__bt_ff = where(__bt_whole, __bt_ff, __bt_end)
__bt_fe = where(__bt_whole, __bt_fe, __bt_end)
"""
# lists (a table row of LIST_HEAD + NB entries, NB the blocks of [0, N)): the blocks with any
# but not all in rising order from entry LIST_HEAD, those with all from the row's last entry
# down, and their two counts in entries 0 and 1 (stored after the loop, with __bt_ROW);
# an index of -1 writes nothing (kgen/lang/calls.py _gather_scatter)
_MEASURE_LISTS = """
__bt_nm = 0
__bt_nw = 0
""" + _VISIBILITY + """
    __bt_part = __bt_a and not __bt_w
    __bt_slot = arange(2)
    __bt_at = where(__bt_slot == 0, where(__bt_part, 2 + __bt_nm, -1), where(__bt_w, __bt_NB + 1 - __bt_nw, -1))
    store(__bt_AT, __bt_j)
    __bt_nm = __bt_nm + where(__bt_part, 1, 0)
    __bt_nw = __bt_nw + where(__bt_w, 1, 0)
__bt_slot = where(__bt_when, arange(2), -1)
store(__bt_ROW, where(__bt_slot == 0, __bt_nm, __bt_nw))
"""
LIST_HEAD = 2  # a list row's entries before its blocks: the two counts
MEASURE_CHUNK = 16  # span positions a step: a (16, BLOCK) tile of the mask at a time
# block_table's, in a kernel of its own whose registers no attention tile holds: four times
# fewer steps, each a (64, BLOCK) tile across the program's threads
TABLE_CHUNK = 64


def _measured_ends(p: _Parser, site: _Site, node: ast.Call, j0: Any, j1: Any) -> tuple[Any, Any, Any, Any]:
    """A block mask computed at run time, as FlexAttention's create_block_mask, for one span:
    the program evaluates the mask over its span and the blocks [j0, j1) the analysis leaves
    (a superset of the visible ones), and returns, as run-time values, the first block any of
    whose positions is visible, the first and end of the longest run of blocks visible whole
    below N, and the end of the visible ones (with no such run both are the end). Computed in
    each program that asks, on each call, not cached: it costs one evaluation of the mask per
    (span position, free position) of those blocks, without the dots."""
    body = _measure_body(site, node, MEASURE_CHUNK)
    saved = p.env
    p.env = {**saved, "__bt_j0": j0, "__bt_j1": j1}
    try:
        p.statements(body)
        return tuple(p.env[n] for n in ("__bt_first", "__bt_ff", "__bt_fe", "__bt_end"))
    finally:
        p.env = saved


def _measure_body(site: _Site, node: ast.Call, chunk: int, template: str = _MEASURE,
                  rows: dict[str, ast.expr] | None = None) -> list[ast.stmt]:
    """A measuring template (_MEASURE, or _MEASURE_LISTS with the table's subscripts `rows`) for
    one site, its placeholders filled, every node at `node`'s place; it reads __bt_j0 and
    __bt_j1 (the blocks to measure) and leaves the ends in __bt_first, __bt_ff, __bt_fe and
    __bt_end (_MEASURE) or stores the lists (_MEASURE_LISTS)."""
    span = site.call.args[site.span]
    mask_args = [ast.Subscript(value=ast.Name(id="__bt_cols", ctx=ast.Load()), slice=_NEW_ROW, ctx=ast.Load()) if i == site.free
                 else ast.Subscript(value=ast.Name(id="__bt_rows", ctx=ast.Load()), slice=_NEW_COL, ctx=ast.Load()) if i == site.span
                 else arg for i, arg in enumerate(site.call.args)]
    names = {"__bt_MASK": ast.Call(func=ast.Name(id=site.name, ctx=ast.Load()), args=mask_args, keywords=[]),
             "__bt_lo": span.args[0], "__bt_hi": span.args[1], "__bt_N": site.n,
             "__bt_BLOCK": ast.Constant(site.block), "__bt_CHUNK": ast.Constant(chunk),
             "__bt_NB": _blocks_of(site), **(rows or {})}

    class Fill(ast.NodeTransformer):
        def visit_Name(self, n: ast.Name) -> ast.expr:
            return copy.deepcopy(names[n.id]) if n.id in names else n

    body = [Fill().visit(s) for s in ast.parse(template).body]
    for s in body:
        for sub in ast.walk(s):
            ast.copy_location(sub, node)
    return body


_NEW_ROW = ast.Tuple(elts=[ast.Constant(None), ast.Slice()], ctx=ast.Load())  # [None, :]
_NEW_COL = ast.Tuple(elts=[ast.Slice(), ast.Constant(None)], ctx=ast.Load())  # [:, None]


def _placed(e: ast.expr, node: ast.AST) -> ast.expr:
    """e with every node at `node`'s place: bounds derived from a hook are computed where the
    program asks for them."""
    for sub in ast.walk(e):
        ast.copy_location(sub, node)
    return e


def _static(p: "_Parser", node: ast.expr, what: str) -> int:
    value = p.static(node)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise p.fail(node, f"{what} must be a positive integer known at compile time")
    return value


