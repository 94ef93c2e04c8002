"""One forward and one backward of kgen's flash_attn_func and of SDPA's flash and cuDNN backends on
the same inputs, between cudaProfilerStart and cudaProfilerStop, for a profiler that starts
collecting there:

    ncu --clock-control none --profile-from-start off --set full -o fa \\
        python -m kgen.bench.attention_profile [--head-dim 128] [--seqlen 4096] [--causal]

B*S = 16384 tokens and H*D = 2048, as in kgen.bench.attention. Three warm-up rounds run before
the profiled one, so compilation and autotuning stay outside it.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kgen.ops import flash_attn_func


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    d, s = args.head_dim, args.seqlen
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)

    def kgen_round():
        flash_attn_func(q, k, v, causal=args.causal).backward(dout)

    def sdpa_round(backend):
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=args.causal)
            out.backward(dout.transpose(1, 2))

    rounds = [kgen_round, lambda: sdpa_round(SDPBackend.FLASH_ATTENTION), lambda: sdpa_round(SDPBackend.CUDNN_ATTENTION)]

    for _ in range(3):
        for r in rounds:
            r()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for r in rounds:
        r()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
