"""The tile language's `rand(seed, offset)` and `rand8(seed, offset)` in torch: the interpreter's,
the references' and the compile-time fold's, bit for bit what kg::rand_ and kg::rand8_
(templates/common/kgen_tile.h) compute.

Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3",
SC 2011): a counter-based generator, so every element draws its number from its own counter
with no state carried between elements, programs or kernels, and a backward regenerates a
forward's numbers from the same (seed, offset). The key is the seed's 64 bits (low word first),
the counter the offset's 64 bits shifted right by two (unsigned) and two zero words; output
word offset % 4's top 24 bits give a float32 uniform on [0, 1) (exactly representable: k *
2^-24). Four consecutive offsets share a call, so that a program whose thread holds two or more
of them (kg::RandMemo) draws one call for them. `rand8(seed, offset)` takes one byte of a call at
counter offset // 16 instead (a uniform in steps of 1/256, as flash-attn's dropout compares bytes):
sixteen offsets per call.

Unsigned 32-bit arithmetic is done in int64 tensors: a 32 x 32-bit product is split in 16-bit
halves so that no partial product leaves int64's range.
"""
from __future__ import annotations

import torch

M0, M1 = 0xD2511F53, 0xCD9E8D57  # the round multipliers (the paper's Philox4x32 constants)
W0, W1 = 0x9E3779B9, 0xBB67AE85  # the key schedule's increments (golden ratio, sqrt(3) - 1)
ROUNDS = 10
MASK = 0xFFFFFFFF


def _mulhilo(m: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The high and low 32-bit words of the 64-bit product m * x (both unsigned 32-bit)."""
    x_lo, x_hi = x & 0xFFFF, x >> 16
    m_lo, m_hi = m & 0xFFFF, m >> 16
    lo_lo = x_lo * m_lo
    mid1 = x_hi * m_lo
    mid2 = x_lo * m_hi
    hi_hi = x_hi * m_hi
    mid = (lo_lo >> 16) + (mid1 & 0xFFFF) + (mid2 & 0xFFFF)
    lo = (lo_lo & 0xFFFF) | ((mid & 0xFFFF) << 16)
    hi = hi_hi + (mid1 >> 16) + (mid2 >> 16) + (mid >> 16)
    return hi & MASK, lo & MASK


def philox4x32(counter: tuple[torch.Tensor, ...], key: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Philox4x32-10 of four counter words under two key words (int64 tensors holding unsigned
    32-bit values, broadcast together)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
        hi0, lo0 = _mulhilo(M0, c0)
        hi1, lo1 = _mulhilo(M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def _words(seed: torch.Tensor | int, offset: torch.Tensor | int, shift: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The four output words of Philox4x32-10 at counter offset >> shift (unsigned), stacked on a
    last axis, and offset, both broadcast."""
    seed = torch.as_tensor(seed).to(torch.int64)
    offset = torch.as_tensor(offset).to(torch.int64)
    seed, offset = torch.broadcast_tensors(seed, offset)
    counter = (offset >> shift) & ((1 << (64 - shift)) - 1)  # the unsigned 64-bit offset shifted right
    zero = torch.zeros_like(offset)
    words = philox4x32((counter & MASK, (counter >> 32) & MASK, zero, zero), (seed & MASK, (seed >> 32) & MASK))
    return torch.stack(words, -1), offset


def rand8(seed: torch.Tensor | int, offset: torch.Tensor | int) -> torch.Tensor:
    """Uniform float32 numbers on [0, 1) in steps of 1/256, one per element: byte offset % 16 of
    Philox4x32-10 at the counter offset // 16 (unsigned; byte b is bits 8(b % 4) .. 8(b % 4) + 7 of
    word b // 4), so that sixteen consecutive offsets share one call."""
    words, offset = _words(seed, offset, 4)
    word = torch.gather(words, -1, ((offset >> 2) & 3).unsqueeze(-1)).squeeze(-1)
    return ((word >> ((offset & 3) * 8)) & 0xFF).to(torch.float32) * 2.0 ** -8


def rand(seed: torch.Tensor | int, offset: torch.Tensor | int) -> torch.Tensor:
    """Uniform float32 numbers on [0, 1), one per element of seed and offset broadcast (integers,
    read as their 64-bit two's complement): word offset % 4 of Philox4x32-10 at the counter
    offset // 4 (unsigned), so that four consecutive offsets share one call."""
    words, offset = _words(seed, offset, 2)
    word = torch.gather(words, -1, (offset & 3).unsqueeze(-1)).squeeze(-1)
    return (word >> 8).to(torch.float32) * 2.0 ** -24
