"""The lane simulation's warpgroup instructions (wgmma, sm_90): operands read from registers or
through matrix descriptors in the PTX ISA's canonical layouts, the product scattered over the
accumulator registers of a warpgroup's 4 warps, and deferred instructions checked at their wait
(tests/codegen/lane_sim.py composes this into ProgramSim)."""
from __future__ import annotations

import numpy as np

from kgen.hw.descriptor import Target
from kgen.ir.core import ELEM_BYTES
from lane_sim_copies import SimError


def descriptor_element(mn: np.ndarray, kk: np.ndarray, major: str, lead: int, stride: int, elem: int,
                       mode: int = 0) -> np.ndarray:
    """Byte offset, from the descriptor's start address, of element (mn, k) of an operand read
    through a matrix descriptor, before any swizzle: the PTX ISA's canonical layouts. No swizzle
    (mode 0): core matrices of 8 rows x 16 bytes, the leading byte offset steps between cores
    along K, the stride byte offset between cores along M or N; K-major a core row runs along K,
    MN-major (transposed) along M or N. 128-byte swizzle (mode 1): rows of 128 bytes, 8 to an
    atom; K-major a row runs along K and the stride offset steps 8 rows of M or N; MN-major a row
    runs along M or N, the leading offset steps 128 bytes of M or N and the stride offset 8 rows
    of K. The swizzle itself acts on the address (`swizzled`)."""
    t = 16 // elem
    if mode == 1:
        e = 128 // elem
        if major == "k":
            return (mn // 8) * stride + (mn % 8) * 128 + kk * elem
        return (mn // e) * lead + (mn % e) * elem + (kk // 8) * stride + (kk % 8) * 128
    if major == "k":
        return (mn // 8) * stride + (mn % 8) * 16 + (kk // t) * lead + (kk % t) * elem
    return (mn // t) * stride + (mn % t) * elem + (kk // 8) * lead + (kk % 8) * 16


def swizzled(byte: np.ndarray, mode: int) -> np.ndarray:
    """The 128-byte swizzle as the hardware applies it to a shared address (from a 1024-byte
    aligned base): bits 4-6, the 16-byte chunk, XOR bits 7-9, the row within the atom."""
    return byte ^ (((byte >> 7) & 7) << 4) if mode == 1 else byte


def _warpgroup_coords(target: Target, instr_name: str, operand: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols), each (warps of the group, lanes, regs), of a warpgroup fragment."""
    lay = target.matrix_instr(instr_name).layout(operand)
    c = np.array([[[lay.coord(r, lane, w) for r in range(lay.nregs)] for lane in range(lay.nlanes)]
                  for w in range(lay.nwarps)])
    return c[..., 0], c[..., 1]


class WarpgroupSim:
    """wgmma for ProgramSim (mixed in): descriptors read as the PTX ISA lays out core matrices."""

    def _wgmma_operand(self, c: dict, role: str, g: int, ks: int, rep: int, mi) -> np.ndarray:
        """Operand `role` of one instruction of warpgroup g: (m, k) for A, (k, n) for B."""
        f = c[role]
        gw = slice(g * mi.warps, (g + 1) * mi.warps)
        repvar = "rm" if role == "a" else "rn"
        if f["kind"] == "reg":
            src = self.regs[f["ptr"][1:f["ptr"].index("[")]]
            first = self.grid_shape(self.ev(f["ptr"][f["ptr"].index("[") + 1:-1], ks=ks, **{repvar: rep}), 1)[..., 0]
            rows, cols = _warpgroup_coords(self.target, c["instr"], "a")
            if first.min() != first.max() or first.flat[0] < 0 or first.flat[0] + rows.shape[-1] > src.shape[-1]:
                raise SimError(f"register operand {f['ptr']} reads outside {src.shape[-1]} registers")
            first = int(first.flat[0])
            mat = np.full((mi.m, mi.k), np.nan)
            mat[rows, cols] = src[gw, :, first:first + rows.shape[-1]]
            return mat
        wg = self.ev(c["group"])
        off = self.grid_shape(self.ev(f["offset"], ks=ks, wg_=wg, **{repvar: rep}), 1)[gw, :, 0]
        if off.min() != off.max():
            raise SimError(f"descriptor offset {f['offset']} differs between the threads of warpgroup {g}")
        st = self.staged[f["src"]]
        elem = ELEM_BYTES[st.result.dtype]
        buf = self.smem[f["src"]]
        mn_len = mi.m if role == "a" else mi.n
        mn, kk = np.meshgrid(np.arange(mn_len), np.arange(mi.k), indexing="ij")
        major = "mn" if f["trans"] else "k"
        mode = f.get("mode", 0)
        if mode and st.attrs.get("smem_offset", 0) % 1024:
            raise SimError(f"swizzled buffer {f['src']} starts at {st.attrs.get('smem_offset')}, not on a 1024-byte atom")
        byte = swizzled(int(off.flat[0]) * 16 + descriptor_element(mn, kk, major, f["lead"], f["stride"], elem, mode), mode)
        if (byte % elem).any():
            raise SimError(f"descriptor read of {f['src']} is not element-aligned")
        self._check_range(f"descriptor read of {f['src']}", byte // elem, buf.size)
        vals = buf[byte // elem]  # (mn, k)
        return vals if role == "a" else vals.T


    def op_wgmma_dot(self, c: dict) -> None:
        """One wgmma dot: per warpgroup, k-step and repeat, D += A @ B with A from registers or a
        descriptor and B from a descriptor, D scattered through the C fragment (with warp bits).
        A deferred dot (passes/overlap.py) is computed at issue and again at its dot_wait, from
        the shared memory of that moment: a write that overtook the instruction's reads shows
        as a different product there."""
        out, acc = c["out"]["name"], self.accumulator(c)
        acc_text = c["acc_at"]
        a_text = c["a"]["ptr"] if c["a"]["kind"] == "reg" else f"{c['a']['desc']} + {c['a']['offset']}"
        self.note(f"kg::{c['fn']}{c['targs']}(&{out}[{acc_text}], {a_text}, {c['b']['desc']} + {c['b']['offset']}, {c['scale_d']});")
        for f in (c["a"], c["b"]):
            if f["kind"] == "desc":
                self.note(f"const uint64_t {f['desc']} = kg::wgmma_desc({f['src']}, {f['lead']}, {f['stride']}, {f['mode']});")
        if not c.get("deferred"):
            self.note("kg::wgmma_wait<0>();")
        if c["group"] != "0":
            self.note(f"const int wg_ = {c['group']};")
        before = acc.copy()
        self._wgmma_apply(c, acc, acc_text)
        if c.get("deferred"):
            self.in_flight[out] = (c, before, acc.copy(), acc_text)
        self.dots_run += 1

    def _wgmma_apply(self, c: dict, acc: np.ndarray, acc_text: str) -> None:
        mi = self.target.matrix_instr(c["instr"])
        rows, cols = _warpgroup_coords(self.target, c["instr"], "c")
        if self.W % mi.warps:
            raise SimError(f"{self.W} warps do not form whole warpgroups")
        for g in range(self.W // mi.warps):
            gw = slice(g * mi.warps, (g + 1) * mi.warps)
            for ks in range(c["ksteps"]):
                for rm in range(c["reps_m"]):
                    for rn in range(c["reps_n"]):
                        a = self._wgmma_operand(c, "a", g, ks, rm, mi)
                        b = self._wgmma_operand(c, "b", g, ks, rn, mi)
                        first = int(self.ev(acc_text, rm=rm, rn=rn))
                        if first < 0 or first + c["nc"] > acc.shape[-1]:
                            raise SimError(f"instruction ({rm}, {rn}) writes accumulator registers {first}.. of {acc.shape[-1]}")
                        prod = (a @ b)[rows, cols]
                        if self.ev(c["scale_d"], ks=ks):  # scale-d 0: D = A B, the old D ignored
                            acc[gw, :, first:first + c["nc"]] += prod
                        else:
                            acc[gw, :, first:first + c["nc"]] = prod

    def op_dot_wait(self, c: dict) -> None:
        self.note(f"kg::wgmma_wait<{c['pending']}>();")
        self.note(f"float (&{c['out']['name']})[{c['out']['n']}] = {c['src']};")
        if c["src"] not in self.in_flight:
            raise SimError(f"dot_wait for {c['src']}, which no deferred dot issued")
        dot, before, issued, acc_text = self.in_flight.pop(c["src"])
        again = before.copy()
        self._wgmma_apply(dot, again, acc_text)
        if not np.array_equal(again, issued, equal_nan=True):
            raise SimError(f"the operands of the dot into {c['src']} changed between its issue and its wait")
        self.regs[c["out"]["name"]] = self.regs[c["src"]]
