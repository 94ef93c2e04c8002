"""block_phases() over a mask the interval analysis cannot bound (kgen/lang/phases.py
_measured_ends), on tests/lang/specs/block_table.yaml, on the CPU interpreter: each row's count
of visible columns through the measured phases against the mask itself (so that the whole
blocks are whole and no visible block is left out), and the masked and whole blocks walked
against the hull and the longest whole run worked out by brute force; a mask the analysis
bounds measures nothing; rendered and compiled for both targets; gfx942's kernel in emulation.
The same measured by block_table into a row of four ends (intervals) or of lists of blocks
(tests/lang/specs/block_lists.yaml)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
import helpers  # noqa: E402

from kgen.build import build_variant  # noqa: E402
from kgen.errors import SpecError  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

BASE = HERE / "specs" / "block_table.yaml"


def _segments(b: int, s: int, gen: torch.Generator, ids: int = 4, longest: int = 40) -> torch.Tensor:
    """Runs of equal ids in a random order (ids repeat further on, so a row sees blocks far
    apart), a few of them longer than a 16-column block, so that some blocks are whole."""
    out = torch.empty(b, s, dtype=torch.int32)
    for i in range(b):
        pos = 0
        while pos < s:
            n = int(torch.randint(1, longest, (1,), generator=gen))
            out[i, pos:pos + n] = int(torch.randint(0, ids, (1,), generator=gen))
            pos += n
    return out


@pytest.mark.parametrize("table", [False, True])
@pytest.mark.parametrize("segments", [True, False])
@pytest.mark.parametrize("s", [37, 128, 203])
def test_the_counts_and_the_blocks_walked_match_brute_force(segments, s, table):
    """Measured in the program, or (table) by block_table into a row of four ends."""
    ls = load_spec(BASE)
    gen = torch.Generator().manual_seed(s)
    ins = {"seg": _segments(2, s, gen)}
    variant = {"segments": segments, "table": table}
    got = helpers.run_spec_cpu(ls, variant, dict(ins), {"B": 2, "S": s}, {})
    helpers.check_outputs(ls, got, ins, {}, variant)


def test_the_measured_phases_leave_out_blocks_and_find_whole_ones():
    """Not a table of every block masked: on long runs of 16 ids, rows skip the blocks of other
    ids and see blocks of their own id whole."""
    ls = load_spec(BASE)
    gen = torch.Generator().manual_seed(5)
    s = 400
    ins = {"seg": _segments(2, s, gen, ids=16, longest=80)}
    got = helpers.run_spec_cpu(ls, {"segments": True, "table": False}, dict(ins), {"B": 2, "S": s}, {})
    helpers.check_outputs(ls, got, ins, {}, {"segments": True, "table": False})
    w = got["walked"]
    assert (w.sum(-1) < -(-s // 16)).any() and (w[..., 1] > 0).any()


def test_a_mask_the_analysis_bounds_measures_nothing():
    empty, causal = build_variant(load_spec(BASE), {"segments": False, "table": True}, load_target("sm_90"), compile=False).kernels
    assert empty.empty  # block_table emits nothing where the analysis bounds the mask
    _, segments = build_variant(load_spec(BASE), {"segments": True, "table": False}, load_target("sm_90"), compile=False).kernels
    # causal: a whole and a masked phase; segments: the two measuring loops, then three phases
    assert causal.text.count("for (") == 2 and segments.text.count("for (") == 2 + 3


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_it_compiles_for_both_targets(target):
    bv = build_variant(load_spec(BASE), {"segments": True, "table": True}, load_target(target), compile=True)
    assert all(k.resources["spill_bytes"] == 0 for k in bv.kernels)


def test_gfx942_emulation_matches_the_interpreter():
    """The measured phases through gfx942's own kernel (HIP, wave64) in emulation."""
    from kgen.runtime.op import load

    ls = load_spec(BASE)
    gen = torch.Generator().manual_seed(7)
    s = 150
    ins = {"seg": _segments(2, s, gen, ids=16, longest=80)}
    expected = helpers.run_spec_cpu(ls, {"segments": True, "table": False}, dict(ins), {"B": 2, "S": s}, {})
    op = load(BASE, target="gfx942", emulate=True)
    count, walked = op(ins["seg"], segments=True, table=False)
    assert torch.equal(count, expected["count"]) and torch.equal(walked, expected["walked"])


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("segments", [True, False])
def test_gpu_matches_the_interpreter(segments):
    """The measured phases in the GPU's own kernel."""
    from kgen.runtime.op import load

    ls = load_spec(BASE)
    gen = torch.Generator().manual_seed(11)
    s = 333
    ins = {"seg": _segments(3, s, gen, ids=16, longest=80)}
    expected = helpers.run_spec_cpu(ls, {"segments": segments, "table": False}, dict(ins), {"B": 3, "S": s}, {})
    count, walked = load(BASE)(ins["seg"].cuda(), segments=segments, table=False)
    assert torch.equal(count.cpu(), expected["count"]) and torch.equal(walked.cpu(), expected["walked"])


LISTS = HERE / "specs" / "block_lists.yaml"


@pytest.mark.parametrize("s", [37, 128, 203, 400])
def test_block_lists_walk_each_visible_block_once(s):
    """block_table into a row of 2 + cdiv(S, BLOCK) entries lists the blocks: every visible
    position counted, each block with some visible walked masked and each whole one unmasked,
    once, and at(i - 1) the block walked before across the two phases."""
    ls = load_spec(LISTS)
    gen = torch.Generator().manual_seed(s)
    ins = {"seg": _segments(2, s, gen, ids=16, longest=80)}
    got = helpers.run_spec_cpu(ls, {}, dict(ins), {"B": 2, "S": s}, {})
    helpers.check_outputs(ls, got, ins, {}, {})
    if s == 400:  # not a list of every block: some skipped, some whole
        w = got["walked"]
        assert (w[..., :2].sum(-1) < -(-s // 16)).any() and (w[..., 1] > 0).any()


def test_a_list_table_read_as_three_names_is_refused():
    text = LISTS.read_text().replace("for masked, start, stop, at in", "for masked, start, stop in").replace(
        "j = at(i)", "j = i").replace("at(i - 1) != last", "i - 1 != last")
    path = HERE / "specs" / "_three_names.yaml"
    path.write_text(text)
    try:
        with pytest.raises(SpecError, match="unpack 'for masked, start, stop, at in"):
            build_variant(load_spec(path), {}, load_target("sm_90"), compile=False)
    finally:
        path.unlink()


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_block_lists_compile_for_both_targets(target):
    bv = build_variant(load_spec(LISTS), {}, load_target(target), compile=True)
    assert all(k.resources["spill_bytes"] == 0 for k in bv.kernels)


def test_block_lists_in_gfx942_emulation_match_the_interpreter():
    from kgen.runtime.op import load

    ls = load_spec(LISTS)
    gen = torch.Generator().manual_seed(9)
    s = 150
    ins = {"seg": _segments(2, s, gen, ids=16, longest=80)}
    expected = helpers.run_spec_cpu(ls, {}, dict(ins), {"B": 2, "S": s}, {})
    count, walked = load(LISTS, target="gfx942", emulate=True)(ins["seg"])
    assert torch.equal(count, expected["count"]) and torch.equal(walked, expected["walked"])


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
def test_gpu_block_lists_match_the_interpreter():
    from kgen.runtime.op import load

    ls = load_spec(LISTS)
    gen = torch.Generator().manual_seed(13)
    s = 333
    ins = {"seg": _segments(3, s, gen, ids=16, longest=80)}
    expected = helpers.run_spec_cpu(ls, {}, dict(ins), {"B": 3, "S": s}, {})
    count, walked = load(LISTS)(ins["seg"].cuda())
    assert torch.equal(count.cpu(), expected["count"]) and torch.equal(walked.cpu(), expected["walked"])
