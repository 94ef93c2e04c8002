"""CompileOptions.constant_groups (kgen/codegen/wgmma.py, templates/common/ops.j2 `wgmma_dot`):
where several warpgroups issue a wgmma dot, each issues it in a branch of its own whose group
index is a constant, so that the descriptor offsets fold to immediates; off, one code path
reads the index from `warp / 4`. The branches are the same products (the lane simulation of
test_dot_fragments covers the offsets either way); the test here is the source's shape and,
with nvcc, the registers of the head_dim 256 backward's register-bound 64 x 64 dkdv."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_occupancy import _need  # noqa: E402

from kgen.codeobjects import CodeObjects  # noqa: E402
from kgen.driver import build_kernel  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.options import CompileOptions  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BRANCHES = CompileOptions(constant_groups=True)


def _source(built) -> str:
    return built.source + "".join(text for _, text in built.includes)


def test_each_warpgroup_issues_its_products_with_a_constant_index():
    ls, target = load_spec(ROOT / "specs/matmul.yaml"), load_target("sm_90")
    tiles = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "WARPS": 8}  # two warpgroups along M
    plain = _source(build_kernel(ls, 0, {"dtype": "bf16"}, tiles, target))
    assert "const int wg_ = (warp / 4);" in plain and "constexpr int wg_" not in plain
    branched = _source(build_kernel(ls, 0, {"dtype": "bf16"}, tiles, target, BRANCHES))
    assert "const int wg_ =" not in branched
    assert "if ((warp / 4) == 0) {" in branched and "constexpr int wg_ = 0;" in branched
    assert "} else {" in branched and "constexpr int wg_ = 1;" in branched
    assert branched.count("kg::wgmma_m64") == 2 * plain.count("kg::wgmma_m64")
    # one warpgroup: the index is the constant 0 already, nothing to branch on
    one = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "WARPS": 4}
    assert _source(build_kernel(ls, 0, {"dtype": "bf16"}, one, target, BRANCHES)) == \
        _source(build_kernel(ls, 0, {"dtype": "bf16"}, one, target))


def test_constant_group_indices_free_the_registers_of_the_d256_dkdv():
    """fa2_bwd's dkdv at head_dim 256 on 64 x 64 tiles over 8 warps with dk and dv whole
    (FlashAttention-2's form, which the build takes through its constant-index retry): with
    the group index read at run time ptxas keeps per-warpgroup descriptor offsets in vector
    registers and spills; with constant indices it fits (session 39, nvcc 13.0: 255 registers
    and 688 bytes of spill against 230 and none)."""
    _need("cuda")
    ls, target = load_spec(ROOT / "specs/fa2_bwd.yaml"), load_target("sm_90")
    index = [k.name for k in ls.spec.kernels].index("dkdv")
    variant = {"dtype": "bf16", "head_dim": 256, "causal": False, "deterministic": False}
    tiles = {"RECOMPUTE_DQ": 0, "BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 8, "DSPLIT": 1}
    objects = CodeObjects()
    plain = build_kernel(ls, index, variant, tiles, target, objects=objects).resources
    branched = build_kernel(ls, index, variant, tiles, target, BRANCHES, objects=objects).resources
    assert plain["spill_bytes"] > 0
    assert branched["spill_bytes"] == 0 and branched["stack_bytes"] == 0 and branched["registers"] < 255
