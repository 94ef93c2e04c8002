"""kgen.ops.mamba_chunk_scan_combined on the CPU interpreter: against a sequential float64
recurrence written here (not the spec's reference), with mamba-ssm's optional arguments mapped
(D, dt_bias None or given, dt_softplus, dt_limit, return_final_states), its gradients against
float64 autograd through that recurrence, and one sentence for each argument it does not take
yet."""
from __future__ import annotations

import math

import pytest
import torch

from kgen.errors import LaunchError
from kgen.ops import mamba_chunk_scan_combined


def _recurrence(x, dt, A, B, C, D, dt_bias, softplus, limit, h0=None, z=None):
    x, dt, A, B, C = (t.double() for t in (x, dt, A, B, C))
    b, seqlen, nheads, headdim = x.shape
    dt = dt + (0 if dt_bias is None else dt_bias.double())
    if softplus:
        dt = torch.where(dt <= 20.0, torch.nn.functional.softplus(dt), dt)
    dt = dt.clamp(limit[0], limit[1])
    g = nheads // B.shape[2]
    Bh, Ch = B.repeat_interleave(g, dim=2), C.repeat_interleave(g, dim=2)
    h = torch.zeros(b, nheads, headdim, B.shape[3], dtype=torch.float64) if h0 is None else h0.double()
    ys = []
    for t in range(seqlen):
        h = h * torch.exp(dt[:, t] * A)[..., None, None] + dt[:, t, :, None, None] * x[:, t, :, :, None] * Bh[:, t, :, None, :]
        y = (h * Ch[:, t, :, None, :]).sum(-1)
        if D is not None:  # per head (nheads,) or per channel (nheads, headdim)
            y = y + (D.double()[None, :, None] if D.dim() == 1 else D.double()[None]) * x[:, t]
        if z is not None:  # mamba-ssm's gating
            y = y * torch.nn.functional.silu(z[:, t].double())
        ys.append(y)
    return torch.stack(ys, 1), h


def _inputs(seed, b=1, seqlen=70, nheads=2, ngroups=1, headdim=64, dstate=64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, seqlen, nheads, headdim, generator=g).bfloat16()
    dt = (torch.rand(b, seqlen, nheads, generator=g) - 1.0).bfloat16()  # raw: softplus in the op
    A = -torch.exp(torch.randn(nheads, generator=g))
    B = torch.randn(b, seqlen, ngroups, dstate, generator=g).bfloat16()
    C = torch.randn(b, seqlen, ngroups, dstate, generator=g).bfloat16()
    D = torch.randn(nheads, generator=g)
    dt_bias = 0.1 * torch.randn(nheads, generator=g)
    return x, dt, A, B, C, D, dt_bias


def _extras(seed, x, dstate):
    """A per-channel D (nheads, headdim) and initial states (batch, nheads, headdim, dstate)."""
    g = torch.Generator().manual_seed(seed)
    b, _, nheads, headdim = x.shape
    return torch.randn(nheads, headdim, generator=g), torch.randn(b, nheads, headdim, dstate, generator=g)


@pytest.mark.parametrize("with_d, with_bias, limit", [(True, True, (0.0, math.inf)), (False, False, (0.1, 0.6))])
def test_matches_sequential_recurrence(with_d, with_bias, limit):
    x, dt, A, B, C, D, dt_bias = _inputs(seed=11 + with_d)
    D, dt_bias = (D if with_d else None), (dt_bias if with_bias else None)
    y, final = mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, dt_bias=dt_bias, dt_softplus=True,
                                         dt_limit=limit, return_final_states=True)
    ref_y, ref_h = _recurrence(x, dt, A, B, C, D, dt_bias, True, limit)
    assert y.shape == x.shape and y.dtype == torch.bfloat16 and final.dtype == torch.float32
    for name, got, ref in (("y", y, ref_y), ("final_states", final, ref_h)):
        err = float((got.double() - ref).abs().max())
        scale = float(ref.abs().max())
        assert err <= 0.02 * scale, f"{name}: max error {err:.3g} over 2% of max |ref| {scale:.3g}"
    # without return_final_states: y alone, the same values
    y2 = mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, dt_bias=dt_bias, dt_softplus=True, dt_limit=limit)
    assert torch.equal(y2, y)


def test_initial_states_and_per_channel_d_match_the_recurrence():
    x, dt, A, B, C, _, dt_bias = _inputs(seed=13, nheads=4, ngroups=2)
    D, h0 = _extras(14, x, B.shape[3])
    y, final = mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, dt_bias=dt_bias, initial_states=h0,
                                         dt_softplus=True, return_final_states=True)
    ref_y, ref_h = _recurrence(x, dt, A, B, C, D, dt_bias, True, (0.0, math.inf), h0)
    for name, got, ref in (("y", y, ref_y), ("final_states", final, ref_h)):
        err = float((got.double() - ref).abs().max())
        scale = float(ref.abs().max())
        assert err <= 0.02 * scale, f"{name}: max error {err:.3g} over 2% of max |ref| {scale:.3g}"
    # the initial state matters: from zero the output is another one
    y0 = mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, dt_bias=dt_bias, dt_softplus=True)
    assert float((y0.double() - ref_y).abs().max()) > 0.1 * float(ref_y.abs().max())


def test_z_gates_the_output_as_mamba_ssm_does():
    x, dt, A, B, C, D, dt_bias = _inputs(seed=17)
    z = torch.randn(x.shape, generator=torch.Generator().manual_seed(18)).bfloat16()
    y = mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, z=z, dt_bias=dt_bias, dt_softplus=True)
    ref_y, _ = _recurrence(x, dt, A, B, C, D, dt_bias, True, (0.0, math.inf), z=z)
    err, scale = float((y.double() - ref_y).abs().max()), float(ref_y.abs().max())
    assert y.dtype == torch.bfloat16 and err <= 0.02 * scale, f"y: max error {err:.3g} over 2% of max |ref| {scale:.3g}"
    ungated, _ = _recurrence(x, dt, A, B, C, D, dt_bias, True, (0.0, math.inf))
    assert float((y.double() - ungated).abs().max()) > 0.1 * scale  # the gate changes the output


@pytest.mark.parametrize("kwargs, words", [
    ({"z": "zeros"}, "'z' must be a tensor like x ((1, 5, 2, 64) torch.bfloat16 on cpu) or None, got (1,) torch.float32 on cpu"),
    ({"seq_idx": "zeros"}, "'seq_idx' is not supported yet"),
    ({"initial_states": "zeros"}, "'initial_states' must be a tensor of shape (1, 2, 64, 64)"),
    ({"chunk_size": 100}, "chunk_size=100 is not supported; accepted: 64, 128, 256"),
    ({"D": "three"}, "'D' must be a tensor of shape (2,) (one value per head) or (2, 64) (per channel)"),
])
def test_unsupported_arguments_are_one_sentence(kwargs, words):
    x, dt, A, B, C, D, dt_bias = _inputs(seed=3, seqlen=5)
    args = {"chunk_size": 64}
    for k, v in kwargs.items():
        args[k] = {"x": x, "zeros": torch.zeros(1), "three": torch.zeros(3)}.get(v, v)
    with pytest.raises(LaunchError, match="^mamba_chunk_scan_combined: ") as e:
        mamba_chunk_scan_combined(x, dt, A, B, C, **args)
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name, change, words", [
    ("A", lambda t: t.to("meta"), "'A' is on meta but x is on cpu"),
    ("dt_bias", lambda t: t.to("meta"), "'dt_bias' is on meta but x is on cpu"),
    ("D", lambda t: t.long(), "'D' has dtype torch.int64; a floating-point tensor"),
])
def test_wrong_device_or_parameter_dtype_is_one_sentence(name, change, words):
    x, dt, A, B, C, D, dt_bias = _inputs(seed=5, seqlen=5)
    args = {"x": x, "dt": dt, "A": A, "B": B, "C": C, "D": D, "dt_bias": dt_bias}
    args[name] = change(args[name])
    with pytest.raises(LaunchError, match="^mamba_chunk_scan_combined: ") as e:
        mamba_chunk_scan_combined(args["x"], args["dt"], args["A"], args["B"], args["C"], 64, D=args["D"],
                                  dt_bias=args["dt_bias"])
    assert words in str(e.value) and "\n" not in str(e.value)


def test_wrong_dtype_and_headdim_are_refused():
    x, dt, A, B, C, *_ = _inputs(seed=4, seqlen=5)
    with pytest.raises(LaunchError, match="must be torch.bfloat16"):
        mamba_chunk_scan_combined(x.half(), dt.half(), A, B.half(), C.half(), 64)
    with pytest.raises(LaunchError, match="headdim 32 is not supported; accepted: 64, 128"):
        mamba_chunk_scan_combined(x[..., :32].contiguous(), dt, A, B, C, 64)


@pytest.mark.parametrize("with_d, with_bias, limit, ngroups, use_final, extras", [
    (True, True, (0.0, math.inf), 1, True, False),
    (False, False, (0.1, 0.6), 2, False, False),
    (True, True, (0.0, math.inf), 2, True, True),  # per-channel D and initial states
    (True, False, (0.0, math.inf), 1, True, "z"),  # z gating
    # headdim 128: the state passes split the state over programs (BLOCK_P rows each,
    # cs_last_grad's shares added atomically)
    (True, True, (0.0, math.inf), 1, True, "p128"),
    (False, True, (0.1, 0.6), 2, False, "p128"),
])
def test_gradients_match_float64_autograd(with_d, with_bias, limit, ngroups, use_final, extras):
    # .backward() through the op (ssd_bwd on the interpreter) against autograd through the
    # float64 recurrence above; seqlen 70 is two chunks of 64, the second partial. Bound: 1% of
    # the largest |gradient|, as tests/ir/test_ssd_bwd.py (bf16 operands and outputs, measured
    # 0.1-0.6% there)
    sizes = {"p128": {"headdim": 128, "dstate": 128}}.get(extras, {})
    x, dt, A, B, C, D, dt_bias = _inputs(seed=21 + with_d, nheads=4, ngroups=ngroups, **sizes)
    D, dt_bias = (D if with_d else None), (dt_bias if with_bias else None)
    h0 = z = None
    if extras is True:
        D, h0 = _extras(31, x, B.shape[3])
    if extras == "z":
        z = torch.randn(x.shape, generator=torch.Generator().manual_seed(41)).bfloat16()
    leaves = {n: t for n, t in (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C), ("D", D), ("dt_bias", dt_bias),
                                ("initial_states", h0), ("z", z)) if t is not None}
    g = torch.Generator().manual_seed(99)
    dy = torch.randn(x.shape, generator=g).bfloat16()
    dh = torch.randn(x.shape[0], x.shape[2], x.shape[3], B.shape[3], generator=g)

    mine = {n: t.clone().requires_grad_() for n, t in leaves.items()}
    y, final = mamba_chunk_scan_combined(mine["x"], mine["dt"], mine["A"], mine["B"], mine["C"], 64, D=mine.get("D"),
                                         dt_bias=mine.get("dt_bias"), initial_states=mine.get("initial_states"),
                                         z=mine.get("z"), dt_softplus=True, dt_limit=limit, return_final_states=True)
    torch.autograd.backward([y, final] if use_final else [y], [dy, dh] if use_final else [dy])

    ref = {n: t.double().requires_grad_() for n, t in leaves.items()}
    ref_y, ref_h = _recurrence(ref["x"], ref["dt"], ref["A"], ref["B"], ref["C"], ref.get("D"), ref.get("dt_bias"),
                               True, limit, ref.get("initial_states"), ref.get("z"))
    torch.autograd.backward([ref_y, ref_h] if use_final else [ref_y],
                            [dy.double(), dh.double()] if use_final else [dy.double()])
    for n in leaves:
        got, want = mine[n].grad, ref[n].grad
        assert got is not None and got.dtype == leaves[n].dtype and got.shape == leaves[n].shape, n
        err = float((got.double() - want).abs().max())
        scale = float(want.abs().max())
        assert err <= 0.01 * scale, f"d{n}: max error {err:.3g} over 1% of max |ref| {scale:.3g}"
