"""How fast each fp32 reduction path adds into global memory on this GPU: the facts behind the
descriptor's `fp32_reduce_tbps`, which the byte model of kgen/ir/passes/bulk_reduce.py compares.

    python -m kgen.bench.reductions [--json out.json]

kgen/bench/specs/tile_reduce.yaml has P programs per output add 64-row tiles into the same rows
in the same order, as the key blocks of one head add dq in the attention backward; the product
they add is small, so the adds take the time. Each path (per-element atomics, bulk reductions
from shared memory) and row width (64 and 128 fp32) is checked against a float64 reference,
then timed (median of triton.testing.do_bench); reported as fp32 bytes added per second.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

SPEC = Path(__file__).resolve().parent / "specs" / "tile_reduce.yaml"
P, G, M = 64, 16, 8192  # 64 adders per output (S = 8k, 128-key blocks), 16 outputs, 128 row blocks


def _bench(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from kgen.runtime.op import load

    op = load(SPEC)
    torch.manual_seed(0)
    rows = []
    for cols in (64, 128):
        a = torch.randn(P, M, 16, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(G, 16, cols, device="cuda", dtype=torch.bfloat16)
        ref = torch.einsum("pmk,gkn->gmn", a.double(), b.double())
        for bulk in (False, True):
            out = op(a, b, bulk=bulk)
            err = ((out.double() - ref).norm() / ref.norm()).item()
            ms = _bench(lambda: op(a, b, bulk=bulk))
            tbps = P * G * M * cols * 4 / (ms * 1e-3) / 1e12
            rows.append({"cols": cols, "path": "bulk" if bulk else "atomic", "ms": ms, "tbps": tbps, "rel_err": err})
            print(f"cols {cols:4d} {rows[-1]['path']:7s} {ms:8.3f} ms {tbps:6.2f} TB/s  rel err {err:.1e}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "P": P, "G": G, "M": M,
                                         "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
