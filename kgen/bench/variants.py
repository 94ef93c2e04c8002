"""Benchmark kgen's attention variants (specs/variants, through flash_attn_func's keywords)
against FlexAttention on the same masks and score modifications, in one process.

    python -m kgen.bench.variants [--json out.json] [--seqlens 2048,8192] [--head-dims 64,128]

bf16, B*S = 16384 tokens, H*D = 2048, as kgen.bench.attention. FlexAttention is compiled with
torch.compile, its block mask made by create_block_mask once per shape (outside the timing), its
score_mod the same function. Times: median CUDA-event time (triton.testing.do_bench), the
backward as torch.autograd.grad(out, (q, k, v), dout). FLOPs count only the visible (query, key)
pairs: 4*D per pair forward, 2.5x that backward. Before timing, kgen's output and gradients are
compared with Flex's (relative error). The measured cases (a spec whose block table is measured
at run time) also time kgen's forward with the table measured on every call, as a training step
with new segment ids would; otherwise it is kept between calls, as Flex's block mask is here.
"""
from __future__ import annotations

import argparse
import json
import math
from functools import lru_cache
from pathlib import Path

import torch

from .attention import _bench, rel_err

WINDOW = (1024, 0)  # left, right: a causal window of 1024 keys, as Mistral's
SOFTCAP = 30.0  # Gemma 2's attention softcap
PREFIX = 0.25  # prefix-LM: the first quarter of the sequence is seen by every query
DOCUMENTS = 8  # document masking: this many packed documents per row, lengths drawn once (seed 0)
RUNS = 512  # shuffled segments: runs of this many positions, each given one of SEGMENT_IDS ids at random
SEGMENT_IDS = 4
SEGMENT_SPEC = Path(__file__).resolve().parent / "specs" / "segment_eq.yaml"  # a mask the analysis cannot bound


@lru_cache(maxsize=None)
def _documents(s: int):
    """(seg (S,), starts (N + 1,)) int32 on the GPU: DOCUMENTS packed documents of random lengths."""
    gen = torch.Generator().manual_seed(0)
    cuts = torch.sort(torch.randperm(s - 1, generator=gen)[:DOCUMENTS - 1] + 1).values
    starts = torch.cat([torch.zeros(1, dtype=torch.long), cuts, torch.tensor([s])])
    seg = torch.bucketize(torch.arange(s), cuts, right=True)
    return seg.to(torch.int32).cuda(), starts.to(torch.int32).cuda()


@lru_cache(maxsize=None)
def _shuffled(s: int):
    """seg (S,) int32 on the GPU: runs of RUNS positions, each a random one of SEGMENT_IDS ids (seed 0),
    so that a query sees several runs of keys apart from each other."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, SEGMENT_IDS, (-(-s // RUNS),), generator=gen)
    return ids.repeat_interleave(RUNS)[:s].to(torch.int32).cuda()


@lru_cache(maxsize=None)
def _document_rows(s: int, b: int):
    """seg and starts for each of b rows, made once (outside the timing)."""
    seg, starts = _documents(s)
    return seg.expand(b, -1).contiguous(), starts.expand(b, -1).contiguous()


def cases(s: int, h: int):
    """(label, kgen keywords, causal, Flex mask_mod or None, Flex score_mod or None, visible(i, j))."""
    slopes = torch.tensor([2 ** (-8 * (i + 1) / h) for i in range(h)], device="cuda", dtype=torch.float32)
    left, right = WINDOW
    prefix = int(s * PREFIX)
    seg, _ = _documents(s)
    shuffled = _shuffled(s)
    return [
        ("window", {"window_size": WINDOW}, False,
         lambda b, hh, i, j: (j >= i - left) & (j <= i + right), None,
         lambda i, j: (j >= i - left) & (j <= i + right)),
        ("softcap causal", {"softcap": SOFTCAP}, True, lambda b, hh, i, j: j <= i,
         lambda score, b, hh, i, j: SOFTCAP * torch.tanh(score / SOFTCAP), lambda i, j: j <= i),
        ("alibi causal", {"alibi_slopes": slopes}, True, lambda b, hh, i, j: j <= i,
         lambda score, b, hh, i, j: score - slopes[hh] * (i - j).abs(), lambda i, j: j <= i),
        ("prefix-lm", {"window_size": (-1, -1), "_prefix": prefix}, False,
         lambda b, hh, i, j: (j < prefix) | (j <= i), None, lambda i, j: (j < prefix) | (j <= i)),
        ("document causal", {"_document": True}, True,
         lambda b, hh, i, j: (seg[i] == seg[j]) & (j <= i), None, lambda i, j: (seg[i] == seg[j]) & (j <= i)),
        # the same mask as "document causal", through a spec whose programs measure their blocks
        ("measured docs", {"_segments": seg}, True,
         lambda b, hh, i, j: (seg[i] == seg[j]) & (j <= i), None, lambda i, j: (seg[i] == seg[j]) & (j <= i)),
        ("measured shuffled", {"_segments": shuffled}, True,
         lambda b, hh, i, j: (shuffled[i] == shuffled[j]) & (j <= i), None,
         lambda i, j: (shuffled[i] == shuffled[j]) & (j <= i)),
    ]


def _visible_pairs(visible, s: int) -> int:
    i = torch.arange(s, device="cuda")[:, None]
    total = 0
    for j0 in range(0, s, 4096):  # in slabs, not an S x S tensor at once
        j = torch.arange(j0, min(j0 + 4096, s), device="cuda")[None, :]
        total += int(visible(i, j).sum())
    return total


def _kgen(kw: dict, causal: bool):
    from kgen.ops import _variant, flash_attn_func

    if "_document" in kw:  # the document spec's op: seg and starts for every row of the batch
        op = _variant("fa2_document")

        def run(q, k, v):
            seg, starts = _document_rows(q.shape[1], q.shape[0])
            return op(q, k, v, seg, starts, softmax_scale=1 / math.sqrt(q.shape[-1]), causal=causal)[0]
        return run
    if "_segments" in kw:  # segment ids compared: the bench's own spec, measured at run time
        from kgen.runtime.op import load

        op, seg, rows = load(SEGMENT_SPEC), kw["_segments"], {}

        def measured(q, k, v, fresh: bool = False):
            if q.shape[0] not in rows:  # made once, outside the timing
                rows[q.shape[0]] = seg.expand(q.shape[0], -1).contiguous()
            ids = rows[q.shape[0]]
            # fresh: another tensor object over the same ids each call, so that the block table
            # kept for the last call's seg (kgen/runtime/plan.py) is not reused but measured again
            return op(q, k, v, ids.view_as(ids) if fresh else ids, softmax_scale=1 / math.sqrt(q.shape[-1]),
                      causal=causal)[0]
        return measured
    if "_prefix" in kw:  # not a flash-attn keyword: the prefix-LM spec's op directly
        op, prefix = _variant("fa2_prefix_lm"), kw["_prefix"]
        return lambda q, k, v: op(q, k, v, softmax_scale=1 / math.sqrt(q.shape[-1]), prefix=prefix)[0]
    return lambda q, k, v: flash_attn_func(q, k, v, causal=causal, **kw)


def _flex(mask_mod, score_mod, s: int):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    import torch._functorch.config

    torch._dynamo.config.cache_size_limit = 256
    # the backward is timed again and again on one graph (retain_graph), which a compiled
    # backward refuses while it donates its saved buffers
    torch._functorch.config.donated_buffer = False
    compiled = torch.compile(flex_attention, dynamic=False)
    block_mask = create_block_mask(mask_mod, None, None, s, s)
    return lambda q, k, v: compiled(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), score_mod=score_mod,
                                    block_mask=block_mask).transpose(1, 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--seqlens", default="2048,8192")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--cases", default=None, help="comma-separated case labels to run (default: all)")
    args = ap.parse_args()
    only = None if args.cases is None else set(args.cases.split(","))
    rows = []
    print(f"{'case':16} {'D':>4} {'S':>6}  {'kgen fwd':>9} {'flex fwd':>9} {'ratio':>6}  {'kgen bwd':>9} {'flex bwd':>9} {'ratio':>6}"
          "  (TFLOP/s on visible pairs; ratio = Flex time / kgen time)")
    for d in map(int, args.head_dims.split(",")):
        for s in map(int, args.seqlens.split(",")):
            b, h = 16384 // s, 2048 // d
            gen = torch.Generator(device="cuda").manual_seed(0)
            q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            for label, kw, causal, mask_mod, score_mod, visible in cases(s, h):
                if only is not None and label not in only:
                    continue
                flops = 4 * b * h * d * _visible_pairs(visible, s)
                row = {"case": label, "head_dim": d, "seqlen": s}
                outs = {}
                for name, fn in (("kgen", _kgen(kw, causal)), ("flex", _flex(mask_mod, score_mod, s))):
                    out = fn(q, k, v)
                    outs[name] = (out, torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
                    row[f"{name}_fwd_ms"] = _bench(lambda: fn(q, k, v))
                    row[f"{name}_bwd_ms"] = _bench(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
                    if name == "kgen" and "_segments" in kw:  # the forward with its table measured every call
                        row["kgen_fwd_measuring_ms"] = _bench(lambda: fn(q, k, v, fresh=True))
                row["rel_err_out"] = rel_err(outs["kgen"][0], outs["flex"][0])
                row["rel_err_grads"] = max(rel_err(a, b_) for a, b_ in zip(outs["kgen"][1], outs["flex"][1]))
                for side in ("fwd", "bwd"):
                    f = flops * (2.5 if side == "bwd" else 1.0)
                    for name in ("kgen", "flex"):
                        row[f"{name}_{side}_tflops"] = f / row[f"{name}_{side}_ms"] * 1e-9
                    row[f"{side}_ratio"] = row[f"flex_{side}_ms"] / row[f"kgen_{side}_ms"]
                rows.append(row)
                measuring = ""
                if "kgen_fwd_measuring_ms" in row:
                    row["fwd_measuring_ratio"] = row["flex_fwd_ms"] / row["kgen_fwd_measuring_ms"]
                    measuring = f"  fwd measuring its table: {row['fwd_measuring_ratio']:.2f}"
                print(f"{label:16} {d:>4} {s:>6}  {row['kgen_fwd_tflops']:9.1f} {row['flex_fwd_tflops']:9.1f} {row['fwd_ratio']:6.2f}"
                      f"  {row['kgen_bwd_tflops']:9.1f} {row['flex_bwd_tflops']:9.1f} {row['bwd_ratio']:6.2f}"
                      f"  err {row['rel_err_out']:.1e}/{row['rel_err_grads']:.1e}{measuring}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "window": WINDOW, "softcap": SOFTCAP, "prefix": PREFIX}, indent=1))


if __name__ == "__main__":
    main()
