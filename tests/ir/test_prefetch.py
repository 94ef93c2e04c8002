"""prefetch_loads (kgen/ir/passes/prefetch.py) chosen by a tunable: the row backwards' RL 2
(specs/layernorm_bwd.yaml, rmsnorm_bwd.yaml) issues each row's loads an iteration ahead into
registers and loads the weights, the same block every iteration, once before the loop; the
budget an expression gives, checked where the kernel is built. (chunk_scan's and dx's fixed
budgets: tests/ir/test_passes.py.)"""
import sys
from pathlib import Path

import pytest

from kgen.driver import compile_kernel
from kgen.errors import SpecError
from kgen.hw.descriptor import load_target
from kgen.ir.core import walk
from kgen.lang import kernel_ir
from kgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # helpers
import helpers  # noqa: E402

LN = {"SA": 0, "BLOCK_M": 1, "WARPS": 8, "ROWS": 64, "SPLIT": 1, "BLOCK_C": 256}
RMS = {**LN, "OCC": 1}


def rows(spec: str, tiles: dict, target: str = "sm_90", row: int = 4096):
    return compile_kernel(load_spec(ROOT / "specs" / f"{spec}.yaml"), "rows", {"dtype": "bf16", "ROW": row}, tiles,
                          load_target(target))


def loads(block, tensor):
    return [op for op in block.ops if op.kind == "load" and op.attrs["tensor"] == tensor]


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
@pytest.mark.parametrize("spec, tiles", [("layernorm_bwd", LN), ("rmsnorm_bwd", RMS)])
def test_rl_2_loads_the_next_row_ahead_and_the_weights_once(spec, tiles, target):
    k = rows(spec, {**tiles, "RL": 2}, target)
    loop = next(op for op in walk(k.body) if op.kind == "for")
    body, carried = loop.body, loop.body.ops[-1].operands
    for tensor in ("x", "dy"):  # the next row's, predicated, yielded to the next iteration
        (ahead,) = loads(body, tensor)
        assert ahead.attrs.get("pred") and ahead.result in carried
        assert len(loads(k.body, tensor)) == 1  # the first row's, before the loop
    assert not loads(body, "w") and len(loads(k.body, "w")) == 1
    w = loads(k.body, "w")[0].result
    assert w not in carried and any(w in op.operands for op in walk(body))  # read in the loop, not carried
    plain = rows(spec, {**tiles, "RL": 0}, target)
    plain_loop = next(op for op in walk(plain.body) if op.kind == "for")
    assert not any(op.attrs.get("pred") for op in walk(plain.body) if op.kind == "load")
    assert len(loads(plain_loop.body, "w")) == 1  # without the ask, the loop loads w itself


def test_a_budget_an_expression_gives_is_evaluated_per_variant(tmp_path):
    text = (ROOT / "specs/rmsnorm_bwd.yaml").read_text()
    ls = load_spec(ROOT / "specs/rmsnorm_bwd.yaml")
    variant = {"dtype": "bf16", "ROW": 4096}
    assert kernel_ir(ls, 0, variant, {**RMS, "RL": 2}).prefetch_loads == 64
    assert kernel_ir(ls, 0, variant, {**RMS, "RL": 0}).prefetch_loads is False
    bad = tmp_path / "rmsnorm_bwd.yaml"
    bad.write_text(text.replace("prefetch_loads: 64 * (RL == 2)", "prefetch_loads: 40 * RL"))
    with pytest.raises(SpecError) as e:
        kernel_ir(load_spec(bad), 0, variant, {**RMS, "RL": 2})
    line = next(i for i, t in enumerate(bad.read_text().splitlines(), 1) if t.startswith("    prefetch_loads:"))
    assert str(e.value).startswith(f"{bad}:{line}:")
    assert "prefetch_loads must be true, false or an integer from 0 to 64 (elements per thread one loop may " \
           "prefetch), got 80 for" in str(e.value)


@pytest.mark.parametrize("spec, tiles", [
    ("layernorm_bwd", {**LN, "RL": 2, "SA": 1, "WARPS": 4, "ROWS": 16}),
    ("rmsnorm_bwd", {**RMS, "RL": 2, "BLOCK_M": 2, "WARPS": 4, "ROWS": 16}),
])
def test_the_prefetched_row_forms_match_float64_in_emulation(spec, tiles):
    """gfx942's kernels on the CPU (kgen.emulate), the form forced: 37 rows (the last program's
    loop runs past M, its last prefetch predicated off), 1000 columns (not a multiple of the tile)."""
    import kgen
    from kgen.backends import available
    from kgen.knobs import knobs

    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    op = kgen.load(ROOT / "specs" / f"{spec}.yaml", target="gfx942", emulate=True)
    helpers.check_row_backward(op, spec, {k: v for k, v in tiles.items() if k != "BLOCK_C"}, 37, 1000, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("spec, tiles, n", [
    ("layernorm_bwd", {**LN, "RL": 2, "SA": 1}, 4000),
    ("rmsnorm_bwd", {**RMS, "RL": 2, "OCC": 2}, 4000),
    ("rmsnorm_bwd", {**RMS, "RL": 2, "WARPS": 4}, 1000),
])
def test_the_prefetched_row_forms_match_float64_on_the_gpu(spec, tiles, n):
    """The RL 2 forms the tune times at 4096-wide rows, on 300 rows (the last program's past M)."""
    import kgen

    helpers.check_row_backward(kgen.load(ROOT / "specs" / f"{spec}.yaml"), spec,
                               {k: v for k, v in tiles.items() if k != "BLOCK_C"}, 300, n, "cuda")
