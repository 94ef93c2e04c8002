"""Row ops written as specs (specs/rmsnorm, layernorm, softmax, swiglu) against torch.compile and
PyTorch eager on a GPU, in one process, on the same inputs.

    python -m kgen.bench.rows [--json out.json] [--shapes 16384x4096,8192x14336] [--dtype bf16]

Forward: the op on inputs that need no gradient. Backward: one forward with gradients, then
`torch.autograd.grad` of its output with a random output gradient, timed alone (retain_graph),
for each of kgen, torch.compile (default mode: its forward and backward Triton kernels) and eager.
Before timing, each output and input gradient is checked against float64 (rel. error; kgen must
be within 2x the error of eager in the input dtype plus 1e-5). Times are kernel times: kgen,
torch.compile and eager called in turn, each round behind a device-side wait and after an L2
flush (kgen.tune.cuda_timer, the tune's timer), medians of 100 rounds. `--timer do_bench` takes
triton.testing.do_bench's medians instead, which hold the host's path to the kernels where it is
longer than the flush: a kgen or compiled backward's autograd call then timed 2.3x its kernels
in one process and not in the next (docs/PERFORMANCE.md, session 42). Bandwidth counts the bytes each op must move at least (every input
read once, every output written once), against the copy ceiling measured in the same process
(`copy_` of one (M, N) tensor into another: its read and write bytes over its median time).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

SPECS = Path(__file__).resolve().parents[2] / "specs"


Timer = Callable[[list[Callable[[], object]]], list[float]]


def timer(kind: str) -> Timer:
    """Medians in ms of each of the given calls: "kernel" (interleaved, kernel time only) or
    "do_bench" (each alone, triton.testing.do_bench)."""
    if kind == "kernel":
        from kgen.tune import cuda_timer, l2_flush

        return cuda_timer(100, l2_flush())
    from triton.testing import do_bench

    return lambda fns: [do_bench(fn, warmup=25, rep=200, return_mode="median") for fn in fns]


def _copy_tbps(x: torch.Tensor, time: Timer) -> float:
    """The device's copy ceiling at x's size: bytes read and written by `copy_` over its time."""
    dst = torch.empty_like(x)
    return 2 * x.numel() * x.element_size() / time([lambda: dst.copy_(x)])[0] / 1e9


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float("nan") if not torch.isfinite(a).all() else ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _ops(kg: dict) -> dict[str, tuple]:
    """name -> (kgen function, torch function, input makers, gradient inputs, bytes factor fwd/bwd
    in units of one (M, N) tensor)."""
    def rms_t(x, w):
        return F.rms_norm(x, x.shape[-1:], w, 1e-6)

    def ln_t(x, w, b):
        return F.layer_norm(x, x.shape[-1:], w, b, 1e-5)

    def sm_t(x):
        return torch.softmax(x, dim=-1)

    def sw_t(a, b):
        return F.silu(a) * b

    def mat(M, N, dt, g):
        return torch.randn(M, N, generator=g, device="cuda", dtype=dt)

    def vec(M, N, dt, g):
        return 1 + 0.1 * torch.randn(N, generator=g, device="cuda", dtype=dt)

    return {
        "rmsnorm": (lambda x, w: kg["rmsnorm"](x, w)[0], rms_t, (mat, vec), (2, 3)),
        "layernorm": (lambda x, w, b: kg["layernorm"](x, w, b)[0], ln_t, (mat, vec, vec), (2, 3)),
        "softmax": (lambda x: kg["softmax"](x), sm_t, (mat,), (2, 3)),
        "swiglu": (lambda a, b: kg["swiglu"](a, b), sw_t, (mat, mat), (3, 5)),
    }


def run(shapes: list[tuple[int, int]], dtype: torch.dtype, names: list[str], time: Timer) -> list[dict]:
    import kgen

    # the backwards are timed again and again on one graph (retain_graph), which a compiled
    # backward refuses while it donates its saved buffers
    import torch._functorch.config

    torch._functorch.config.donated_buffer = False
    kg = {n: kgen.load(SPECS / f"{n}.yaml") for n in names}
    ops = _ops(kg)
    rows = []
    for name in names:
        kg_fn, torch_fn, makers, (f_fwd, f_bwd) = ops[name]
        compiled = torch.compile(torch_fn)
        for M, N in shapes:
            g = torch.Generator(device="cuda").manual_seed(M * 31 + N)
            inputs = [mk(M, N, dtype, g) for mk in makers]
            unit = M * N * inputs[0].element_size()
            copy_tbps = _copy_tbps(inputs[0], time)
            row = {"op": name, "M": M, "N": N, "dtype": str(dtype).split(".")[-1]}
            # correctness, forward and backward, against float64 (and eager in the input dtype)
            dy = torch.randn(M, N, generator=g, device="cuda", dtype=dtype)
            errs = {}
            results = {}
            for who, fn in (("kgen", kg_fn), ("compile", compiled), ("eager", torch_fn), ("exact", torch_fn)):
                xs = [t.detach().double() if who == "exact" else t.detach() for t in inputs]
                xs = [t.requires_grad_() for t in xs]
                out = fn(*xs)
                grads = torch.autograd.grad(out, xs, dy.double() if who == "exact" else dy, retain_graph=True)
                results[who] = (out, grads, xs)
            ex = results["exact"]
            ok = True
            for who in ("kgen", "compile", "eager"):
                out, grads, _ = results[who]
                errs[who] = [_rel(out, ex[0])] + [_rel(a, b) for a, b in zip(grads, ex[1])]
            for k, e in zip(errs["kgen"], errs["eager"]):
                ok &= k <= 2 * e + 1e-5
            row.update(ok=ok, errors=errs)
            # forward, no gradients
            plain = [t.detach() for t in inputs]
            whos = ("kgen", "compile", "eager")
            fwd = time([lambda fn=fn: fn(*plain) for fn in (kg_fn, compiled, torch_fn)])
            bwd = time([lambda out=results[w][0], xs=results[w][2]: torch.autograd.grad(out, xs, dy, retain_graph=True)
                        for w in whos])
            for who, f, b in zip(whos, fwd, bwd):
                row[f"{who}_fwd_ms"], row[f"{who}_bwd_ms"] = f, b
            row["kgen_fwd_tbps"] = f_fwd * unit / row["kgen_fwd_ms"] / 1e9
            row["kgen_bwd_tbps"] = f_bwd * unit / row["kgen_bwd_ms"] / 1e9
            row["copy_tbps"] = copy_tbps
            row["kgen_fwd_of_copy"] = row["kgen_fwd_tbps"] / copy_tbps
            row["kgen_bwd_of_copy"] = row["kgen_bwd_tbps"] / copy_tbps
            row["compile_over_kgen_fwd"] = row["compile_fwd_ms"] / row["kgen_fwd_ms"]
            row["compile_over_kgen_bwd"] = row["compile_bwd_ms"] / row["kgen_bwd_ms"]
            rows.append(row)
            print(f"{name:9s} {M}x{N} ok={ok} fwd kgen {row['kgen_fwd_ms'] * 1e3:.0f} us "
                  f"({row['kgen_fwd_tbps']:.2f} TB/s, {row['kgen_fwd_of_copy']:.0%} of copy) compile "
                  f"{row['compile_fwd_ms'] * 1e3:.0f} eager {row['eager_fwd_ms'] * 1e3:.0f} -> compile/kgen "
                  f"{row['compile_over_kgen_fwd']:.2f} | bwd kgen {row['kgen_bwd_ms'] * 1e3:.0f} us "
                  f"({row['kgen_bwd_tbps']:.2f} TB/s, {row['kgen_bwd_of_copy']:.0%} of copy) compile "
                  f"{row['compile_bwd_ms'] * 1e3:.0f} eager {row['eager_bwd_ms'] * 1e3:.0f} -> compile/kgen "
                  f"{row['compile_over_kgen_bwd']:.2f} | rel err kgen "
                  + " ".join(f"{e:.1e}" for e in errs["kgen"]) + f" | copy {copy_tbps:.2f} TB/s", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--shapes", default="16384x4096,8192x14336")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--ops", default="rmsnorm,layernorm,softmax,swiglu")
    ap.add_argument("--timer", default="kernel", choices=["kernel", "do_bench"])
    args = ap.parse_args()
    os.environ.setdefault("KGEN_CACHE_DIR", tempfile.mkdtemp(prefix="kgen-bench-cache-"))
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    rows = run(shapes, dtype, args.ops.split(","), timer(args.timer))
    if args.json:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "timer": args.timer,
                                         "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
