"""Benchmark kgen.ops.flash_attn_varlen_func on packed sequences against FlexAttention's
document mask, PyTorch's FlashAttention-2 varlen kernel (aten::_flash_attention_forward) and
SDPA on jagged nested tensors (the public route to that kernel), in one process, on the same
inputs.

    python -m kgen.bench.varlen [--json out.json] [--head-dims 64,128] [--mean-lens 512,2048]

16384 packed tokens (B = 1), H*D = 2048, bf16, causal; sequence lengths drawn once per mean
(seed 0, uniform in [mean/4, 7*mean/4], the last cut to fill). Two kgen rows: one cu_seqlens
tensor for queries and keys, and two tensors of equal values (both run fa2_document, bounded by
the sequence ids: the second row shows that equal values are recognised). Times:
median CUDA-event time, the backward as torch.autograd.grad(out, (q, k, v), dout). FLOPs count
the visible pairs (4*D per pair forward, 2.5x backward). Outputs and gradients are compared
with Flex's before timing.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from .attention import _bench, rel_err

TOTAL = 16384


def _lengths(mean: int) -> list[int]:
    gen = torch.Generator().manual_seed(0)
    out, left = [], TOTAL
    while left > 0:
        n = min(left, int(torch.randint(mean // 4, 7 * mean // 4 + 1, (1,), generator=gen)))
        out.append(n)
        left -= n
    return out


def _flex(seg: torch.Tensor):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch._dynamo.config.cache_size_limit = 256
    compiled = torch.compile(flex_attention, dynamic=False)
    mask = create_block_mask(lambda b, h, i, j: (seg[i] == seg[j]) & (j <= i), None, None, TOTAL, TOTAL)
    return lambda q, k, v: compiled(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                    block_mask=mask)[0].transpose(0, 1)


def _sdpa_jagged(cu: torch.Tensor):
    import torch.nn.functional as F

    offsets = cu.to(torch.int64)

    def run(q, k, v):
        nq, nk, nv = (torch.nested.nested_tensor_from_jagged(t, offsets).transpose(1, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(nq, nk, nv, is_causal=True).transpose(1, 2).values()
    return run


def _fa2_varlen(cu: torch.Tensor, longest: int):
    # PyTorch's own FlashAttention-2 varlen kernel, the one its jagged SDPA dispatches to, called
    # without the nested-tensor wrapping (aten::_flash_attention_forward has its derivative).
    def run(q, k, v):
        return torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, longest, longest, 0.0, True, False)[0]
    return run


def main() -> None:
    from kgen.ops import flash_attn_varlen_func

    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--mean-lens", default="512,2048")
    args = ap.parse_args()
    rows = []
    print(f"{'provider':14} {'D':>4} {'mean':>5}  {'fwd':>7} {'bwd':>7}  {'fwd/kgen':>8} {'bwd/kgen':>8}  (TFLOP/s on visible pairs; "
          "x/kgen = provider time / kgen time)")
    for d in map(int, args.head_dims.split(",")):
        h = 2048 // d
        for mean in map(int, args.mean_lens.split(",")):
            lens = _lengths(mean)
            cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
            cu_k = cu.clone()  # equal values, another tensor: the two-packing spec
            seg = torch.repeat_interleave(torch.arange(len(lens), device="cuda"), torch.tensor(lens, device="cuda"))
            longest = max(lens)
            pairs = sum(n * (n + 1) // 2 for n in lens)
            gen = torch.Generator(device="cuda").manual_seed(0)
            q, k, v, dout = (torch.randn(TOTAL, h, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            providers = {
                "kgen": lambda q, k, v: flash_attn_varlen_func(q, k, v, cu, cu, longest, longest, causal=True),
                "kgen equal cu": lambda q, k, v: flash_attn_varlen_func(q, k, v, cu, cu_k, longest, longest, causal=True),
                "flex": _flex(seg),
                "fa2 varlen": _fa2_varlen(cu, longest),
                "sdpa jagged": _sdpa_jagged(cu),
            }
            times, outs = {}, {}
            for name, fn in providers.items():
                try:
                    out = fn(q, k, v)
                    outs[name] = (out, torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
                    times[name] = (_bench(lambda: fn(q, k, v)),
                                   _bench(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)))
                except Exception as e:  # a peer this torch cannot run is reported, not fatal
                    print(f"{name:14} {d:>4} {mean:>5}  unavailable: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            for name, (f_ms, b_ms) in times.items():
                flops = 4 * h * d * pairs
                row = {"provider": name, "head_dim": d, "mean_len": mean, "fwd_ms": f_ms, "bwd_ms": b_ms,
                       "fwd_tflops": flops / f_ms * 1e-9, "bwd_tflops": 2.5 * flops / b_ms * 1e-9,
                       "fwd_vs_kgen": f_ms / times["kgen"][0], "bwd_vs_kgen": b_ms / times["kgen"][1],
                       "rel_err_out": rel_err(outs[name][0], outs["flex"][0]) if "flex" in outs else math.nan,
                       "rel_err_grads": max(rel_err(a, b) for a, b in zip(outs[name][1], outs["flex"][1])) if "flex" in outs else math.nan}
                rows.append(row)
                print(f"{name:14} {d:>4} {mean:>5}  {row['fwd_tflops']:7.1f} {row['bwd_tflops']:7.1f}  {row['fwd_vs_kgen']:8.2f} "
                      f"{row['bwd_vs_kgen']:8.2f}  err {row['rel_err_out']:.1e}/{row['rel_err_grads']:.1e}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "total": TOTAL}, indent=1))


if __name__ == "__main__":
    main()
