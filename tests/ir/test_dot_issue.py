"""issue_dots_together (kgen/ir/passes/dot_issue.py): an asynchronous dot whose start ordinary
instructions write has that start computed before the asynchronous dot issued ahead of it, so
that both are in flight at once. What the kernels compute is checked lane by lane in
tests/codegen/test_dot_fragments.py (two_starts) and on the GPU by the attention tests."""
from pathlib import Path

from kgen.codegen.emit import Emitter
from kgen.codegen.render import name_values, tensor_dims
from kgen.driver import compile_kernel
from kgen.hw.descriptor import load_target
from kgen.ir.core import walk
from kgen.options import DEFAULT, CompileOptions
from kgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests/codegen/specs/two_starts.yaml"
TILES = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 2, "WARPS": 4}
ROWS_COPIED = CompileOptions(shared_row_loads=True)


def lower(path=SPEC, target="sm_90", options=DEFAULT):
    return compile_kernel(load_spec(path), 0, {"dtype": "bf16"}, TILES, load_target(target), options=options)


def loop_of(k):
    return next(op for op in walk(k.body) if op.kind == "for").body


def schedule(body):
    return [(op.kind, op.attrs.get("pending"), op.attrs.get("early_start", False))
            for op in body.ops if op.kind in ("dot", "dot_wait")]


def test_the_second_start_is_computed_before_the_first_dot_and_both_are_in_flight():
    body = loop_of(lower())
    assert schedule(body) == [("dot", None, False), ("dot", None, True), ("dot_wait", 1, False), ("dot_wait", 0, False)]
    first = next(i for i, op in enumerate(body.ops) if op.kind == "dot")
    second = next(op for op in body.ops if op.kind == "dot" and op.attrs.get("early_start"))
    start = {id(op.result): op for op in body.ops if op.results}[id(second.operands[2])]
    assert body.ops.index(start) < first
    # the loads of both starts come first, ahead of the copies' waits
    kinds = [(op.kind, op.attrs.get("tensor")) for op in body.ops if op.kind in ("load", "wait_async")]
    assert kinds[:2] == [("load", "w"), ("load", "u")] and kinds[2][0] == "wait_async"


def test_a_copied_row_moves_with_the_wait_of_its_copy():
    """With u and w copied through shared memory (passes/row_loads.py), w's read and the wait
    for its copy move up with the start: the wait beside the body's first wait, the read after
    it; the waits' group counts are counted again for their new places."""
    body = loop_of(lower(options=ROWS_COPIED))
    assert schedule(body)[:3] == [("dot", None, False), ("dot", None, True), ("dot_wait", 1, False)]
    root = {id(op.result): op.operands[0] for op in body.ops if op.kind == "slot"}
    tensor_of = {id(root.get(id(op.operands[0]), op.operands[0])): op.attrs["tensor"]
                 for op in walk(body) if op.kind == "copy_async"}
    seq = [(op.kind, tensor_of.get(id(root.get(id(op.operands[0]), op.operands[0])))) for op in body.ops
           if op.kind in ("wait_async", "read_shared", "dot")]
    assert seq[:2] == [("wait_async", "w"), ("wait_async", "u")]
    assert seq.index(("read_shared", "w")) < seq.index(("dot", None))
    waits = {t: op.attrs["pending"] for op in body.ops if op.kind == "wait_async"
             for t in [tensor_of[id(op.operands[0])]]}
    # w's next copy moved up with its wait, after u's: copies in body order u, w, b, c (one group
    # each), so w waits with b and c in flight, u with three
    assert waits == {"w": 2, "u": 3, "b": 3, "c": 3}


def test_off_the_first_dot_is_waited_for_before_the_second_start_is_written():
    body = loop_of(lower(options=CompileOptions(dots_together=False)))
    assert schedule(body) == [("dot", None, False), ("dot_wait", 0, False), ("dot", None, False), ("dot_wait", 0, False)]


def test_a_start_that_reads_the_first_dot_stays_after_it(tmp_path):
    text = SPEC.read_text()
    changed = text.replace("t = dot(at, load(c[g, :, cols])) + (-load(w[g, cols]))[None, :]",
                           "t = dot(at, load(c[g, :, cols])) + s * 0.5")
    assert changed != text
    (tmp_path / "reads_first.yaml").write_text(changed)
    body = loop_of(lower(tmp_path / "reads_first.yaml"))
    assert not any(op.attrs.get("early_start") for op in body.ops if op.kind == "dot")
    assert schedule(body)[:2] == [("dot", None, False), ("dot_wait", 0, False)]


def test_a_start_loaded_from_a_tensor_the_kernel_writes_stays_after_the_first_dot(tmp_path):
    """The load could overtake a write of the same tensor (here an add into w itself)."""
    text = SPEC.read_text()
    changed = text.replace("(-load(w[g, cols]))[None, :]", "(-load(w[g, cols]))[None, :]\n"
                           "          atomic_add(w[g, cols], zeros((BLOCK_N,), fp32) + 1.0)")
    changed = changed.replace("w: {shape: [K, N], dtype: fp32}", "w: {shape: [K, N], dtype: fp32, role: output}")
    assert changed != text
    (tmp_path / "writes_w.yaml").write_text(changed)
    body = loop_of(lower(tmp_path / "writes_w.yaml"))
    assert not any(op.attrs.get("early_start") for op in body.ops if op.kind == "dot")


def test_the_start_is_pinned_where_it_is_computed():
    """nvcc would otherwise write the repeated elements of the broadcast start (copies) at the
    second dot, with the first in flight, and ptxas would wait there (its note C7517)."""
    k = lower()
    name_values(k)
    ctxs = Emitter(k, load_target("sm_90"), tensor_dims(k)).ops(loop_of(k))
    macros = [c["macro"] for c in ctxs]
    assert macros.count("pin") == 1 and macros.index("pin") < macros.index("wgmma_dot")


def test_synchronous_matrix_instructions_are_left_in_place():
    for target in ("gfx942", "sm_80"):
        assert not any(op.attrs.get("early_start") for op in walk(lower(target=target).body) if op.kind == "dot")
