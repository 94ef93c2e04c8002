"""specs/ssd_bwd.yaml (the Mamba-2 scan's backward) on the CPU interpreter against torch autograd
through a float64 quadratic form of the forward written here (not the spec's reference, which is
the sequential recurrence): y_t = sum_{s<=t} (C_t . B_s) exp(a_t - a_s) dt'_s x_s + D x_t, with
a the cumsum of dt' A over the whole sequence, and the final state likewise. With packed
sequences (seq_idx) every term between positions of different sequences is dropped, and the
initial state reaches only sequence 0.

Tolerance: every gradient within 1% of its largest |value| (max norm), about 2.5 bf16 steps at
that value. The kernels round each dot operand to bf16 (8 significant bits, steps of 0.4% to
0.8%) and store dx, ddt, dB, dC in bf16; measured kernel errors here are at most 0.51% of the
scale (dA 3e-5 to 1.5e-3, dD 1e-7), while PyTorch's own bf16 recurrence through autograd was
0.08% to 20% off in the same kind of runs (tests/ir/test_interp_examples.py holds the spec to
twice that, a looser bound). The ablation test below shows that 1% sees a missing term: dropping
the gradient of the decay between chunks, or the softplus slope, moves ddt, dA and ddt_bias by
34% to 3100% of their scale.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for helpers
import helpers  # noqa: E402

from kgen.ops.ssd import SOFTPLUS_BELOW  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = Path(__file__).resolve().parents[2] / "specs" / "ssd_bwd.yaml"
GRADS = ("dx", "ddt", "dA", "dB", "dC", "dD", "ddt_bias", "dinitial_states")
FWD_INPUTS = ("x", "dt", "A", "B", "C", "D", "dt_bias", "initial_states")
TOL = 0.01


def _inputs(variant, sizes, seed, softplus, starts=()):
    """Mamba-2's domain: A = -exp(.) < 0; dt raw with softplus, already positive without it.
    `starts`: the positions where a new packed sequence starts (seq_idx steps up by one there)."""
    g = torch.Generator().manual_seed(seed)
    b, L, H, G = sizes["batch"], sizes["seqlen"], sizes["nheads"], sizes["ngroups"]
    P, N = variant["headdim"], variant["dstate"]
    dt = torch.randn(b, L, H, generator=g)
    if not softplus:
        dt = torch.nn.functional.softplus(dt - 1.0)
    return {"x": torch.randn(b, L, H, P, generator=g).bfloat16(), "dt": dt.bfloat16(),
            "A": -torch.exp(torch.randn(H, generator=g)),
            "B": torch.randn(b, L, G, N, generator=g).bfloat16(), "C": torch.randn(b, L, G, N, generator=g).bfloat16(),
            "D": torch.randn(H, P, generator=g), "dt_bias": 0.1 * torch.randn(H, generator=g),
            "initial_states": torch.randn(b, H, P, N, generator=g),
            "dy": torch.randn(b, L, H, P, generator=g).bfloat16(), "dfinal_states": torch.randn(b, H, P, N, generator=g),
            "seq_idx": helpers.packed_seq_idx(b, L, starts),
            # the gate and the ungated output (no positions when ungated; out_x filled from the
            # forward's reference by consistent_with_forward)
            "z": torch.randn(b, L * variant["gated"], H, P, generator=g).bfloat16(),
            "out_x": torch.empty(b, L * variant["gated"], H, P, dtype=torch.bfloat16)}


def _quadratic_grads(inp, softplus, dt_min, dt_max, chunk_size, drop=None):
    """Gradients of <dy, y> + <dfinal, h_L> by float64 autograd through the quadratic form.

    drop="chunk_decay": the decay between chunks (a_t - a_s summed over earlier chunks' dt' A)
    is held constant, so its gradient is left out (what losing state_pass_bwd's cs_L term and
    the H_c terms' cumsum gradients would give). drop="softplus_slope": the softplus is applied
    to a detached input plus the identity's gradient, so d dt'/d dt is 1 (a lost sigmoid)."""
    leaves = {n: inp[n].double().requires_grad_() for n in FWD_INPUTS}
    x, dt, A, B, C, D, bias, h0 = (leaves[n] for n in FWD_INPUTS)
    L, H = x.shape[1], x.shape[2]
    rep = H // B.shape[2]
    Bh, Ch = B.repeat_interleave(rep, dim=2), C.repeat_interleave(rep, dim=2)
    v = dt + bias
    if softplus:
        sp = torch.where(v <= 20.0, torch.nn.functional.softplus(v), v)
        v = sp.detach() + (v - v.detach()) if drop == "softplus_slope" else sp
    v = v.clamp(min=dt_min, max=dt_max)
    da = v * A                                              # (b, L, H)
    a = _chunk_split(da, torch.arange(L) // chunk_size) if drop == "chunk_decay" else da.cumsum(1)
    diff = a[:, :, None, :] - a[:, None, :, :]              # (b, t, s, H)
    seq = inp["seq_idx"].long()
    same = (seq[:, :, None] == seq[:, None, :])[..., None]  # (b, t, s, 1): no term crosses sequences
    causal = (torch.arange(L)[:, None] >= torch.arange(L)[None, :])[None, :, :, None] & same
    decay = torch.where(causal, torch.exp(torch.where(causal, diff, 0.0)), 0.0)
    cb = torch.einsum("btgn,bsgn->btsg", Ch, Bh)           # heads already repeated: g is the head
    y = torch.einsum("btsh,bsh,bshp->bthp", cb * decay, v, x) + D[None, None] * x
    first = (seq == 0).to(a.dtype)[:, :, None]              # the initial state belongs to sequence 0
    y = y + torch.einsum("bth,bhpn,bthn->bthp", torch.exp(a) * first, h0, Ch)  # decayed to t
    in_last = (seq == seq[:, -1:]).to(a.dtype)[:, :, None]  # the final state: the last sequence's positions
    last = torch.exp(a[:, -1:, :] - a) * in_last             # (b, s, H)
    h = torch.einsum("bsh,bshp,bshn->bhpn", last * v, x, Bh) + (torch.exp(a[:, -1]) * first[:, -1])[:, :, None, None] * h0
    torch.autograd.backward([y, h], [inp["dy"].double(), inp["dfinal_states"].double()])
    return {"d" + n: leaves[n].grad for n in FWD_INPUTS}


def _chunk_split(da, chunk):
    """The cumsum of da with the earlier chunks' total held constant (no gradient through it)."""
    parts, offset = [], torch.zeros_like(da[:, :1])
    for c in range(int(chunk[-1]) + 1):
        cs = da[:, chunk == c].cumsum(1)
        parts.append(cs + offset.detach())
        offset = offset + cs[:, -1:]
    return torch.cat(parts, 1)


def _run(chunk_size, dstate, softplus, sizes, limits, blocks, seed, starts=()):
    ls = load_spec(SPEC)
    variant = {"dtype": "bf16", "chunk_size": chunk_size, "headdim": 64, "dstate": dstate, "packed": bool(starts), "dt_dtype": "bf16", "gated": False}
    limits = {**limits, "softplus_below": SOFTPLUS_BELOW} if softplus else limits
    tunables = helpers.default_tunables(ls, variant)
    tunables.update(blocks)
    inp = _inputs(variant, sizes, seed, softplus, starts)
    scalars = helpers.scalar_values(ls.spec, limits)
    # prev_states, saved by the forward: what ssd_fwd's reference computes from these inputs
    inp = helpers.consistent_with_forward(ls, {**inp, "prev_states": torch.empty(0, dtype=torch.bfloat16)}, scalars, variant)
    got = helpers.run_spec_cpu(ls, variant, dict(inp), sizes, limits, tunables)
    return inp, got, scalars


def _rel_err(got, ref):
    return helpers.max_err(got, ref) / float(ref.abs().max())


SMALL = {"BLOCK_S": 32, "BLOCK_M": 16, "BLOCK_K": 32, "BLOCK_R": 2, "SHARE_PROGRAMS": 38}
CASES = [
    # chunk, dstate, softplus, sizes, limits, blocks, starts of packed sequences
    (64, 64, True, {"batch": 2, "seqlen": 150, "nheads": 2, "ngroups": 1}, {}, {}, ()),
    (64, 128, False, {"batch": 1, "seqlen": 100, "nheads": 4, "ngroups": 2}, {"dt_min": 0.2, "dt_max": 0.9}, {}, ()),
    # 19 row blocks, SHARE_PROGRAMS 38: db and dc split the 3 heads into 2 shares (2 heads, 1)
    (128, 64, True, {"batch": 1, "seqlen": 300, "nheads": 3, "ngroups": 1}, {"dt_max": 0.5}, SMALL, ()),
    (64, 64, False, {"batch": 2, "seqlen": 64, "nheads": 2, "ngroups": 2}, {}, {"BLOCK_M": 32, "BLOCK_K": 16, "BLOCK_T": 16}, ()),
    # packed sequences: starts inside chunks, on a chunk's first position (64, 256) and on a
    # chunk's last (127: the initial state never leaves chunk 0)
    (64, 64, True, {"batch": 2, "seqlen": 150, "nheads": 2, "ngroups": 1}, {}, {}, (40, 64, 130)),
    (128, 64, True, {"batch": 1, "seqlen": 300, "nheads": 3, "ngroups": 1}, {"dt_max": 0.5}, SMALL, (100, 127, 256)),
    # dstate 256, whole and in 64-column blocks (gfx942's form: BLOCK_N < dstate), packed
    (64, 256, True, {"batch": 1, "seqlen": 140, "nheads": 2, "ngroups": 1}, {}, {}, ()),
    (64, 256, True, {"batch": 1, "seqlen": 140, "nheads": 2, "ngroups": 1}, {}, {"BLOCK_N": 64, "BLOCK_P": 16}, (70,)),
]


@pytest.mark.parametrize("chunk_size, dstate, softplus, sizes, limits, blocks, starts", CASES)
def test_gradients_match_float64_autograd(chunk_size, dstate, softplus, sizes, limits, blocks, starts):
    inp, got, sc = _run(chunk_size, dstate, softplus, sizes, limits, blocks, seed=sizes["seqlen"] + chunk_size, starts=starts)
    ref = _quadratic_grads(inp, softplus, sc["dt_min"], sc["dt_max"], chunk_size)
    for name in GRADS:
        assert got[name].dtype == (torch.float32 if name in ("dA", "dD", "ddt_bias", "dinitial_states") else torch.bfloat16)
        err = _rel_err(got[name], ref[name])
        assert err <= TOL, f"{name}: max error {err:.3g} of max |ref| = {float(ref[name].abs().max()):.3g} (bound {TOL})"


@pytest.mark.parametrize("drop, names", [("chunk_decay", ("ddt", "dA", "ddt_bias")), ("softplus_slope", ("ddt", "ddt_bias"))])
def test_a_dropped_term_is_seen(drop, names):
    # the kernels against a reference that lacks one term: far outside the bound, while the
    # full reference is inside it (test above); so the bound can tell the two apart
    chunk_size, dstate, softplus, sizes, limits, blocks, _ = CASES[0]
    inp, got, sc = _run(chunk_size, dstate, softplus, sizes, limits, blocks, seed=5)
    full = _quadratic_grads(inp, softplus, sc["dt_min"], sc["dt_max"], chunk_size)
    ablated = _quadratic_grads(inp, softplus, sc["dt_min"], sc["dt_max"], chunk_size, drop=drop)
    for name in names:
        assert _rel_err(got[name], full[name]) <= TOL
        assert _rel_err(ablated[name], full[name]) > 5 * TOL, f"{name}: dropping {drop} changes it by less than 5x the bound"
        assert _rel_err(got[name], ablated[name]) > 5 * TOL


def test_quadratic_form_agrees_with_the_spec_reference():
    # the test's float64 reference and the spec's (autograd through the sequential recurrence)
    # are independent formulations; they agree to float64 rounding
    ls = load_spec(SPEC)
    variant = {"dtype": "bf16", "chunk_size": 64, "headdim": 64, "dstate": 64, "packed": True, "dt_dtype": "bf16", "gated": False}
    sizes = {"batch": 1, "seqlen": 70, "nheads": 2, "ngroups": 1}
    inp = _inputs(variant, sizes, seed=9, softplus=True, starts=(20, 63))
    sc = helpers.scalar_values(ls.spec, {"dt_max": 0.8, "softplus_below": SOFTPLUS_BELOW})
    spec_ref = helpers.reference(ls, {**inp, **sc}, variant=variant)
    mine = _quadratic_grads(inp, True, sc["dt_min"], sc["dt_max"], 64)
    for name in GRADS:
        assert _rel_err(mine[name], spec_ref[name]) < 1e-10, name


def test_packed_sequences_are_seen():
    # the same inputs through the unpacked kernels (seq_idx ignored) land outside 3x the bound
    # around the packed reference, for every gradient: the packed cases above test the resets
    chunk_size, dstate, softplus, sizes, limits, blocks, starts = CASES[4]
    inp, got, sc = _run(chunk_size, dstate, softplus, sizes, limits, blocks, seed=7, starts=starts)
    ref = _quadratic_grads(inp, softplus, sc["dt_min"], sc["dt_max"], chunk_size)
    _, unpacked, _ = _run(chunk_size, dstate, softplus, sizes, limits, blocks, seed=7)
    for name in GRADS:
        # D x_t does not cross positions; the initial state's weight has decayed by the first
        # start (position 40) either way
        if name in ("dD", "dinitial_states"):
            continue
        assert _rel_err(got[name], ref[name]) <= TOL, name
        assert _rel_err(unpacked[name], ref[name]) > 3 * TOL, f"{name}: ignoring seq_idx changes it by less than 3x the bound"


@pytest.mark.parametrize("starts", [(), (40, 64, 130)])
def test_gated_gradients_match_the_reference(starts):
    # gated=true: `gate` writes dz and dy * silu(z), which every later kernel reads; each gradient
    # against the spec's float64 reference (autograd through the recurrence and the gate)
    ls = load_spec(SPEC)
    variant = {"dtype": "bf16", "chunk_size": 64, "headdim": 64, "dstate": 64, "packed": bool(starts), "dt_dtype": "bf16",
               "gated": True}
    sizes = {"batch": 2, "seqlen": 150, "nheads": 2, "ngroups": 1}
    limits = {"softplus_below": SOFTPLUS_BELOW}
    tunables = helpers.default_tunables(ls, variant)
    scalars = helpers.scalar_values(ls.spec, limits)
    inp = _inputs(variant, sizes, 11, True, starts)
    inp = helpers.consistent_with_forward(ls, {**inp, "prev_states": torch.empty(0, dtype=torch.bfloat16)}, scalars, variant)
    got = helpers.run_spec_cpu(ls, variant, dict(inp), sizes, limits, tunables)
    ref = helpers.reference(ls, {**inp, **scalars}, variant=variant)
    ungated = helpers.reference(ls, {**inp, **scalars}, variant={**variant, "gated": False})
    for name in (*GRADS, "dz"):
        err = _rel_err(got[name], ref[name])
        assert err <= TOL, f"{name}: max error {err:.3g} of max |ref| = {float(ref[name].abs().max()):.3g} (bound {TOL})"
    for name in ("dx", "dB", "dC"):  # the gate reaches every gradient through dy
        assert _rel_err(ungated[name], ref[name]) > 5 * TOL, name
