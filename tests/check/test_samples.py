"""kgen.check.samples: the check's sizes follow the kernels' tiles and the spec's constraints;
inputs follow their declared domains."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kgen.build import tunable_candidates
from kgen.check.samples import check_sizes, random_inputs, tile_extents
from kgen.spec.load import load_spec

SPECS = Path(__file__).resolve().parents[2] / "specs"


def _sizes(ls, variant, given=None):
    return check_sizes(ls, variant, tunable_candidates(ls, variant)[0], given)


def test_sizes_span_two_of_the_largest_tile_raggedly():
    ls = load_spec(SPECS / "matmul.yaml")
    variant = ls.variants()[0]
    tunables = tunable_candidates(ls, variant)[0]
    extents = tile_extents(ls, variant, tunables)
    assert extents == {"M": tunables["BLOCK_M"], "N": tunables["BLOCK_N"], "K": tunables["BLOCK_K"]}
    assert _sizes(ls, variant) == {s: b + b // 2 + 1 for s, b in extents.items()}
    assert _sizes(ls, variant, {"K": 5})["K"] == 5


def test_point_indexed_sizes_are_two_and_groups_are_shared():
    ls = load_spec(SPECS / "fa2_fwd.yaml")
    sizes = _sizes(ls, ls.variants()[0])
    assert (sizes["B"], sizes["HKV"], sizes["H"]) == (2, 2, 4)  # H % HKV == 0: two heads a group
    assert sizes["SQ"] > 128 and sizes["SK"] > 64


SPEC = """\
kgen: 1
name: demo
summary: y = x
sizes: [M, N]
constraints: [CONSTRAINT]
tensors:
  x: {shape: [M, N], dtype: fp32}
  y: {shape: [M, N], dtype: fp32, role: output}
tunables: {BLOCK_M: 4, BLOCK_N: 64}
kernels:
  - name: main
    grid: cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)
    program: |
      rows = block(program_id(0), BLOCK_M)
      cols = block(program_id(1), BLOCK_N)
      store(y[rows, cols], load(x[rows, cols]))
reference: |
  y = x
"""


def test_a_multiple_of_a_constant_is_rounded_up_and_an_impossible_constraint_is_named(tmp_path):
    path = tmp_path / "demo.yaml"
    path.write_text(SPEC.replace("CONSTRAINT", '"N % 48 == 0"'))
    ls = load_spec(path)
    assert _sizes(ls, {}) == {"M": 7, "N": 144}  # 97 rounded up to a multiple of 48
    path.write_text(SPEC.replace("CONSTRAINT", '"N <= 50"'))
    with pytest.raises(ValueError, match=r"the sizes break the constraint 'N <= 50' \({'N': 97}\)"):
        _sizes(load_spec(path), {})


def test_inputs_follow_their_domains(tmp_path):
    path = tmp_path / "demo.yaml"
    path.write_text(SPEC.replace("constraints: [CONSTRAINT]\n", "").replace(
        "  x: {shape: [M, N], dtype: fp32}\n",
        "  x: {shape: [M, N], dtype: fp32}\n  p: {shape: [M], dtype: fp32, domain: positive}\n"
        "  n: {shape: [M], dtype: fp32, domain: negative}\n"
        "  s: {shape: [M, N], dtype: int32, domain: {range: [1, N], sorted: true}}\n"
        "  o: {shape: [M], dtype: int32, domain: {offsets: N}}\n"
        "  c: {shape: [M, N], dtype: int64, domain: {range: [-1, M]}}\n  w: {shape: [M], dtype: int64}\n"
        "  ids: {shape: [M, N], dtype: int32, domain: {segments: st}}\n"
        "  st: {shape: [M, 6], dtype: int32, domain: {offsets: N}}\n"))
    ls = load_spec(path)
    t = random_inputs(ls, {}, {"M": 9, "N": 40}, torch.Generator().manual_seed(0))
    assert t["x"].std() > 0.5 and (t["p"] > 0).all() and (t["n"] < 0).all()
    assert t["s"].dtype == torch.int32 and t["s"].min() >= 1 and t["s"].max() < 40
    assert (t["s"].diff(dim=-1) >= 0).all() and not (t["s"] == t["s"][:, :1]).all()
    assert t["o"][0] == 0 and t["o"][-1] == 40 and (t["o"].diff() >= 0).all()
    assert t["c"].dtype == torch.int64 and t["c"].min() == -1 and t["c"].max() == 8  # int64 as int32: [low, high)
    assert t["w"].dtype == torch.int64 and t["w"].min() >= -100 and t["w"].max() < 100
    ids, st = t["ids"].long(), t["st"].long()  # each position's id d: st[d] <= i < st[d + 1]
    assert t["ids"].dtype == torch.int32 and (ids.diff(dim=-1) >= 0).all() and ids.max() > ids.min()
    i = torch.arange(40).expand(9, 40)
    assert (st.gather(1, ids) <= i).all() and (i < st.gather(1, ids + 1)).all()


def test_a_given_size_outside_the_variants_bucket_is_named():
    """A bucketed variant runs only for sizes in its bucket: checking it at another size would
    compare a kernel that no call runs there (a 1024-wide row tile for N = 3000)."""
    ls = load_spec(SPECS / "rmsnorm.yaml")
    variant = {"dtype": "fp32", "ROW": 1024}
    assert 0 < _sizes(ls, variant)["N"] <= 1024
    with pytest.raises(ValueError, match=r"N = 3000 is not in the bucket of ROW=1024 \(0 < N <= 1024\)"):
        _sizes(ls, variant, {"N": 3000})
    assert 1024 < _sizes(ls, {"dtype": "fp32", "ROW": 4096}, {"N": 3000})["N"] <= 4096
