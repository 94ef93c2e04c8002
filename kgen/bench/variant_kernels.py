"""Where a variant's forward and backward spend their time: CUDA time per kernel (torch.profiler)
of kgen and FlexAttention on kgen.bench.variants' cases, plus dense and causal attention through
flash_attn_func, on the same inputs:

    python -m kgen.bench.variant_kernels [--head-dim 128] [--seqlen 8192] [--cases causal,prefix-lm]
                                         [--rounds 10] [--json out.json]

B*S = 16384 tokens and H*D = 2048, as the other attention benches. Each case runs three warm-up
rounds (compiles and Flex's autotuning stay outside), then `--rounds` rounds of one forward and
one backward under the profiler; the times are per round. Two forms of a kernel compare best in
one process (`kgen`'s cache keeps each form's binaries apart); the order of the cases is the
order asked.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def _cases(s: int, h: int) -> dict:
    """label -> (kgen's call, Flex's call): the variants bench's cases, dense and causal."""
    from kgen.ops import flash_attn_func

    from .variants import _flex, _kgen, cases

    out = {"dense": (lambda q, k, v: flash_attn_func(q, k, v), _flex(lambda b, hh, i, j: j >= 0, None, s)),
           "causal": (lambda q, k, v: flash_attn_func(q, k, v, causal=True), _flex(lambda b, hh, i, j: j <= i, None, s))}
    for label, kw, causal, mask_mod, score_mod, _ in cases(s, h):
        out[label] = (_kgen(kw, causal), _flex(mask_mod, score_mod, s))
    return out


def kernel_times(fn, args, dout, rounds: int) -> dict[str, float]:
    """ms per round of each kernel one forward and one backward of fn launch."""
    from torch.profiler import ProfilerActivity, profile

    def step():
        torch.autograd.grad(fn(*args), args, dout)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(rounds):
            step()
        torch.cuda.synchronize()
    times = {}
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", 0) or 0
        if us > 0:
            times[e.key] = us / rounds / 1000
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--cases", default="causal,prefix-lm", help="comma-separated labels (kgen.bench.variants', dense, causal)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("kgen.bench.variant_kernels times kernels on a CUDA GPU, and torch sees none")
    d, s = args.head_dim, args.seqlen
    b, h = 16384 // s, 2048 // d
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    known = _cases(s, h)
    labels = args.cases.split(",")
    unknown = [x for x in labels if x not in known]
    if unknown:
        raise SystemExit(f"--cases: unknown {', '.join(unknown)}; accepted: {', '.join(known)}")
    result = {}
    for label in labels:
        for who, fn in zip(("kgen", "flex"), known[label]):
            times = kernel_times(fn, (q, k, v), dout, args.rounds)
            result[f"{label} {who}"] = times
            print(f"== {label}, {who}: {sum(times.values()):.3f} ms a round (D={d}, S={s}, B={b}, H={h})")
            for name, ms in sorted(times.items(), key=lambda t: -t[1])[:6]:
                print(f"   {ms:8.3f}  {name[:80]}")
    if args.json:
        args.json.write_text(json.dumps({"head_dim": d, "seqlen": s, "rounds": args.rounds, "times": result}, indent=1))


if __name__ == "__main__":
    main()
