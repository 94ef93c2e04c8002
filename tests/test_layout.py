"""Layout.covers_tile (a rank test over GF(2)) against counting every owner's coordinate; the
default 1-D layout's vector width."""
from __future__ import annotations

import random

import pytest

from kgen.layout import Layout, blocked1d, vector_width


def _enumerated(lay: Layout) -> bool:
    coords = lay.owners()
    total = 1
    for s in lay.shape:
        total *= s
    return len(coords) == total and all(all(0 <= c < s for c, s in zip(x, lay.shape)) for x in coords)


def _random_layout(rng: random.Random, shape: tuple[int, int]) -> Layout:
    """Bases drawn from unit vectors (a permutation, as real layouts are), zeros (copies), sums
    of two (still linear) and now and then a vector out of the tile."""
    units = [(1 << b, 0) for b in range(shape[0].bit_length() - 1)] + [(0, 1 << b) for b in range(shape[1].bit_length() - 1)]
    rng.shuffle(units)
    bases = []
    for u in units[: rng.randint(max(0, len(units) - 2), len(units))]:
        r = rng.random()
        if r < 0.1:
            bases.append((0, 0))
        if r < 0.2 and bases:
            bases.append(tuple(a ^ b for a, b in zip(u, bases[-1])))
        elif r < 0.25:
            bases.append((shape[0], 0))
        else:
            bases.append(u)
    cut1, cut2 = sorted(rng.randint(0, len(bases)) for _ in range(2))
    return Layout(shape, tuple(bases[:cut1]), tuple(bases[cut1:cut2]), tuple(bases[cut2:]))


def test_rank_test_agrees_with_enumeration():
    rng = random.Random(7)
    seen = {True: 0, False: 0}
    for _ in range(400):
        lay = _random_layout(rng, (rng.choice([1, 2, 8, 16, 64]), rng.choice([1, 4, 32, 128])))
        want = _enumerated(lay)
        assert lay.covers_tile() == want, lay
        seen[want] += 1
    assert seen[True] > 50 and seen[False] > 50  # both answers were exercised


@pytest.mark.parametrize("bases,covers", [
    (((0, 1), (1, 0)), True),
    (((0, 1), (0, 1)), False),            # the same column twice: row 1 unowned
    (((0, 1), (1, 1)), True),             # a sum of two bases still spans the tile
    (((0, 1), (0, 0), (1, 0)), True),     # a zero basis: copies
    (((0, 1), (2, 0)), False),            # outside a 2x2 tile
])
def test_small_cases(bases, covers):
    lay = Layout((2, 2), bases, (), ())
    assert lay.covers_tile() is covers
    assert _enumerated(lay) is covers


@pytest.mark.parametrize("n, threads, vec, want", [
    (4096, 128, 8, 8),   # a 16-bit row over 4 warps: 16-byte vectors, twice
    (1024, 128, 4, 4),   # fp32: 4 a vector
    (512, 128, 8, 4),    # only 4 elements a thread: narrower, every thread keeps one
    (64, 128, 8, 1),     # fewer elements than threads: one each, the rest copies
])
def test_a_1d_tile_takes_vectors_while_every_thread_keeps_an_element(n, threads, vec, want):
    lay = blocked1d(n, lanes=32, warps=threads // 32, vec=vec)
    assert vector_width(lay, 0) == want
    assert lay.covers_tile()
    assert lay.nregs == max(1, n // threads)
