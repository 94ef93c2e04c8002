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
                        f"KG_FOR(i, {c['iters']}) {{", f"const int r_ = r0_ + i * {st['rows']}, k_ = k0_;",
                        f"const int64_t off_ = o0_ + (int64_t)(i * {st['rows']}) * {st['stride']};") if st else
                       (f"KG_FOR(i, {c['iters']}) {{", f"const int c_ = {c['chunk']};",
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
                    # the destination as the copy's address names it now: a slot view's name is
                    # bound again each iteration, and a copy issued S - 1 iterations ahead lands later
                    writes.append((buf, (slot + v)[ok], np.where(inside, flat[np.where(inside, off + v, 0)], 0.0)[ok]))
        self.groups.append(writes)
        if self.land == "at_issue":
            self._land(len(self.groups))

    def _land(self, n: int) -> None:
        for group in self.groups[:n]:
            for buf, slot, value in group:
                buf[slot] = value
        self.groups = self.groups[n:]

    def op_wait_async(self, c):
        self.note(f"kg::cp_async_wait<{c['pending']}>();")
        self._land(max(0, len(self.groups) - c["pending"]))


class TensorCopySim:
    """Tensor copies (TMA) as the hardware does them, not as kgen's layout says: the box read
    row-major (innermost dim fastest, out-of-bounds elements zero) and written from the
    destination on, each byte address with bits 4-6 XORed by bits 7-9 (the 128-byte swizzle;
    the destination a whole number of 1024-byte atoms into its 1024-aligned buffer). Each
    barrier counts completed phases (a copy: when issued; tma_reset's arrivals) and phases
    waited for; a wait with nothing left to wait for would hang, and one for the wrong parity
    would pass early or hang."""

    def _tma_state(self):  # per block: reset by ProgramSim.run_block
        return self.tma_done, self.tma_waited, self.tma_pending

    def op_tma_copy(self, c):
        lines = [f"if ({c['guard']}) {{", f"uint64_t* bar_ = &kg_bars[{c['bar']}];",
                 f"kg::mbar_expect_tx(bar_, {c['bytes']});"]
        lines += [f"kg::tma_load_{c['rank']}d(&{c['dst']}[{b['slot']}], &{c['map']}, bar_, {', '.join(b['coords'])});"
                  for b in c["boxes"]]
        for line in lines:
            self.note(line)
        done, _, pending = self._tma_state()
        if not bool(self.ev(c["pred"])):
            return
        bar = int(self.ev(c["bar"]))
        t = self.tensors[c["tensor"]]
        dims, box, elem = t.shape[::-1], c["box"], c["elem"]
        rank = len(box)
        at = np.indices(tuple(reversed(box))).reshape(rank, -1)[::-1]  # at[d]: index along dim d (innermost first)
        writes, moved = [], 0
        buf = self.smem[c["dst"]]
        for b in c["boxes"]:
            start = int(self.ev(b["slot"])) * elem
            if start % 1024:
                raise SimError(f"tensor copy into {c['dst']} starts {start} bytes in, not on a 1024-byte swizzle atom")
            g = [int(self.ev(x)) + at[d] for d, x in enumerate(b["coords"])]
            inside = np.all([(g[d] >= 0) & (g[d] < dims[d]) for d in range(rank)], axis=0)
            idx = tuple(np.where(inside, g[d], 0) for d in reversed(range(rank)))
            values = np.where(inside, t[idx], 0.0)
            addr = start + np.arange(at.shape[1]) * elem
            addr = addr ^ (((addr >> 7) & 7) << 4)
            self._check_range(f"tensor copy into {c['dst']}", addr // elem, buf.size)
            writes.append((buf, addr // elem, values))  # the slot itself: a producer may rebind the name before it lands
            moved += at.shape[1] * elem
        if moved != c["bytes"]:
            raise SimError(f"tensor copy of {c['tensor']} expects {c['bytes']} bytes but its boxes move {moved}: the wait would hang")
        done[bar] = done.get(bar, 0) + 1
        pending.setdefault(bar, []).append(writes)
        if self.land == "at_issue":
            self._tma_land(bar)

    def _tma_land(self, bar: int) -> None:
        for buf, slot, value in self.tma_pending[bar].pop(0):
            buf[slot] = value

    def op_tma_wait(self, c):
        self.note(f"kg::mbar_wait(&kg_bars[{c['bar']}], {c['parity']});")
        done, waited, pending = self._tma_state()
        bar, parity = int(self.ev(c["bar"])), int(self.ev(c["parity"]))
        if waited.get(bar, 0) >= done.get(bar, 0):
            self.advance_producer(bar)  # a ring's copies come from the producer (RingSim)
        if waited.get(bar, 0) >= done.get(bar, 0):
            raise SimError(f"wait on barrier {bar} with no copy in flight: it would hang")
        if parity != waited.get(bar, 0) % 2:
            raise SimError(f"wait on barrier {bar} for parity {parity}, but its next phase has parity {waited.get(bar, 0) % 2}")
        waited[bar] = waited.get(bar, 0) + 1
        if pending.get(bar):
            self._tma_land(bar)

    def op_tma_reset(self, c):
        self.note(f"const int n_ = {c['n']};")
        done, waited, pending = self._tma_state()
        n = int(self.ev(c["n"]))
        for f in c["flips"]:
            self.note(f"if (({f['uses']}) & 1) kg::mbar_arrive(&kg_bars[{f['bar']}]);")
            if int(self.ev(f["uses"], n_=n)) % 2:
                bar = f["bar"]
                if waited.get(bar, 0) != done.get(bar, 0):
                    raise SimError(f"arrival on barrier {bar} while a copy it counts is not waited for")
                done[bar] = waited[bar] = done.get(bar, 0) + 1


class RingSim:
    """Warp specialization (kgen/ir/passes/specialize.py): the producer warpgroup's program runs
    as a coroutine beside the computing warps, which the simulation runs together. It is stepped
    when they wait on a full barrier no copy has completed yet and whenever they give a slot
    back, and runs until an acquire blocks or it ends. Each ring slot's empty barrier counts its completed phases, one per release (every
    computing warp arrives at once here); an acquire passes as mbarrier.try_wait.parity does, when
    the phase of the parity it names is the last completed one: the current phase's parity
    differs. A copy landing at issue (`land="at_issue"`) then shows a release placed before the
    slot's last read, a wrong acquire parity either a copy over a slot still in use or a hang, and
    the block's end a producer still blocked or copies nobody waited for."""

    def start_rings(self) -> None:  # per block: ProgramSim.run_block
        self.producer, self.released, self.turns = None, {}, []

    def op_turn(self, c):
        """Ping-pong's turns (kgen/ir/passes/pingpong.py), recorded in order: the computing
        warpgroups run them in lockstep here, so finish_rings replays each warpgroup's sequence
        as its own process against the named barriers."""
        lines = {"start": f"if ({c['warpgroup']} == 1) kg::arrive_named(2, {c['threads']});",
                 "take": f"kg::sync_named(2 + {c['warpgroup']}, {c['threads']});",
                 "give": f"kg::arrive_named(3 - {c['warpgroup']}, {c['threads']});",
                 "finish": f"if ({c['warpgroup']} == 0) kg::sync_named(2, {c['threads']});"}
        self.note(lines[c["step"]])
        self.turns.append(c["step"])

    def _replay_turns(self) -> None:
        """Warpgroup g's turn is barrier g: its take consumes an arrival of the other warpgroup's
        there (its give, or start's), finish consumes the last. Interleaved as far as each can
        go, both must reach the end with no arrival left over."""
        if not self.turns:
            return
        pending = [0, 0]  # arrivals at barrier g not yet consumed by warpgroup g's sync
        pos = [0, 0]
        while pos != [len(self.turns)] * 2:
            moved = False
            for g in (0, 1):
                while pos[g] < len(self.turns):
                    step = self.turns[pos[g]]
                    if step == "start" and g == 1 or step == "give":
                        pending[1 - g] += 1
                    elif step == "take" or step == "finish" and g == 0:
                        if not pending[g]:
                            break
                        pending[g] -= 1
                    pos[g] += 1
                    moved = True
            if not moved:
                raise SimError(f"the warpgroups' turns deadlock (warpgroup 0 at {pos[0]}, 1 at {pos[1]} of {self.turns})")
        if pending != [0, 0]:
            raise SimError(f"turns left half-arrived at the block's end: {pending}")

    def op_producer(self, c):
        for line in (f"if (warp >= {c['first_warp']}) {{", f"kg::setmaxnreg_dec<{c['regs']}>();",
                     f"if (warp == {c['first_warp']} && lane == 0) {{", f"kg::setmaxnreg_inc<{c['consumer_regs']}>();"):
            self.note(line)
        self.producer = self._produce(c["body"])

    def _produce(self, ctxs):
        """The producer's program, yielding wherever an acquire cannot pass yet."""
        for c in ctxs:
            if c["macro"] == "for_loop":
                self.note(f"for (int {c['iv']} = {c['start']}; {c['iv']} < {c['stop']}; {c['iv']} += {c['step']})")
                for it in range(int(self.ev(c["start"])), int(self.ev(c["stop"])), int(self.ev(c["step"]))):
                    self.scalars[c["iv"]] = it
                    yield from self._produce(c["body"])
            elif c["macro"] == "acquire":
                self.note(f"kg::mbar_wait(&kg_bars[{c['bar']}], {c['parity']});")
                bar, parity = int(self.ev(c["bar"])), int(self.ev(c["parity"]))
                while self.released.get(bar, 0) % 2 == parity:
                    yield bar
            elif c["macro"] != "yield_values":
                getattr(self, "op_" + c["macro"])(c)

    def advance_producer(self, bar: int) -> None:
        """Run the producer until the computing warps' wait on `bar` can pass, it blocks, or it ends."""
        while self.producer is not None and self.tma_waited.get(bar, 0) >= self.tma_done.get(bar, 0):
            try:
                next(self.producer)
            except StopIteration:
                self.producer = None
                return
            if self.tma_waited.get(bar, 0) >= self.tma_done.get(bar, 0):
                return  # blocked on an acquire that only the computing warps can release: a hang

    def op_acquire(self, c):
        raise SimError("an acquire outside a producer's program")

    def op_release(self, c):
        self.note("kg::sync_warp();")
        self.note(f"if (lane == 0) kg::mbar_arrive(&kg_bars[{c['bar']}]);")
        bar = int(self.ev(c["bar"]))
        self.released[bar] = self.released.get(bar, 0) + 1
        # the producer refills the slot at once, the earliest the hardware may: a copy landing at
        # issue then overwrites what a release placed before the last read still has to read
        if self.producer is not None:
            try:
                next(self.producer)
            except StopIteration:
                self.producer = None

    def finish_rings(self) -> None:
        """The block's end: the producer must end too, every copy waited for, the turns balanced."""
        self._replay_turns()
        if self.producer is not None:
            for _ in self.producer:
                raise SimError("the producer is still waiting for a slot at the block's end: it would hang")
        left = {b: n - self.tma_waited.get(b, 0) for b, n in self.tma_done.items() if n != self.tma_waited.get(b, 0)}
        if left:
            raise SimError(f"copies nobody waited for at the block's end (barrier: count) {left}")
