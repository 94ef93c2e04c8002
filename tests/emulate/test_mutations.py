"""The check fails on broken kernels: each test breaks a shipped gfx942 kernel in one way a
compiler bug could (a wrong lane in a cross-lane exchange, a missing barrier, an LDS index off by
one, MFMA operands swapped) and expects `kgen check`'s verdict to say so."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from kgen.check.emulated import check_variant
from kgen.hw.descriptor import load_target
from kgen.paths import templates_dir
from kgen.spec.load import load_spec

SPECS = Path(__file__).resolve().parents[2] / "specs"


def _rewrite(edit):
    """A mutate hook applying `edit` (text -> text) to each kernel's source and bodies; it must
    change at least one kernel."""
    def mutate(kernels):
        out, changed = [], False
        for bk in kernels:
            source = edit(bk.source)
            includes = tuple((name, edit(text)) for name, text in bk.includes)
            changed |= source != bk.source or includes != bk.includes
            out.append(dataclasses.replace(bk, source=source, includes=includes))
        assert changed, "the mutation applies to no kernel"
        return out
    return mutate


def _check(spec: str, variant: dict, mutate, sizes: dict | None = None) -> list:
    rows = check_variant(load_spec(SPECS / f"{spec}.yaml"), variant, load_target("gfx942"), sizes=sizes, mutate=mutate)
    return [r for r in rows if not r.ok]


def test_unmutated_kernels_pass():
    assert _check("matmul", {"dtype": "bf16"}, None) == []


def test_wrong_lane_order_in_ds_bpermute():
    """shfl_xor asks ds_bpermute for lane ^ mask; asking for lane ^ mask ^ 1 breaks softmax's
    row reductions: the lanes of a wave end with different row sums, so the lanes that write a
    wave's sum into the cross-wave scratch write different values into one LDS slot (a race),
    or, where one lane writes it, the rows come out wrong (a mismatch)."""
    header = (templates_dir() / "hip" / "kgen_hip.h").read_text()
    wrong = header.replace("((lane ^ mask) << 2", "((lane ^ mask ^ 1) << 2")
    assert wrong != header

    def mutate(kernels):
        return [dataclasses.replace(bk, includes=(*bk.includes, ("kgen_hip.h", wrong))) for bk in kernels]
    bad = _check("softmax", {"dtype": "fp32", "ROW": 4096}, mutate)
    assert bad and all(r.verdict == "mismatch" or (r.verdict == "error" and "a race" in r.detail) for r in bad), bad


def test_removed_barrier_is_a_race():
    """matmul writes the next A and B tiles to its one LDS buffer each after the MFMAs of this
    iteration read them, behind a barrier; without it a wave overwrites what another still reads."""
    def drop_second_sync(text):
        # the first is the one after the tiles written before the loop; the second, the loop
        # body's barrier before its writes
        first = text.find("kg::sync();")
        second = text.find("kg::sync();", first + 1)
        return text if second < 0 else text[:second] + text[second + len("kg::sync();"):]
    bad = _check("matmul", {"dtype": "bf16"}, _rewrite(drop_second_sync))
    assert len(bad) == 1 and bad[0].verdict == "error" and "race" in bad[0].detail, bad


def test_lds_index_off_by_one():
    """The first store into an LDS view (a buffer carved out of smem) one element further on:
    a slot the readers expect stays unwritten, or a neighbour's is overwritten."""
    def shift(text):
        views = re.findall(r"(\w+) = reinterpret_cast<[^>]+>\(smem \+ \d+\);", text)
        for v in views:
            m = re.search(rf"\b{v}\[(.+?)\] = ", text)
            if m:
                return text[:m.start()] + f"{v}[{m.group(1)} + 1] = " + text[m.end():]
        return text
    bad = _check("matmul", {"dtype": "bf16"}, _rewrite(shift))
    assert bad and bad[0].verdict in ("error", "mismatch"), bad


def test_mfma_operands_swapped():
    def swap(text):
        return re.sub(r"(kg::mfma_\w+\(&\w+\[0\]), (&\w+\[0\]), (&\w+\[0\])\)", r"\1, \3, \2)", text)
    bad = _check("matmul", {"dtype": "bf16"}, _rewrite(swap))
    assert bad and all(r.verdict == "mismatch" or (r.verdict == "error" and "a race" in r.detail) for r in bad), bad


def test_a_tile_written_ahead_into_the_slot_being_read():
    """The forward at head_dim 64 loads each key block an iteration ahead and writes it into the
    other slot of k's buffer (kgen/ir/passes/staged_loads.py); written into this iteration's slot
    instead, the next iteration reads a slot no one wrote, or stale keys."""
    def same_slot(text):
        # `next = count + 1;` then the ahead slot `buf + next % 2 * ...`: make it `count % 2`
        return re.sub(r"(const int (v\d+) = (v\d+) \+ 1;[^\n]*\n\s*kg_half\* v\d+ = v\d+ \+ )\2 % 2",
                      r"\1\3 % 2", text)
    # three key blocks below SK, so that the loop over them writes ahead (the check's own sizes
    # give it one, and the last partial block a loop of its own)
    bad = _check("fa2_fwd", {"dtype": "bf16", "head_dim": 64, "causal": False}, _rewrite(same_slot), {"SK": 3 * 64 + 33})
    assert bad and all(r.verdict in ("error", "mismatch") for r in bad), bad
