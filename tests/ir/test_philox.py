"""kgen/ir/philox.py: Random123's published known-answer vectors for Philox4x32-10, the 16-bit
split products against Python's integers, and rand()'s range and spacing."""
from __future__ import annotations

import random

import pytest
import torch

from kgen.ir import philox

# Random123's kat_vectors for philox4x32 with 10 rounds: (counter, key, output)
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def _t(*words):
    return tuple(torch.tensor(w, dtype=torch.int64) for w in words)


@pytest.mark.parametrize("counter, key, want", KAT)
def test_known_answers(counter, key, want):
    assert tuple(int(w) for w in philox.philox4x32(_t(*counter), _t(*key))) == want


def test_mulhilo_matches_python_integers():
    rng = random.Random(0)
    xs = [0, 1, 0xFFFF, 0x10000, 0xFFFFFFFF] + [rng.getrandbits(32) for _ in range(2000)]
    for m in (philox.M0, philox.M1, 0xFFFFFFFF):
        hi, lo = philox._mulhilo(m, torch.tensor(xs, dtype=torch.int64))
        assert hi.tolist() == [(m * x) >> 32 for x in xs] and lo.tolist() == [(m * x) & 0xFFFFFFFF for x in xs]


def test_rand_is_word_offset_mod_4_of_the_call_at_offset_div_4_in_24_bits():
    seed = -(2**62) + 12345
    offsets = torch.tensor([0, 1, 2, 3, 4, 7, 2**32 + 5, 2**34 + 2, -1, -4], dtype=torch.int64)
    u = philox.rand(seed, offsets)
    assert u.dtype == torch.float32
    for o, got in zip(offsets.tolist(), u.tolist()):
        c = (o % 2**64) >> 2  # the offset as an unsigned 64-bit number, shifted
        words = philox.philox4x32(_t(c & 0xFFFFFFFF, c >> 32, 0, 0), _t(seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF))
        assert got == (int(words[o % 4]) >> 8) / 2**24
    # four consecutive offsets are the four words of one call
    assert len(set(philox.rand(seed, torch.arange(8, 12)).tolist())) == 4


def test_rand_uniform_on_unit_interval():
    u = philox.rand(7, torch.arange(200_000, dtype=torch.int64))
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.005 and abs(float(u.var()) - 1 / 12) < 0.002
    counts = torch.histc(u, bins=16, min=0.0, max=1.0)
    assert float(((counts - 12_500) ** 2 / 12_500).sum()) < 50  # chi-square, 15 degrees of freedom (p ~ 1e-5)
    assert not torch.equal(u, philox.rand(8, torch.arange(200_000)))  # another seed, other numbers
