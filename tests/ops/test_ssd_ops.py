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


def _recurrence(x, dt, A, B, C, D, dt_bias, softplus, limit, h0=None, z=None, seq_idx=None):
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
        keep = torch.exp(dt[:, t] * A)
        if seq_idx is not None:  # a new sequence (seq_idx changes; it is 0 before the first position) starts from zero
            keep = keep * (seq_idx[:, t] == (seq_idx[:, t - 1] if t else 0)).double()[:, None]
        h = h * keep[..., None, None] + dt[:, t, :, None, None] * x[:, t, :, :, None] * Bh[:, t, :, None, :]
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


def test_packed_sequences_restart_from_zero():
    # three sequences in each row of two (starts at 20 and 64 in the first row, 50 in the
    # second), with initial states (sequence 0's) and final states (the last sequence's)
    x, dt, A, B, C, D, dt_bias = _inputs(seed=19, b=2, seqlen=100)
    _, h0 = _extras(20, x, B.shape[3])
    pos = torch.arange(100)
    seq_idx = torch.stack([(pos >= 20).int() + (pos >= 64).int(), (pos >= 50).int()]).to(torch.int32)
    y, final = mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, dt_bias=dt_bias, initial_states=h0, seq_idx=seq_idx,
                                         dt_softplus=True, return_final_states=True)
    ref_y, ref_h = _recurrence(x, dt, A, B, C, D, dt_bias, True, (0.0, math.inf), h0, seq_idx=seq_idx)
    for name, got, ref in (("y", y, ref_y), ("final_states", final, ref_h)):
        err = float((got.double() - ref).abs().max())
        scale = float(ref.abs().max())
        assert err <= 0.02 * scale, f"{name}: max error {err:.3g} over 2% of max |ref| {scale:.3g}"
    # one unpacked row gives another output
    whole, _ = _recurrence(x, dt, A, B, C, D, dt_bias, True, (0.0, math.inf), h0)
    assert float((whole - ref_y).abs().max()) > 0.1 * float(ref_y.abs().max())


@pytest.mark.parametrize("kwargs, words", [
    ({"z": "zeros"}, "'z' must be a tensor like x ((1, 5, 2, 64) torch.bfloat16 on cpu) or None, got (1,) torch.float32 on cpu"),
    ({"seq_idx": "zeros"}, "'seq_idx' must be a torch.int32 tensor of shape (1, 5) (batch, seqlen) or None, got (1,) torch.float32"),
    ({"seq_idx": "decreasing"}, "'seq_idx' must be non-negative and non-decreasing along each row"),
    ({"seq_idx": "negative"}, "'seq_idx' must be non-negative and non-decreasing along each row"),
    ({"initial_states": "zeros"}, "'initial_states' must be a tensor of shape (1, 2, 64, 64)"),
    ({"chunk_size": 100}, "chunk_size=100 is not supported; accepted: 64, 128, 256"),
    ({"D": "three"}, "'D' must be a tensor of shape (2,) (one value per head) or (2, 64) (per channel)"),
])
def test_unsupported_arguments_are_one_sentence(kwargs, words):
    x, dt, A, B, C, D, dt_bias = _inputs(seed=3, seqlen=5)
    args = {"chunk_size": 64}
    for k, v in kwargs.items():
        args[k] = {"x": x, "zeros": torch.zeros(1), "three": torch.zeros(3),
                   "decreasing": torch.tensor([[0, 1, 1, 0, 2]], dtype=torch.int32),
                   "negative": torch.tensor([[-1, 0, 0, 1, 1]], dtype=torch.int32)}.get(v, v)
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
    with pytest.raises(LaunchError, match="x, B and C must share one dtype of torch.bfloat16, torch.float16 or "
                                          r"torch.float32 \(got torch.float16, torch.bfloat16, torch.bfloat16\)$"):
        mamba_chunk_scan_combined(x.half(), dt, A, B, C, 64)
    with pytest.raises(LaunchError, match="'dt' has dtype torch.int32; accepted: torch.float32, torch.bfloat16 or "
                                          "torch.float16$"):
        mamba_chunk_scan_combined(x, dt.int(), A, B, C, 64)
    with pytest.raises(LaunchError, match="headdim 32 is not supported; accepted: 64, 128"):
        mamba_chunk_scan_combined(x[..., :32].contiguous(), dt, A, B, C, 64)
    wide = torch.cat([B] * 8, dim=-1)  # dstate 512
    with pytest.raises(LaunchError, match="dstate 512 is not supported; accepted: 16, 32, 64, 128, 256$"):
        mamba_chunk_scan_combined(x, dt, A, wide, wide, 64)


@pytest.mark.parametrize("with_d, with_bias, limit, ngroups, use_final, extras", [
    (True, True, (0.0, math.inf), 1, True, False),
    (False, False, (0.1, 0.6), 2, False, False),
    (True, True, (0.0, math.inf), 2, True, True),  # per-channel D and initial states
    (True, False, (0.0, math.inf), 1, True, "z"),  # z gating
    # headdim 128: the state passes split the state over programs (BLOCK_P rows each,
    # cs_last_grad's shares added atomically)
    (True, True, (0.0, math.inf), 1, True, "p128"),
    (False, True, (0.1, 0.6), 2, False, "p128"),
    (True, True, (0.0, math.inf), 2, True, "packed"),  # sequences starting at 20 and 64, initial states
])
def test_gradients_match_float64_autograd(with_d, with_bias, limit, ngroups, use_final, extras):
    # .backward() through the op (ssd_bwd on the interpreter) against autograd through the
    # float64 recurrence above; seqlen 70 is two chunks of 64, the second partial. Bound: 1% of
    # the largest |gradient|, as tests/ir/test_ssd_bwd.py (bf16 operands and outputs, measured
    # 0.1-0.6% there)
    sizes = {"p128": {"headdim": 128, "dstate": 128}}.get(extras, {})
    x, dt, A, B, C, D, dt_bias = _inputs(seed=21 + with_d, nheads=4, ngroups=ngroups, **sizes)
    D, dt_bias = (D if with_d else None), (dt_bias if with_bias else None)
    h0 = z = seq_idx = None
    if extras is True or extras == "packed":
        D, h0 = _extras(31, x, B.shape[3])
    if extras == "packed":
        pos = torch.arange(x.shape[1])
        seq_idx = ((pos >= 20).int() + (pos >= 64).int()).to(torch.int32)[None].expand(x.shape[0], -1).contiguous()
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
                                         z=mine.get("z"), seq_idx=seq_idx, dt_softplus=True, dt_limit=limit,
                                         return_final_states=True)
    torch.autograd.backward([y, final] if use_final else [y], [dy, dh] if use_final else [dy])

    ref = {n: t.double().requires_grad_() for n, t in leaves.items()}
    ref_y, ref_h = _recurrence(ref["x"], ref["dt"], ref["A"], ref["B"], ref["C"], ref.get("D"), ref.get("dt_bias"),
                               True, limit, ref.get("initial_states"), ref.get("z"), seq_idx)
    torch.autograd.backward([ref_y, ref_h] if use_final else [ref_y],
                            [dy.double(), dh.double()] if use_final else [dy.double()])
    for n in leaves:
        got, want = mine[n].grad, ref[n].grad
        assert got is not None and got.dtype == leaves[n].dtype and got.shape == leaves[n].shape, n
        err = float((got.double() - want).abs().max())
        scale = float(want.abs().max())
        assert err <= 0.01 * scale, f"d{n}: max error {err:.3g} over 1% of max |ref| {scale:.3g}"


@pytest.mark.parametrize("packed,gated", [(False, False), (True, False), (False, True)])
def test_opcheck_forward(packed, gated):
    from kgen.ops import _op

    x, dt, A, B, C, D, dt_bias = _inputs(seed=23, seqlen=40)
    b, seqlen, nheads, headdim = x.shape
    seq_idx = (torch.arange(seqlen) >= 15).to(torch.int32)[None].expand(b, -1).contiguous()
    z = torch.randn_like(x) if gated else x.new_empty((b, 0, nheads, headdim))  # ungated: no positions
    tensors = (x.requires_grad_(), dt, A, B, C, D[:, None].expand(nheads, headdim).contiguous(), dt_bias,
               torch.zeros(b, nheads, headdim, B.shape[3]), seq_idx, z.requires_grad_(gated))
    op = _op("ssd_fwd")
    args = op._positional(tensors, {"chunk_size": 64, "headdim": headdim, "dstate": B.shape[3], "packed": packed,
                                    "gated": gated, "softplus_below": 20.0})
    torch.library.opcheck(torch.ops.kgen.ssd_fwd.default, tuple(args))


@pytest.mark.parametrize("packed,gated", [(False, False), (True, False), (False, True)])
def test_torch_compile_has_no_graph_break(packed, gated):
    x, dt, A, B, C, D, dt_bias = _inputs(seed=29, seqlen=70)
    seq_idx = (torch.arange(70) >= 30).to(torch.int32)[None].contiguous() if packed else None
    z = torch.randn_like(x).requires_grad_() if gated else None
    x.requires_grad_()
    B.requires_grad_()
    wrt = (x, B, z) if gated else (x, B)

    def loss(x, B, z):
        y = mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, z=z, dt_bias=dt_bias, seq_idx=seq_idx, dt_softplus=True)
        return y.float().square().sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    got = compiled(x, B, z)
    grads = torch.autograd.grad(got, wrt)
    want = loss(x, B, z)
    want_grads = torch.autograd.grad(want, wrt)
    assert torch.equal(got, want)
    for a, b in zip(grads, want_grads):
        assert torch.equal(a, b)
