"""The lane simulation's global -> shared copies (cp.async): every thread's 16-byte chunks as the
template computes them, landing in commit groups (ProgramSim mixes this in; lane_sim.py)."""
from __future__ import annotations

import numpy as np

from kgen.ir.core import ELEM_BYTES


class SimError(Exception):
    """The emitted code would do something the simulation refuses (or cannot model)."""


class AsyncCopySim:
    def op_alloc_shared(self, c):
        name = c["out"]["name"]
        op = self.staged[name]
        self.note(f"{c['ctype']}* {name} = reinterpret_cast<{c['ctype']}*>(smem + {c['offset']});")
        self.smem[name] = np.full(op.attrs["bytes"] // ELEM_BYTES[op.result.dtype], np.nan)

    def op_copy_async(self, c):
        """Every thread's chunks, as the template computes them; the writes form one group."""
        st = c["stepped"]
        chunk_lines = ((f"const int r0_ = {st['row0']}, k0_ = {st['col0']};",
                        f"const int64_t o0_ = q_ + ((int64_t)r0_ * {st['stride']} + k0_);",
                        f"for (int i = 0; i < {c['iters']}; ++i) {{", f"const int r_ = r0_ + i * {st['rows']}, k_ = k0_;",
                        f"const int64_t off_ = o0_ + (int64_t)(i * {st['rows']}) * {st['stride']};") if st else
                       (f"for (int i = 0; i < {c['iters']}; ++i) {{", f"const int c_ = {c['chunk']};",
                        f"const int r_ = {c['row']}, k_ = {c['col']};", f"const int64_t off_ = {c['off']};"))
        for line in (f"if ({c['pred']}) {{", f"const {c['ctype']}* p_ = {c['ptr']} + ({c['base']});",
                     f"const int64_t q_ = {c['corner']};", *chunk_lines, f"const int i0_ = {c['i0']}, i1_ = {c['i1']};",
                     f"const int slot_ = {c['slot']};", f"const int n_ = {c['count']};",
                     f"kg::cp_async<{c['bytes']}>(&{c['src']}[slot_], n_ > 0 ? p_ + off_ : p_, n_ * {c['bytes'] // c['vec']});",
                     "kg::cp_async_commit();"):
            self.note(line)
        writes = []
        if bool(self.ev(c["pred"])):
            flat, buf = self.tensors[c["tensor"]].reshape(-1), self.smem[c["src"]]
            for i in range(c["iters"]):
                ch = self.grid_shape(self.ev(c["chunk"], i=i), 1)[..., 0]
                if st:  # the thread's first chunk, then i whole steps down (no guard: chunks fill every step)
                    r0 = self.grid_shape(self.ev(st["row0"]), 1)[..., 0]
                    k = self.grid_shape(self.ev(st["col0"]), 1)[..., 0]
                    r, stride = r0 + i * st["rows"], self.ev(st["stride"])
                    ok = np.ones_like(r, dtype=bool)
                    off = self.ev(c["base"]) + self.ev(c["corner"]) + r0 * stride + k + i * st["rows"] * stride
                else:
                    ok = ch < c["chunks"]
                    r, k = self.ev(c["row"], c_=ch), self.ev(c["col"], c_=ch)
                    off = self.ev(c["base"]) + self.ev(c["off"], r_=r, k_=k, q_=self.ev(c["corner"]))
                i0, i1 = self.ev(c["i0"], r_=r, k_=k), self.ev(c["i1"], r_=r, k_=k)
                slot = self.ev(c["slot"], r_=r, k_=k, i=i, c_=ch)
                if np.ndim(slot) == 3:  # written from lane and warp (a hoisted first-chunk slot)
                    slot = self.grid_shape(slot, 1)[..., 0]
                b0, b1 = self.ev(c["bound0"]), self.ev(c["bound1"])
                count = self.ev(c["count"], i0_=i0, i1_=i1)  # the elements the copy reads (the rest zero-filled)
                for v in range(c["vec"]):
                    inside = ok & (i0 < b0) & (i1 + v < b1)
                    if ((v < count) != inside)[ok].any():
                        raise SimError(f"async copy of {c['tensor']}: its count {c['count']} disagrees with the bounds")
                    self._check_range(f"async copy of {c['tensor']}", (off + v)[inside], flat.size)
                    self._check_range(f"async copy into {c['src']}", (slot + v)[ok], buf.size)
                    writes.append((c["src"], (slot + v)[ok], np.where(inside, flat[np.where(inside, off + v, 0)], 0.0)[ok]))
        self.groups.append(writes)
        if self.land == "at_issue":
            self._land(len(self.groups))

    def _land(self, n: int) -> None:
        for group in self.groups[:n]:
            for buf, slot, value in group:
                self.smem[buf][slot] = value
        self.groups = self.groups[n:]

    def op_wait_async(self, c):
        self.note(f"kg::cp_async_wait<{c['pending']}>();")
        self._land(max(0, len(self.groups) - c["pending"]))
