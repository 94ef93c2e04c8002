"""Several ranks starting at once on one machine with a cold cache (as torchrun starts them): every
process loads and runs the same op at the same moment (a barrier), each library is compiled
once among them (the compiler is a wrapper that logs each compile), none fails or reads half an
entry, and all compute the same result. On the CPU: the libraries that run the gfx942 kernels in
the emulation, built through the same cache as code objects."""
from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
RANKS = 3


def _rank(i: int, barrier, out: str) -> None:
    barrier.wait()  # all at once, on an empty cache
    import kgen

    op = kgen.load(ROOT / "specs" / "causal_conv1d.yaml", target="gfx942", emulate=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 40, 70, generator=g).to(torch.bfloat16)
    w, b = torch.randn(70, 4, generator=g), torch.randn(70, generator=g)
    y = op(x, w, b, torch.zeros(1, 40, dtype=torch.int32), 4, True, False)
    torch.save(y, Path(out) / f"{i}.pt")


def test_ranks_on_a_cold_cache_compile_each_library_once(tmp_path, monkeypatch):
    from kgen.backends import available
    from kgen.toolchain.hip import find_hip_clang

    if not available("hip"):
        pytest.skip("no hip compiler found")
    log = tmp_path / "compiles.log"
    wrapper = tmp_path / "clang-logging"
    wrapper.write_text(f'#!/bin/sh\ncase " $* " in *" -o "*) echo "$*" >> {log};; esac\nexec {find_hip_clang()} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KGEN_HIP_CLANG", str(wrapper))
    ctx = multiprocessing.get_context("spawn")  # as torchrun's processes: nothing shared but the files
    barrier = ctx.Barrier(RANKS)
    procs = [ctx.Process(target=_rank, args=(i, barrier, str(tmp_path))) for i in range(RANKS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    assert [p.exitcode for p in procs] == [0] * RANKS
    ys = [torch.load(tmp_path / f"{i}.pt") for i in range(RANKS)]
    assert all(torch.equal(ys[0], y) for y in ys[1:])
    # one line per compile (the emulation's runtime and the kernel's library), each named by its
    # output: a library built by two ranks would show twice
    compiles = log.read_text().splitlines()
    assert len(compiles) >= 2 and len(set(compiles)) == len(compiles), compiles
