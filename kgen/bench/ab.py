"""A/B of two builds of kgen's kernels in one process: the attention and SSD benchmarks' kgen
calls, timed with this checkout's code objects (B) and with another checkout's (A), interleaved.

    # in the other checkout (A), its own cache, after its `kgen warm`:
    python -m kgen.bench.ab --dump entries.json
    # here (B):
    python -m kgen.bench.ab --before entries.json [--json out.json]

`--dump` runs each benchmark shape once (building what is missing) and writes which cache
entry served each (spec, variant): the code objects and the launch records of that build. The
A/B run loads them in place of this checkout's for the A side (kgen.runtime.compiled's
compiled_variant is swapped), so both sides run the same Python, inputs and timer; only the
code objects differ. A build whose kernels take every argument of the spec (before
ir/passes/arguments.py) is launched that way. Times: median CUDA-event time of many runs
(triton.testing.do_bench), each side measured twice in A B A B order (`--rounds N`: N times;
`--only MATCH`: the cases whose label contains MATCH, with --dump too). `--kernels MATCH` gives,
for a host-bound case, the host's time per call and the kernels' own time (torch.profiler) of
each side instead.
"""
from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

import torch

ATTENTION = [(d, causal, s) for d in (64, 128) for causal in (False, True) for s in (2048, 8192)]
# (label, heads, groups, seqlen, headdim): headdim 128 takes the dx kernel near the register limit
# the profiler's names of kgen's kernels in these cases (the spec names prefix them)
KGEN_KERNELS = ("fa2_", "ssd_")
SSD = ([("g1", 64, 1, s, 64) for s in (2048, 8192)] + [("g8", 128, 8, s, 64) for s in (2048, 8192)]
       + [("g8 p128", 64, 8, 8192, 128)])


def _bench(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def cases():
    """(label, forward thunk, backward thunk) for every shape: inputs made once per shape."""
    from kgen.bench.ssd import _inputs
    from kgen.ops import flash_attn_func, mamba_chunk_scan_combined

    torch.manual_seed(0)
    for d, causal, s in ATTENTION:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        dout = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        fwd = lambda q=q, k=k, v=v, c=causal: flash_attn_func(q, k, v, causal=c)  # noqa: E731
        yield f"attention D={d} S={s} causal={causal}", fwd, (lambda fwd=fwd, q=q, k=k, v=v, g=dout:
                                                              torch.autograd.grad(fwd(), (q, k, v), g))
    for label, h, g, s, p in SSD:
        b, n, chunk = 16384 // s, 128, 256
        ins = _inputs(b, s, h, p, g, n)
        dy = torch.randn(b, s, h, p, device="cuda", dtype=torch.bfloat16)
        fwd = lambda ins=ins, c=chunk: mamba_chunk_scan_combined(*ins[:5], c, D=ins[5], dt_bias=ins[6], dt_softplus=True)  # noqa: E731
        yield f"ssd {label} S={s}", fwd, (lambda fwd=fwd, ins=ins, g=dy: torch.autograd.grad(fwd(), ins, g))


def dump(path: Path, only: str | None = None) -> None:
    """Run every case (those whose label contains `only`) once with this checkout's kgen; record
    the entry of each variant used."""
    from kgen.runtime import compiled
    from kgen.spec.load import variant_id

    used: dict[str, str] = {}
    real = compiled._entry

    def entry(ls, variant, target, first=None):
        e = real(ls, variant, target, first)
        used[f"{ls.spec.name}/{variant_id(variant)}"] = str(e)
        return e
    compiled._entry = entry
    for label, fwd, bwd in cases():
        if only and only not in label:
            continue
        bwd()
        torch.cuda.synchronize()
        print(label, "ok", flush=True)
    path.write_text(json.dumps(used, indent=1))


def sides(before: Path):
    """`use("A")` / `use("B")`: which build's code objects the kgen ops launch from now on."""
    from kgen.runtime import compiled
    from kgen.runtime.op import KgenOp
    from kgen.spec.load import variant_id

    entries = json.loads(before.read_text())
    real = compiled.compiled_variant
    side = {"now": "B"}
    old: dict[str, tuple] = {}

    def swapped(ls, variant, target, first=None):
        # B: this checkout's build, with the tuning database's choice (`first`) as the op asks;
        # A: the dumped entry, whatever was first when it was built
        if side["now"] == "B":
            return real(ls, variant, target, first)
        key = f"{ls.spec.name}/{variant_id(variant)}"
        if key not in old:
            spec = ls.spec
            every = {"tensors": list(spec.tensors), "sizes": list(spec.sizes), "scalars": list(spec.scalars)}
            old[key] = compiled.load_entry(Path(entries[key]), target.backend, every)
        return old[key]
    compiled.compiled_variant = swapped

    def use(s: str) -> None:  # the ops' launch plans hold their kernels: drop them on a switch
        side["now"] = s
        for o in gc.get_objects():
            if issubclass(type(o), KgenOp):  # type(), not isinstance: a dead weak proxy raises on the latter
                o._plans.clear()
    return use


def _kernel_ms(fn, calls: int = 20) -> float:
    """kgen's kernels' own CUDA time per call of fn (torch.profiler), launch gaps left out."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in prof.key_averages() if e.key.startswith(KGEN_KERNELS)) / calls / 1e3


def kernels(before: Path, match: str) -> None:
    """For the cases whose label contains `match`: the host's time per forward call and the
    kernels' time per forward and per forward + backward, each side twice. Where the host takes
    longer per call than the kernels, the case is host-bound and its CUDA-event times are the
    host's; the kernel times are then the A/B."""
    import time

    use = sides(before)
    for label, fwd, bwd in cases():
        if match not in label:
            continue
        for s in ("A", "B", "A", "B"):
            use(s)
            for _ in range(10):
                bwd()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(100):
                fwd()
            host = (time.perf_counter() - t0) * 10  # ms per call
            torch.cuda.synchronize()
            print(f"{label} {s}: host {host:.3f} ms per forward call; kernels {_kernel_ms(fwd):.3f} ms forward, "
                  f"{_kernel_ms(bwd):.3f} ms forward + backward", flush=True)
    use("B")


def ab(before: Path, out: Path | None, only: str | None = None, rounds: int = 2) -> None:
    """Each case (those whose label contains `only`) timed `rounds` times per side, A B A B ..."""
    use = sides(before)
    rows = []
    for label, fwd, bwd in cases():
        if only and only not in label:
            continue
        times = {("A", "fwd"): [], ("A", "bwd"): [], ("B", "fwd"): [], ("B", "bwd"): []}
        for s in ("A", "B") * rounds:
            use(s)
            bwd()  # plans made and checked before timing
            times[(s, "fwd")].append(_bench(fwd))
            times[(s, "bwd")].append(_bench(bwd))
        row = {"case": label, **{f"{s}_{w}_ms": v for (s, w), v in times.items()}}
        row["B_over_A_fwd"] = min(times[("B", "fwd")]) / min(times[("A", "fwd")])
        row["B_over_A_fwd_bwd"] = min(times[("B", "bwd")]) / min(times[("A", "bwd")])
        rows.append(row)
        print(f"{label}: fwd A {times[('A', 'fwd')]} B {times[('B', 'fwd')]} -> B/A {row['B_over_A_fwd']:.3f}; "
              f"fwd+bwd A {times[('A', 'bwd')]} B {times[('B', 'bwd')]} -> B/A {row['B_over_A_fwd_bwd']:.3f}", flush=True)
    use("B")
    if out:
        out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dump", type=Path, help="write the cache entries this checkout's build uses")
    ap.add_argument("--before", type=Path, help="the entries another checkout dumped: the A side")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--only", metavar="MATCH", help="only the cases whose label contains MATCH")
    ap.add_argument("--rounds", type=int, default=2, help="with --before: timings per side, alternating (default 2)")
    ap.add_argument("--kernels", metavar="MATCH", help="with --before: host and kernel times of the cases "
                    "whose label contains MATCH (for host-bound cases, e.g. 'ssd g1')")
    a = ap.parse_args()
    if a.dump:
        dump(a.dump, a.only)
    elif a.before and a.kernels:
        kernels(a.before, a.kernels)
    elif a.before:
        ab(a.before, a.json, a.only, a.rounds)
    else:
        ap.error("give --dump FILE or --before FILE")


if __name__ == "__main__":
    main()
