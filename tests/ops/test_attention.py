"""kgen.ops.flash_attn_func without a GPU: argument checks (one sentence each, before any launch),
and the op on the CPU (the IR interpreter) against float64 torch, with autograd, opcheck and
torch.compile(fullgraph=True)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ops
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
import attention_ref  # noqa: E402
import helpers  # noqa: E402

from kgen.errors import LaunchError  # noqa: E402
from kgen.ops import _op, flash_attn_func  # noqa: E402


def _qkv(b=1, sq=5, sk=7, h=2, hkv=1, d=64, dtype=torch.bfloat16, grad=False):
    torch.manual_seed(0)
    q = torch.randn(b, sq, h, d).to(dtype)
    k = torch.randn(b, sk, hkv, d).to(dtype)
    v = torch.randn(b, sk, hkv, d).to(dtype)
    return [t.requires_grad_(grad) for t in (q, k, v)]


@pytest.mark.parametrize("change, message", [
    (lambda q, k, v: (q.float(), k, v), "flash_attn_func: 'q' has dtype torch.float32; accepted: torch.bfloat16, torch.float16"),
    (lambda q, k, v: (q, k.half(), v), "flash_attn_func: q, k and v must share one dtype, got torch.bfloat16, torch.float16, torch.bfloat16"),
    (lambda q, k, v: (q[0], k, v), "flash_attn_func: 'q' has shape (5, 2, 64); expected 4 dims (batch, seqlen, heads, head_dim)"),
    (lambda q, k, v: (q[..., :36], k[..., :36], v[..., :36]),
     "flash_attn_func: head_dim 36 is not supported; accepted: a multiple of 8 from 16 to 256"),
    (lambda q, k, v: (q[..., :8], k[..., :8], v[..., :8]),
     "flash_attn_func: head_dim 8 is not supported; accepted: a multiple of 8 from 16 to 256"),
    (lambda q, k, v: (q, k, v[:, :3]), "flash_attn_func: k has shape (1, 7, 1, 64) and v (1, 3, 1, 64); they must match"),
    (lambda q, k, v: (torch.cat([q, q[:, :, :1]], 2), torch.cat([k, k], 2), torch.cat([v, v], 2)),
     "flash_attn_func: q has 3 heads and k 2; the query heads must be a multiple of the key/value heads"),
    (lambda q, k, v: (q[:0], k[:0], v[:0]), "flash_attn_func: 'q' is empty (shape (0, 5, 2, 64)); every dim must be at least 1"),
    (lambda q, k, v: (q.transpose(1, 3).contiguous().transpose(1, 3), k, v),
     "flash_attn_func: 'q' must have a contiguous last dim (stride 1), got strides (640, 1, 5, 10)"),
    (lambda q, k, v: (q, k[:1].expand(2, -1, -1, -1), v), "flash_attn_func: k has shape (2, 7, 1, 64) and v (1, 7, 1, 64); they must match"),
])
def test_bad_arguments_are_named(change, message):
    with pytest.raises(LaunchError) as e:
        flash_attn_func(*change(*_qkv()))
    assert str(e.value) == message


@pytest.mark.parametrize("scale", [0.0, -0.125, float("nan"), float("inf")])
def test_a_scale_that_is_not_positive_is_named(scale):
    with pytest.raises(LaunchError) as e:
        flash_attn_func(*_qkv(), softmax_scale=scale)
    assert str(e.value) == (f"flash_attn_func: softmax_scale is {scale}; accepted: a positive finite number "
                            "(default 1/sqrt(head_dim))")


def test_batch_mismatch_is_named():
    q, k, v = _qkv()
    with pytest.raises(LaunchError, match=r"^flash_attn_func: q is \(2, 5, 2, 64\) and k is \(1, 7, 1, 64\); batch and head_dim must match$"):
        flash_attn_func(torch.cat([q, q]), k, v)


@pytest.mark.parametrize("causal, deterministic, shape", [
    (False, False, dict(sq=9, sk=6, h=4, hkv=2)),  # SQ > SK: causal rows that see no key
    (True, True, dict(sq=9, sk=6, h=4, hkv=2)),
    # under the mask the programs are ordered longest first over groups of 16 heads: 36 query
    # heads and 18 key heads make full groups and a partial one, over several blocks
    (True, False, dict(b=2, sq=130, sk=300, h=18, hkv=9)),
    (True, False, dict(sq=70, sk=70, h=2, hkv=1, d=32)),  # head_dim 32: 64-key blocks, more keys than head_dim
    # head_dims built at their first call, in tiles of the next power of two (columns past D masked)
    (True, False, dict(sq=70, sk=75, h=2, hkv=1, d=96)),
    (False, False, dict(sq=33, sk=40, h=2, hkv=2, d=40)),
    (True, True, dict(sq=20, sk=20, h=2, hkv=1, d=24)),
    # tiles of 256: the backward's dk and dv whole (the column split, fa2_bwd.yaml DSPLIT 2:
    # test_gfx942_emulation_of_wide_head_dims), the second 128 columns ragged at 200 and 136
    (True, False, dict(sq=70, sk=75, h=2, hkv=1, d=256)),
    (False, True, dict(sq=40, sk=33, h=2, hkv=1, d=200)),
    (True, True, dict(sq=20, sk=30, h=4, hkv=2, d=136)),
])
def test_cpu_forward_and_backward_match_float64(causal, deterministic, shape):
    q, k, v = _qkv(**shape, grad=True)
    dout = torch.randn(q.shape).to(q.dtype)
    out = flash_attn_func(q, k, v, causal=causal, deterministic=deterministic)
    got = (out, *torch.autograd.grad(out, (q, k, v), dout))
    ref = attention_ref.with_grads(q, k, v, dout, causal, torch.float64)
    low = attention_ref.with_grads(q, k, v, dout, causal, None)
    for name, g, r, lo in zip(("out", "dq", "dk", "dv"), got, ref, low):
        helpers.check_close(name, g, r, lo)


@pytest.mark.parametrize("d", [256, 200, 136])
@pytest.mark.parametrize("target, first", [("sm_90", {"BLOCK_M": 64, "BLOCK_N": 64, "WARPS": 8}),
                                           ("gfx942", {"BLOCK_M": 32, "BLOCK_N": 32, "WARPS": 4})])
def test_wide_head_dims_hold_dk_and_dv_whole_in_the_backward(target, first, d):
    """Above head_dim 128 the backward's first fitting form holds dk and dv whole (DSPLIT 1) with
    the recomputed dq (fa2_bwd.yaml's constraints and preference): 64 keys over 8 warps on sm_90
    (FA2's form; its fp32 accumulators take 128 registers a thread), 32 keys and 32 query rows in
    gfx942's 64 KiB of LDS. (That neither spills is checked where nvcc and clang run: the GPU
    tests, kgen build, tests/codegen/test_constant_groups.py.)"""
    from kgen.build import lower_variant
    from kgen.hw.descriptor import load_target
    from kgen.spec.load import load_spec

    ls = load_spec(Path(__file__).resolve().parents[2] / "specs" / "fa2_bwd.yaml")
    for causal in (False, True):
        tunables, _ = lower_variant(ls, {"dtype": "bf16", "head_dim": d, "causal": causal, "deterministic": False}, load_target(target))
        assert tunables == {**first, "RECOMPUTE_DQ": 1, "DSPLIT": 1}, (causal, tunables)


SPLIT = {"RECOMPUTE_DQ": 0, "BLOCK_M": 32, "BLOCK_N": 32, "WARPS": 4, "DSPLIT": 2}


@pytest.mark.parametrize("d, causal, deterministic, sq, sk, first", [(256, True, False, 70, 75, None), (200, False, True, 40, 33, None),
                                                                     (256, False, False, 40, 67, SPLIT)])
def test_gfx942_emulation_of_wide_head_dims(d, causal, deterministic, sq, sk, first):
    """Tiles of 256 as gfx942 builds them (dk and dv whole over 32 keys, to fit 64 KiB of LDS),
    and the backward's column split (DSPLIT 2, the form where no whole one fits), run in the
    emulation."""
    import math

    import kgen
    from kgen.backends import available
    from kgen.knobs import knobs

    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    op = kgen.load(Path(__file__).resolve().parents[2] / "specs" / "fa2_fwd.yaml", target="gfx942", emulate=True)
    op.backward_op.force_tunables(first)
    q, k, v = _qkv(sq=sq, sk=sk, h=2, hkv=1, d=d, grad=True)
    dout = torch.randn(q.shape).to(q.dtype)
    out, _ = op(q, k, v, softmax_scale=1 / math.sqrt(d), head_dim=d, causal=causal, deterministic=deterministic)
    got = (out, *torch.autograd.grad(out, (q, k, v), dout))
    if first is not None:
        assert op.backward_op.last_tunables == first
    ref = attention_ref.with_grads(q, k, v, dout, causal, torch.float64)
    low = attention_ref.with_grads(q, k, v, dout, causal, None)
    for name, g, r, lo in zip(("out", "dq", "dk", "dv"), got, ref, low):
        helpers.check_close(name, g, r, lo)


def test_head_dim_above_256_is_named():
    q = torch.randn(1, 3, 1, 264).to(torch.bfloat16)
    with pytest.raises(LaunchError) as e:
        flash_attn_func(q, q, q)
    assert str(e.value) == "flash_attn_func: head_dim 264 is not supported; accepted: a multiple of 8 from 16 to 256"


def test_opcheck_forward():
    q, k, v = _qkv(grad=True)
    op = _op("fa2_fwd")
    args = op._positional((q, k, v), {"softmax_scale": 0.125, "head_dim": 64, "causal": True})
    torch.library.opcheck(torch.ops.kgen.fa2_fwd.default, tuple(args))


def test_torch_compile_has_no_graph_break():
    q, k, v = _qkv(grad=True)

    def loss(q, k, v):
        return flash_attn_func(q, k, v, causal=True).float().square().sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    got = compiled(q, k, v)
    grads = torch.autograd.grad(got, (q, k, v))
    want = loss(q, k, v)
    want_grads = torch.autograd.grad(want, (q, k, v))
    assert torch.equal(got, want)
    for a, b in zip(grads, want_grads):
        assert torch.equal(a, b)
