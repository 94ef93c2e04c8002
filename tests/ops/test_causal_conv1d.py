"""kgen.ops.causal_conv1d_fn (specs/causal_conv1d.yaml and its backward) against torch's own
depthwise conv1d in float64, sequence by sequence where seq_idx packs several into a row; the
tolerance set by the same convolution in the input dtype. On the interpreter, in the gfx942
emulation and on the GPU; then the argument errors."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import helpers  # noqa: E402

from kgen.errors import LaunchError  # noqa: E402


def _meaning(x, weight, bias, seq_idx, silu, dtype):
    """x (batch, dim, seqlen): torch's conv1d, padded on the left, each packed sequence on its own;
    in `dtype` (float64: the reference; the input dtype: PyTorch's own rounding)."""
    dim, width = weight.shape
    x, w = x.to(dtype), weight.to(dtype)
    b = None if bias is None else bias.to(dtype)
    if seq_idx is None:
        out = F.conv1d(F.pad(x, (width - 1, 0)), w.unsqueeze(1), b, groups=dim)
    else:
        out = torch.empty_like(x)
        for r in range(x.shape[0]):
            for s in seq_idx[r].unique():
                cols = (seq_idx[r] == s).nonzero()[:, 0]
                seg = x[r:r + 1, :, cols[0]:cols[-1] + 1]
                out[r:r + 1, :, cols[0]:cols[-1] + 1] = F.conv1d(F.pad(seg, (width - 1, 0)), w.unsqueeze(1), b, groups=dim)
    return F.silu(out) if silu else out


def _case(seed, batch=2, dim=200, seqlen=77, width=4, dtype=torch.bfloat16, packed=False, channel_last=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seqlen, dim, generator=g).to(dtype)
    x = x.transpose(1, 2) if channel_last else x.transpose(1, 2).contiguous()
    weight = 0.5 * torch.randn(dim, width, generator=g)
    bias = torch.randn(dim, generator=g)
    seq_idx = torch.sort(torch.randint(0, 3, (batch, seqlen), generator=g), dim=1).values.int() if packed else None
    dout = torch.randn(batch, dim, seqlen, generator=g).to(dtype)
    return x, weight, bias, seq_idx, dout


def _check(device, x, weight, bias, seq_idx, dout, activation, fn=None):
    if fn is None:
        from kgen.ops import causal_conv1d_fn as fn
    silu = activation is not None
    leaves = [t.to(device).requires_grad_() for t in (x, weight)] + ([bias.to(device).requires_grad_()] if bias is not None else [])
    out = fn(leaves[0], leaves[1], leaves[2] if bias is not None else None,
             seq_idx=None if seq_idx is None else seq_idx.to(device), activation=activation)
    got = [out, *torch.autograd.grad(out, leaves, dout.to(device))]
    both = []
    for dtype in (torch.float64, x.dtype):
        ref_leaves = [t.detach().clone().requires_grad_() for t in (x, weight)] + ([bias.clone().requires_grad_()] if bias is not None else [])
        o = _meaning(ref_leaves[0], ref_leaves[1], ref_leaves[2] if bias is not None else None, seq_idx, silu, dtype)
        both.append([o, *torch.autograd.grad(o, ref_leaves, dout.to(dtype))])
    for name, g, r, lo in zip(("out", "dx", "dweight", "dbias"), got, *both):
        assert g.dtype == (x.dtype if name in ("out", "dx") else torch.float32), name
        helpers.check_close(name, g.detach().cpu(), r.detach(), lo.detach())


CASES = [  # (activation, packed, width, dtype, channel_last)
    ("silu", False, 4, torch.bfloat16, True),
    (None, False, 4, torch.bfloat16, True),
    ("swish", True, 4, torch.bfloat16, True),
    (None, True, 4, torch.bfloat16, False),
    ("silu", False, 3, torch.float16, True),  # width and dtype built at their first call
    ("silu", True, 2, torch.float32, True),
]


@pytest.mark.parametrize("activation, packed, width, dtype, channel_last", CASES)
def test_matches_torch_conv1d(activation, packed, width, dtype, channel_last):
    x, weight, bias, seq_idx, dout = _case(3, width=width, dtype=dtype, packed=packed, channel_last=channel_last)
    _check("cpu", x, weight, bias, seq_idx, dout, activation)


def test_channel_last_in_channel_last_out_and_no_bias():
    from kgen.ops import causal_conv1d_fn

    x, weight, _, _, dout = _case(4)
    out = causal_conv1d_fn(x, weight, None, activation="silu")
    assert out.shape == x.shape and out.stride(1) == 1  # the (batch, seqlen, dim) buffer, transposed as x
    _check("cpu", x, weight, None, None, dout, "silu")


def test_gfx942_emulation():
    import kgen
    from kgen.backends import available
    from kgen.knobs import knobs

    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    op = kgen.load(ROOT / "specs" / "causal_conv1d.yaml", target="gfx942", emulate=True)

    def emulated(x, weight, bias, seq_idx=None, activation=None):
        packed = seq_idx is not None
        seq = seq_idx if packed else torch.zeros(x.shape[0], x.shape[2], dtype=torch.int32)
        return op(x.transpose(1, 2), weight.float(), bias.float(), seq, weight.shape[1], activation is not None,
                  packed).transpose(1, 2)
    x, weight, bias, seq_idx, dout = _case(5, batch=1, dim=130, seqlen=70, packed=True)
    _check("cpu", x, weight, bias, seq_idx, dout, "silu", fn=emulated)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("activation, packed, width, dtype, channel_last", CASES)
def test_gpu(activation, packed, width, dtype, channel_last, monkeypatch):
    monkeypatch.setenv("KGEN_POISON", "1")
    x, weight, bias, seq_idx, dout = _case(6, batch=4, dim=1152, seqlen=1000, width=width, dtype=dtype, packed=packed,
                                           channel_last=channel_last)
    _check("cuda", x, weight, bias, seq_idx, dout, activation)


@pytest.mark.parametrize("kw, message", [
    ({"activation": "relu"}, "causal_conv1d_fn: activation is 'relu'; accepted: None, 'silu' or 'swish'"),
    ({"weight": torch.ones(8, 5)}, "causal_conv1d_fn: 'weight' must be a tensor of shape (8, width) with width 2, 3 or 4, got (8, 5)"),
    ({"bias": torch.ones(7)}, "causal_conv1d_fn: 'bias' must be a tensor of shape (8,) or None, got (7,)"),
    ({"seq_idx": torch.zeros(1, 6, dtype=torch.int64)},
     "causal_conv1d_fn: 'seq_idx' must be a torch.int32 tensor of shape (1, 6) on x's device, got (1, 6) torch.int64 on cpu"),
    ({"initial_states": torch.zeros(1, 8, 3)}, "causal_conv1d_fn: initial_states, return_final_states and final_states_out "
                                               "(chunked inference) are not built; accepted: their defaults (None, False, None)"),
    ({"x": torch.ones(8, 6)}, "causal_conv1d_fn: 'x' must be a tensor of shape (batch, dim, seqlen), got (8, 6)"),
    ({"x": torch.ones(1, 8, 6, dtype=torch.int32)},
     "causal_conv1d_fn: 'x' has dtype torch.int32; accepted: torch.bfloat16, torch.float16, torch.float32"),
])
def test_bad_arguments_are_one_sentence(kw, message):
    from kgen.ops import causal_conv1d_fn

    args = {"x": torch.ones(1, 8, 6, dtype=torch.bfloat16), "weight": torch.ones(8, 4), "bias": None, **kw}
    with pytest.raises(LaunchError) as e:
        causal_conv1d_fn(**args)
    assert str(e.value) == message
