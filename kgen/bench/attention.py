"""Benchmark kgen's FlashAttention-2 against PyTorch's attention backends, in one process.

    python -m kgen.bench.attention [--json out.json] [--plot out.png] [--quick] [--head-dims 96] [--seqlens 2048,4096]
        [--dropout 0.1]

Grid and conventions as in FlashAttention's benchmarks: bf16, B*S = 16384 tokens, H*D = 2048,
S from 1k to 16k, D 64 and 128, causal and not; median CUDA-event time of many runs
(triton.testing.do_bench); the backward is timed as torch.autograd.grad(out, (q, k, v), dout).
FLOPs: 4*B*H*S*S*D forward (half when causal), 2.5x that backward. Peers run on the same inputs
right after kgen: SDPA's flash, cuDNN and memory-efficient backends, and FlexAttention compiled
with torch.compile (`--providers kgen,kgen-det,flex` adds kgen's deterministic backward). Before
timing, kgen's output and gradients are compared with SDPA flash's.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def _bench(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def _sdpa(backend, dropout_p: float = 0.0):
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=causal, dropout_p=dropout_p).transpose(1, 2)
    return run


_flex_cache: dict = {}


def _flex(q, k, v, causal):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if "fn" not in _flex_cache:
        # one compiled graph per shape: raise dynamo's recompile limit (8 by default), past which
        # it silently falls back to the unfused eager flex_attention and times that instead
        torch._dynamo.config.cache_size_limit = 256
        if hasattr(torch._dynamo.config, "recompile_limit"):
            torch._dynamo.config.recompile_limit = 256
        _flex_cache["fn"] = torch.compile(flex_attention, dynamic=False)
    mask = None
    if causal:
        key = (q.shape[1], k.shape[1])
        if key not in _flex_cache:
            _flex_cache[key] = create_block_mask(lambda b, h, i, j: i >= j, None, None, key[0], key[1])
        mask = _flex_cache[key]
    return _flex_cache["fn"](q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=mask).transpose(1, 2)


def providers(dropout_p: float = 0.0):
    """Each provider as fn(q, k, v, causal); with dropout_p > 0 FlexAttention is left out (it has
    no dropout) and every other provider drops with that probability from its own RNG stream."""
    from torch.nn.attention import SDPBackend

    from kgen.ops import flash_attn_func

    provs = {
        "kgen": lambda q, k, v, causal: flash_attn_func(q, k, v, causal=causal, dropout_p=dropout_p),
        # on request only: the backward without atomics (dq recomputes p and dp per query block, as
        # FlexAttention's backward does), against the default's atomic dq
        "kgen-det": lambda q, k, v, causal: flash_attn_func(q, k, v, causal=causal, dropout_p=dropout_p,
                                                            deterministic=True),
        "fa2": _sdpa(SDPBackend.FLASH_ATTENTION, dropout_p),
        "cudnn": _sdpa(SDPBackend.CUDNN_ATTENTION, dropout_p),
        "efficient": _sdpa(SDPBackend.EFFICIENT_ATTENTION, dropout_p),
        "flex": _flex,
    }
    if dropout_p > 0:
        del provs["flex"]
    return provs


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def measure(name, fn, q, k, v, dout, causal, flops_fwd):
    row = {}
    try:
        out = fn(q, k, v, causal)
        row["fwd_ms"] = _bench(lambda: fn(q, k, v, causal))
        row["bwd_ms"] = _bench(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
        row["fwd_tflops"] = flops_fwd / row["fwd_ms"] * 1e-9
        row["bwd_tflops"] = 2.5 * flops_fwd / row["bwd_ms"] * 1e-9
    except Exception as e:  # a backend that does not support a shape is reported, not fatal
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="D=128, S in {2k, 4k, 8k} only")
    ap.add_argument("--providers", default="kgen,fa2,cudnn,efficient,flex")
    ap.add_argument("--head-dims", default=None, help="comma-separated head_dims (default 64,128; --quick 128)")
    ap.add_argument("--seqlens", default=None, help="comma-separated sequence lengths (default 1k-16k; --quick 2k-8k)")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="dropout_p for every provider (Flex left out); outputs then differ by RNG, so the "
                         "comparison with FA2 before timing is skipped (tests/ops/test_attention_dropout.py checks it)")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    provs = {k: v for k, v in providers(args.dropout).items() if k in args.providers.split(",")}
    seqs = [2048, 4096, 8192] if args.quick else [1024, 2048, 4096, 8192, 16384]
    dims = [128] if args.quick else [64, 128]
    if args.head_dims:
        dims = [int(x) for x in args.head_dims.split(",")]
    if args.seqlens:
        seqs = [int(x) for x in args.seqlens.split(",")]
    rows = []
    t_build = time.perf_counter()
    for d in dims:
        for causal in (False, True):
            for s in seqs:
                b, h = max(1, 16384 // s), max(1, 2048 // d)
                q, k, v = (torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
                dout = torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16)
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                rec = {"D": d, "S": s, "B": b, "H": h, "causal": causal, "dropout_p": args.dropout}
                if "kgen" in provs and "fa2" in provs and args.dropout == 0:
                    o1 = provs["kgen"](q, k, v, causal)
                    g1 = torch.autograd.grad(o1, (q, k, v), dout)
                    o2 = provs["fa2"](q, k, v, causal)
                    g2 = torch.autograd.grad(o2, (q, k, v), dout)
                    rec["rel_err_vs_fa2"] = {n: rel_err(a, b_) for n, a, b_ in zip(("o", "dq", "dk", "dv"), (o1, *g1), (o2, *g2))}
                for name, fn in provs.items():
                    rec[name] = measure(name, fn, q, k, v, dout, causal, flops)
                kg, fa = rec.get("kgen", {}), rec.get("fa2", {})
                if "fwd_ms" in kg and "fwd_ms" in fa:
                    rec["ratio_fwd"] = fa["fwd_ms"] / kg["fwd_ms"]
                    rec["ratio_bwd"] = fa["bwd_ms"] / kg["bwd_ms"]
                rows.append(rec)
                if args.json:  # after every row, so a run cut short still leaves its rows
                    args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                                     "partial": True, "rows": rows}, indent=1))
                cells = " ".join(f"{n}={r.get('fwd_tflops', float('nan')):.0f}/{r.get('bwd_tflops', float('nan')):.0f}"
                                 for n, r in ((n, rec[n]) for n in provs))
                print(f"D={d} S={s} causal={causal}: TFLOP/s fwd/bwd {cells} "
                      f"kgen/fa2 fwd {rec.get('ratio_fwd', float('nan')):.2f}x bwd {rec.get('ratio_bwd', float('nan')):.2f}x "
                      f"err {rec.get('rel_err_vs_fa2')}", flush=True)
                del q, k, v, dout
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "wall_s": time.perf_counter() - t_build, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.plot:
        plot(rows, list(provs), args.plot)


def plot(rows, names, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(r["D"], r["causal"]) for r in rows})
    fig, axes = plt.subplots(2, len(keys), figsize=(4 * len(keys), 7), squeeze=False)
    for col, (d, causal) in enumerate(keys):
        sel = [r for r in rows if r["D"] == d and r["causal"] == causal]
        for row, phase in enumerate(("fwd", "bwd")):
            ax = axes[row][col]
            for n in names:
                ys = [r[n].get(f"{phase}_tflops", math.nan) for r in sel]
                ax.plot([r["S"] for r in sel], ys, marker="o", label=n)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{phase} D={d} causal={causal}")
            ax.set_xlabel("S")
            ax.set_ylabel("TFLOP/s")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
