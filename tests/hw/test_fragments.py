"""Lane-level simulation of every matrix instruction of every target, on the CPU.

Two independent statements have to agree here: the fragment layouts in kgen/hw/data/*.yaml (read
through kgen.layout.Layout) and the ISA's own index formulas, written out below as plain
arithmetic. Each lane's A and B registers are filled through the YAML layouts; an emulator that
knows only the ISA formulas computes D = A @ B from those registers and writes D into lane
registers; D is gathered back through the YAML's C layout and compared with torch's matmul.
"""
import math

import pytest
import torch

from kgen.hw.descriptor import all_targets, load_target
from kgen.layout import Layout

# --- ISA formulas: (lane, element index within the lane) -> (row, col) of the matrix ----------

# NVIDIA PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type". Elements are the
# 16-bit values a0..a7, b0..b3 and the fp32 values c0..c3, in that order.
def ptx_m16n8k16_a(lane, i):
    group, tig = lane >> 2, lane % 4
    row = group if (0 <= i < 2 or 4 <= i < 6) else group + 8
    col = tig * 2 + (i & 1) if i < 4 else tig * 2 + (i & 1) + 8
    return row, col


def ptx_m16n8k16_b(lane, i):
    group, tig = lane >> 2, lane % 4
    row = tig * 2 + (i & 1) if i < 2 else tig * 2 + (i & 1) + 8
    return row, group


def ptx_m16n8k16_c(lane, i):
    group, tig = lane >> 2, lane % 4
    row = group if i < 2 else group + 8
    return row, tig * 2 + (i & 1)


# AMD CDNA MFMA (AMD matrix instruction calculator, gfx9 formulas; AMD lab notes "AMD matrix
# cores" examples): A[i][k], B[k][j], D[i][j]; r is the element within the lane's registers.
def mfma_32x32x8_a(lane, r):
    return lane % 32, 4 * (lane // 32) + r


def mfma_32x32x8_b(lane, r):
    return 4 * (lane // 32) + r, lane % 32


def mfma_32x32x8_d(lane, r):
    return 8 * (r // 4) + 4 * (lane // 32) + r % 4, lane % 32


def mfma_16x16x16_a(lane, r):
    return lane % 16, 4 * (lane // 16) + r


def mfma_16x16x16_b(lane, r):
    return 4 * (lane // 16) + r, lane % 16


def mfma_16x16x16_d(lane, r):
    return 4 * (lane // 16) + r, lane % 16


# (backend, m, n, k) -> lanes, (formula, elements per lane) for A, B and D.
ISA = {
    ("cuda", 16, 8, 16): (32, (ptx_m16n8k16_a, 8), (ptx_m16n8k16_b, 4), (ptx_m16n8k16_c, 4)),
    ("hip", 32, 32, 8): (64, (mfma_32x32x8_a, 4), (mfma_32x32x8_b, 4), (mfma_32x32x8_d, 16)),
    ("hip", 16, 16, 16): (64, (mfma_16x16x16_a, 4), (mfma_16x16x16_b, 4), (mfma_16x16x16_d, 4)),
}


def _unpack(regs, formula, per_lane, shape):
    """Rebuild a matrix from lane registers as the hardware reads them; every entry once."""
    out = torch.full(shape, math.nan, dtype=torch.float64)
    for lane in range(regs.shape[0]):
        for e in range(per_lane):
            pos = formula(lane, e)
            assert math.isnan(out[pos]), f"ISA formula hits {pos} twice"
            out[pos] = regs[lane, e]
    assert not out.isnan().any(), "ISA formula leaves part of the tile empty"
    return out


def emulate(key, m, n, k, a_regs, b_regs):
    """D registers of one instruction (C = 0), from the A and B registers, per the ISA only."""
    lanes, (fa, na), (fb, nb), (fd, nd) = ISA[key]
    assert a_regs.shape == (lanes, na) and b_regs.shape == (lanes, nb)
    a = _unpack(a_regs, fa, na, (m, k))
    b = _unpack(b_regs, fb, nb, (k, n))
    d = a @ b  # fp32 accumulation on hardware; inputs here are exact, so float64 is the reference
    return torch.tensor([[d[fd(lane, e)] for e in range(nd)] for lane in range(lanes)])


def _fill(layout: Layout, mat):
    """Lane registers loaded through a YAML layout: regs[lane, r] = mat[coord(r, lane)]."""
    return torch.tensor([[mat[layout.coord(r, lane, 0)] for r in range(layout.nregs)]
                         for lane in range(layout.nlanes)], dtype=torch.float64)


def _gather(layout: Layout, regs, shape):
    out = torch.full(shape, math.nan, dtype=torch.float64)
    for lane in range(layout.nlanes):
        for r in range(layout.nregs):
            out[layout.coord(r, lane, 0)] = regs[lane, r]
    return out


CASES = [(t.name, mi.name) for t in all_targets() for mi in t.matrix_instrs if mi.scope == "warp"]
WARPGROUP_CASES = [(t.name, mi.name) for t in all_targets() for mi in t.matrix_instrs if mi.scope == "warpgroup"]


# NVIDIA PTX ISA, wgmma .m64nNk16 register fragments ("Register Fragments and Shared Memory
# Matrix Layouts"): warp w of the warpgroup holds rows 16w..16w+15. A (16-bit, when read from
# registers): a0..a7 as in mma.m16n8k16. D (fp32): d_i in row 16w + lane / 4 + 8 ((i / 2) % 2),
# column 8 (i / 4) + 2 (lane % 4) + i % 2.
def wgmma_a(warp, lane, i):
    row, col = ptx_m16n8k16_a(lane, i)
    return 16 * warp + row, col


def wgmma_d(warp, lane, i):
    return 16 * warp + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2


@pytest.mark.parametrize("target,instr", WARPGROUP_CASES)
def test_warpgroup_layouts_agree_with_isa(target, instr):
    mi = load_target(target).matrix_instr(instr)
    assert (mi.m, mi.k, mi.warps) == (64, 16, 4) and mi.b_from == ("shared",)
    for op, formula, per_lane in (("a", wgmma_a, 8), ("c", wgmma_d, mi.n // 2)):
        lay = mi.layout(op)
        assert lay.nregs == per_lane and lay.nlanes == 32 and lay.nwarps == 4
        for w in range(4):
            for lane in range(32):
                for i in range(per_lane):
                    assert lay.coord(i, lane, w) == formula(w, lane, i), (op, w, lane, i)
        assert lay.covers_tile()


def _inputs(mi, seed=0):
    g = torch.Generator().manual_seed(seed)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[mi.ab_dtype]
    # Round to the input dtype so every product is exact in float64.
    a = torch.randn(mi.m, mi.k, generator=g, dtype=torch.float64).to(dt).to(torch.float64)
    b = torch.randn(mi.k, mi.n, generator=g, dtype=torch.float64).to(dt).to(torch.float64)
    return a, b


def _simulate(target, mi, layouts):
    a, b = _inputs(mi)
    key = (target.backend, mi.m, mi.n, mi.k)
    d_regs = emulate(key, mi.m, mi.n, mi.k, _fill(layouts["a"], a), _fill(layouts["b"], b))
    return _gather(layouts["c"], d_regs, (mi.m, mi.n)), a @ b


@pytest.mark.parametrize("target,instr", CASES)
def test_layouts_agree_with_isa(target, instr):
    t = load_target(target)
    mi = t.matrix_instr(instr)
    layouts = {op: mi.layout(op) for op in "abc"}
    lanes, *per_lane = ISA[(t.backend, mi.m, mi.n, mi.k)]
    assert lanes == t.wave_size
    assert [layouts[op].nregs for op in "abc"] == [n for _, n in per_lane]
    got, want = _simulate(t, mi, layouts)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-9)


@pytest.mark.parametrize("target,instr", CASES)
@pytest.mark.parametrize("op", "abc")
def test_layout_is_a_bijection_onto_its_tile(target, instr, op):
    t = load_target(target)
    mi = t.matrix_instr(instr)
    layout = mi.layout(op)
    rows, cols = layout.shape
    assert layout.nlanes == t.wave_size and layout.nwarps == 1
    assert layout.nregs * layout.nlanes == rows * cols
    assert layout.covers_tile()
    assert all(len(v) == 1 for v in layout.owners().values())
    assert mi.layout("d") == mi.layout("c")


@pytest.mark.parametrize("target,instr", [CASES[0], CASES[-1]])
def test_simulation_catches_a_wrong_layout(target, instr):
    """The check has teeth: swapping two lane bits of the C layout must break agreement."""
    t = load_target(target)
    mi = t.matrix_instr(instr)
    layouts = {op: mi.layout(op) for op in "abc"}
    c = layouts["c"]
    lane = list(c.lane)
    lane[0], lane[-1] = lane[-1], lane[0]
    layouts["c"] = Layout(shape=c.shape, reg=c.reg, lane=tuple(lane), warp=c.warp)
    got, want = _simulate(t, mi, layouts)
    assert not torch.allclose(got, want)
