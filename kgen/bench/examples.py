"""Benchmark and check the example ops on a GPU against torch, in one process, on the same inputs.

    python -m kgen.bench.examples [--json out.json]

For each example (softmax, RMSNorm, matmul): cold build time of one variant (empty cache),
warm load time (from the cache, new process state), correctness of forward and backward
against a float64 reference with NaN-poisoned outputs, and the median time of kgen against
torch's own op. Timings are CUDA-event medians (triton.testing.do_bench when available).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch


def _bench(fn) -> float:
    try:
        from triton.testing import do_bench

        return do_bench(fn, warmup=25, rep=200, return_mode="median")
    except ImportError:
        fn(); torch.cuda.synchronize()
        ts = []
        for _ in range(50):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        return sorted(ts)[len(ts) // 2]


def rel_err(a, b) -> float:
    a, b = a.double(), b.double()
    if torch.isnan(a).any():
        return float("nan")
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--specs", type=Path, default=Path("specs"))
    args = ap.parse_args()
    os.environ.setdefault("KGEN_CACHE_DIR", tempfile.mkdtemp(prefix="kgen-bench-cache-"))
    os.environ["KGEN_POISON"] = "1"
    import kgen

    dev = "cuda"
    results = {"device": torch.cuda.get_device_name(), "rows": []}
    torch.manual_seed(0)

    def row(name, shape, kg_fn, torch_fn, ref_fn, inputs, grad_inputs):
        # correctness: forward and backward against float64, and torch in the input dtype
        out = kg_fn(*inputs)
        ref = ref_fn(*[x.double().detach().requires_grad_(x.requires_grad) for x in inputs])
        low = torch_fn(*inputs)
        dout = torch.randn_like(out)
        g_kg = torch.autograd.grad(out, grad_inputs, dout, retain_graph=True)
        ref_in = [x.double().detach().requires_grad_(True) for x in grad_inputs]
        pos = {id(g): i for i, g in enumerate(grad_inputs)}
        ref2 = ref_fn(*[ref_in[pos[id(x)]] if id(x) in pos else x.double() for x in inputs])
        g_ref = torch.autograd.grad(ref2, ref_in, dout.double())
        g_low = torch.autograd.grad(low, grad_inputs, dout, retain_graph=True)
        errs = {"out": (rel_err(out, ref), rel_err(low, ref))}
        for i, (a, b, c) in enumerate(zip(g_kg, g_ref, g_low)):
            errs[f"grad{i}"] = (rel_err(a, b), rel_err(c, b))
        ok = all(e <= 2 * t + 1e-5 for e, t in errs.values())
        t_kg = _bench(lambda: kg_fn(*inputs))
        t_torch = _bench(lambda: torch_fn(*inputs))
        tb_kg = _bench(lambda: torch.autograd.grad(out, grad_inputs, dout, retain_graph=True))
        tb_torch = _bench(lambda: torch.autograd.grad(low, grad_inputs, dout, retain_graph=True))
        r = {"op": name, "shape": shape, "ok": ok, "errors": errs, "fwd_ms": t_kg, "torch_fwd_ms": t_torch,
             "bwd_ms": tb_kg, "torch_bwd_ms": tb_torch}
        results["rows"].append(r)
        print(f"{name:8s} {str(shape):22s} ok={ok} fwd {t_kg:.4f} ms vs torch {t_torch:.4f} (x{t_torch / t_kg:.2f})  "
              f"bwd {tb_kg:.4f} vs {tb_torch:.4f} (x{tb_torch / tb_kg:.2f})  errs " +
              " ".join(f"{k}={a:.2e}/{b:.2e}" for k, (a, b) in errs.items()), flush=True)

    # the launcher (built once per machine, into the cache), then the cold build (empty cache)
    # and warm load of one variant
    from kgen.runtime import launcher

    t0 = time.perf_counter()
    launcher.get_launcher()
    launcher_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    softmax = kgen.load(args.specs / "softmax.yaml")
    x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    softmax(x); torch.cuda.synchronize()
    cold = time.perf_counter() - t0
    from kgen.runtime import compiled

    compiled._memo.clear(); compiled._load_entry.cache_clear()
    t0 = time.perf_counter()
    softmax(x); torch.cuda.synchronize()
    warm = time.perf_counter() - t0
    results.update(launcher_build_s=launcher_s, cold_build_s=cold, warm_load_s=warm)
    print(f"launcher (once per machine) {launcher_s:.2f} s; softmax bf16: cold build+load+run {cold:.2f} s; "
          f"warm load from cache+run {warm * 1e3:.1f} ms", flush=True)

    for M, N in ((4096, 4096), (16384, 1024), (1000, 3000)):
        x = torch.randn(M, N, device=dev, dtype=torch.bfloat16, requires_grad=True)
        row("softmax", (M, N), softmax, lambda t: torch.softmax(t, -1), lambda t: torch.softmax(t, -1), [x], [x])
    rms_path = args.specs / "rmsnorm.yaml"
    if rms_path.exists():
        rms = kgen.load(rms_path)
        for M, N in ((4096, 4096), (16384, 1024), (1000, 3000)):
            x = torch.randn(M, N, device=dev, dtype=torch.bfloat16, requires_grad=True)
            w = torch.randn(N, device=dev, dtype=torch.bfloat16, requires_grad=True)
            ref = lambda t, ww: torch.nn.functional.rms_norm(t, (t.shape[-1],), ww, 1e-6)  # noqa: E731
            row("rmsnorm", (M, N), lambda t, ww: rms(t, ww)[0], ref, ref, [x, w], [x, w])
    mm_path = args.specs / "matmul.yaml"
    if mm_path.exists():
        mm = kgen.load(mm_path)
        for M, N, K in ((4096, 4096, 4096), (1000, 3000, 520)):
            a = torch.randn(M, K, device=dev, dtype=torch.bfloat16, requires_grad=True)
            b = torch.randn(K, N, device=dev, dtype=torch.bfloat16, requires_grad=True)
            row("matmul", (M, N, K), mm, torch.matmul, torch.matmul, [a, b], [a, b])
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
