"""kgen.ops.flash_attn_varlen_func (and flash_attn_func's flash-attn keywords): packed sequences
against attention computed sequence by sequence in float64, forward and backward, with one
packing for queries and keys (fa2_document) and two (fa2_varlen); the LSE it returns; the
sequence ids kept per cu_seqlens tensor; each bad argument named in one sentence."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
import helpers  # noqa: E402

from kgen.errors import LaunchError  # noqa: E402
from kgen.ops import flash_attn_func, flash_attn_varlen_func  # noqa: E402
from kgen.ops import varlen as varlen_module  # noqa: E402
from kgen.ops import variants as variants_module  # noqa: E402

H, HKV, D = 4, 2, 32
CU_Q = [0, 37, 37, 90, 150, 151]  # an empty sequence, one of a single query
CU_K = [0, 50, 61, 90, 170, 180]  # the same sequences' keys, of other lengths


def _meaning(q, k, v, cu_q, cu_k, causal, scale):
    """Each sequence's attention on its own (flash-attn's meaning), in q's dtype through float
    (for the bound on PyTorch's own error) or float64; (out (total_q, H, D), lse (H, total_q))."""
    outs, lses = [], []
    for d in range(len(cu_q) - 1):
        (a, b), (a2, b2) = (cu_q[d], cu_q[d + 1]), (cu_k[d], cu_k[d + 1])
        if b == a:
            continue
        qs = q[a:b].transpose(0, 1)
        ks, vs = (t[a2:b2].transpose(0, 1).repeat_interleave(H // HKV, 0) for t in (k, v))
        s = (qs.float() @ ks.float().transpose(-1, -2) if q.dtype != torch.float64 else qs @ ks.transpose(-1, -2)) * scale
        if causal:
            i, j = torch.arange(b - a)[:, None], torch.arange(b2 - a2)[None, :]
            s = s.masked_fill(j > i + (b2 - a2) - (b - a), -math.inf)
        p = torch.softmax(s, -1).nan_to_num(0.0)
        outs.append((p.to(vs.dtype) @ vs).transpose(0, 1))
        lses.append(torch.logsumexp(s, -1))
    return torch.cat(outs), torch.cat(lses, 1)


def _inputs(same: bool, device: str = "cpu"):
    gen = torch.Generator().manual_seed(11 + same)
    cu_q = torch.tensor(CU_Q, dtype=torch.int32)
    cu_k = cu_q if same else torch.tensor(CU_K, dtype=torch.int32)
    total_k = CU_Q[-1] if same else CU_K[-1]
    q = torch.randn(CU_Q[-1], H, D, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(total_k, HKV, D, generator=gen).to(torch.bfloat16) for _ in range(2))
    do = torch.randn(CU_Q[-1], H, D, generator=gen).to(torch.bfloat16)
    return [t.to(device) for t in (q, k, v, do, cu_q)] + [cu_q.to(device) if same else cu_k.to(device)]


def _check_against_meaning(same: bool, causal: bool, device: str) -> None:
    q, k, v, do, cu_q, cu_k = _inputs(same, device)
    if same:
        cu_k = cu_q  # one tensor for both, as self-attention over packed sequences passes it
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o, lse, none = flash_attn_varlen_func(*leaves, cu_q, cu_k, 80, 80, causal=causal, return_attn_probs=True)
    assert none is None and o.shape == q.shape and lse.shape == (H, q.shape[0]) and lse.dtype == torch.float32
    got = [o, lse, *torch.autograd.grad(o, leaves, do)]
    cq, ck = cu_q.tolist(), cu_k.tolist()
    scale = 1 / math.sqrt(D)
    exact = [t.cpu().double().requires_grad_() for t in (q, k, v)]
    o_w, lse_w = _meaning(*exact, cq, ck, causal, scale)
    want = [o_w, lse_w, *torch.autograd.grad(o_w, exact, do.cpu().double())]
    lowp = [t.cpu().clone().requires_grad_() for t in (q, k, v)]
    o_l, lse_l = _meaning(*lowp, cq, ck, causal, scale)
    low = [o_l, lse_l, *torch.autograd.grad(o_l, lowp, do.cpu())]
    for n, g, w, l in zip(("o", "lse", "dq", "dk", "dv"), got, want, low):
        helpers.check_close(n, g.detach().cpu(), w.detach(), l.detach())


@pytest.mark.parametrize("same", [True, False], ids=["one_packing", "two_packings"])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_each_sequence_on_its_own(same, causal):
    _check_against_meaning(same, causal, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("same", [True, False], ids=["one_packing", "two_packings"])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_varlen_matches_each_sequence_on_its_own(same, causal):
    _check_against_meaning(same, causal, "cuda")


def test_sequence_ids_are_kept_per_cu_seqlens_tensor_and_remade_when_it_changes():
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    first, row, longest, host = varlen_module._ids.get(cu, 8, "cu_seqlens_q")
    assert first.tolist() == [[0, 0, 0, 1, 1, 1, 1, 1]] and row.tolist() == [[0, 3, 8]] and longest == 5
    assert host == (0, 3, 8)
    kept = varlen_module._ids.get(cu, 8, "cu_seqlens_q")  # the same tensor, unchanged: the same objects
    assert kept[0] is first and kept[1] is row
    cu[1] = 6  # in place: its version moves on
    again, _, longest, _ = varlen_module._ids.get(cu, 8, "cu_seqlens_q")
    assert again is not first and again.tolist() == [[0] * 6 + [1] * 2] and longest == 6
    equal = cu.clone()  # another tensor with the same values is measured (and checked) on its own
    assert varlen_module._ids.get(equal, 8, "cu_seqlens_q")[0] is not again


@pytest.mark.parametrize("packing", ["one_tensor", "equal_values", "other_values"])
def test_one_packing_runs_the_document_spec_and_two_the_varlen_spec(monkeypatch, packing):
    ran = []
    monkeypatch.setattr(variants_module, "call_op", lambda name, q, *rest, **kw: ran.append(name) or (q, q[..., 0]))
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    cu_k = {"one_tensor": cu, "equal_values": cu.clone(), "other_values": torch.tensor([0, 5, 8], dtype=torch.int32)}[packing]
    q = torch.randn(8, 2, 32).to(torch.bfloat16)
    flash_attn_varlen_func(q, q, q, cu, cu_k, 5, 5, causal=True)
    assert ran == ["fa2_varlen" if packing == "other_values" else "fa2_document"]


def test_flash_attn_func_takes_flash_attns_positional_order_and_returns_the_lse():
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, n, h, D, generator=gen).to(torch.bfloat16) for n, h in ((33, H), (41, HKV), (41, HKV)))
    o = flash_attn_func(q, k, v, 0.0, 0.3, True)  # dropout_p, softmax_scale, causal
    o2, lse, none = flash_attn_func(q, k, v, softmax_scale=0.3, causal=True, return_attn_probs=True)
    assert none is None and torch.equal(o, o2)
    i, j = torch.arange(33)[:, None], torch.arange(41)[None, :]
    s = (q.double().transpose(1, 2) @ k.double().transpose(1, 2).repeat_interleave(H // HKV, 1).transpose(-1, -2)) * 0.3
    want = torch.logsumexp(s.masked_fill(j > i + 8, -math.inf), -1)
    low = torch.logsumexp((q.transpose(1, 2).float() @ k.transpose(1, 2).float().repeat_interleave(H // HKV, 1)
                           .transpose(-1, -2) * 0.3).masked_fill(j > i + 8, -math.inf), -1)
    helpers.check_close("lse", lse, want, low)


def _bad(**change):
    q, k, v = (torch.randn(n, h, D).to(torch.bfloat16) for n, h in ((10, H), (10, HKV), (10, HKV)))
    args = dict(q=q, k=k, v=v, cu_seqlens_q=torch.tensor([0, 4, 10], dtype=torch.int32), max_seqlen_q=6, max_seqlen_k=6)
    args["cu_seqlens_k"] = args["cu_seqlens_q"]
    args.update(change)
    return args


@pytest.mark.parametrize("change, message", [
    ({"cu_seqlens_q": torch.tensor([0, 4, 10])}, "flash_attn_varlen_func: 'cu_seqlens_q' is torch.int64 (3,); accepted: a torch.int32 tensor of shape (number of sequences + 1,)"),
    ({"cu_seqlens_q": torch.tensor([0, 7, 4, 10], dtype=torch.int32)}, "flash_attn_varlen_func: 'cu_seqlens_q' is [0, 7, 4, 10]; accepted: offsets starting at 0, non-decreasing, ending at the packed length 10"),
    ({"cu_seqlens_q": torch.tensor([0, 4, 9], dtype=torch.int32)}, "flash_attn_varlen_func: 'cu_seqlens_q' is [0, 4, 9]; accepted: offsets starting at 0, non-decreasing, ending at the packed length 10"),
    ({"max_seqlen_q": 5}, "flash_attn_varlen_func: max_seqlen_q is 5 but the longest sequence has 6; accepted: an int >= 6"),
    ({"cu_seqlens_k": torch.tensor([0, 10], dtype=torch.int32)}, "flash_attn_varlen_func: cu_seqlens_q has 2 sequences and cu_seqlens_k 1; they must match"),
    ({"dropout_p": 1.5}, "flash_attn_varlen_func: dropout_p is 1.5; accepted: a number with 0 <= dropout_p < 1"),
    ({"window_size": (8,)}, "flash_attn_varlen_func: window_size is (8,); accepted: (left, right), each -1 (no limit) or a number of keys >= 0"),
    ({"q": torch.randn(1, 10, H, D).to(torch.bfloat16)}, "flash_attn_varlen_func: 'q' has shape (1, 10, 4, 32); expected 3 dims (total, heads, head_dim)"),
])
def test_bad_arguments_are_named(change, message):
    with pytest.raises(LaunchError) as e:
        flash_attn_varlen_func(**_bad(**change))
    assert str(e.value) == message
