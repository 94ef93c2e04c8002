"""`kgen warm` as a process: Ctrl-C stops it at once, a killed parent leaves no orphan workers.

The compiler is a stand-in (KGEN_HIP_CLANG) that answers --version and otherwise records its pid
and sleeps, so every worker is busy in a "compile" when the signal comes, on any machine.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def slow_compiler(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    return _stand_in(tmp_path, f"echo $$ > {pids}/$$\nsleep 120\n"), pids


def _stand_in(tmp_path, body: str) -> Path:
    clang = tmp_path / "stand-in-clang"
    clang.write_text("#!/bin/sh\n" 'if [ "$1" = "--version" ]; then echo "clang version 19.1.7 (stand-in)"; exit 0; fi\n' + body)
    clang.chmod(0o755)
    return clang


def _start_warm(tmp_path, clang: Path) -> subprocess.Popen:
    # PYTHONFAULTHANDLER: a SIGABRT makes it print every thread's stack (_hung, when it hangs)
    env = {**os.environ, "KGEN_HIP_CLANG": str(clang), "KGEN_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO),
           "PYTHONFAULTHANDLER": "1"}
    # a session of its own, as a shell puts a foreground job in its own process group, and SIGINT
    # at its default, as a foreground job has it: the suite may run as a background job of a
    # shell without job control, whose children inherit SIGINT ignored (POSIX, "Shell Command
    # Language", asynchronous lists), and Python then installs no KeyboardInterrupt handler
    return subprocess.Popen([sys.executable, "-m", "kgen", "warm", "specs/matmul.yaml", "specs/softmax.yaml", "-t", "gfx942", "-j", "2"],
                            cwd=REPO, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for(pids: Path, n: int, proc: subprocess.Popen, timeout: float = 120.0) -> list[int]:
    end = time.time() + timeout
    while time.time() < end:
        found = [int(p.name) for p in pids.iterdir()]
        if len(found) >= n:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"kgen warm ended ({proc.returncode}) before {n} compiles started: {proc.stderr.read()}")
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"fewer than {n} compiles started in {timeout} s")


def _hung(proc: subprocess.Popen) -> str:
    """What a kgen warm that did not stop is doing: its signal masks and threads' wait channels,
    then (SIGABRT through faulthandler) every Python thread's stack."""
    lines = []
    try:
        status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        lines += [s for s in status if s.split(":")[0] in ("State", "Threads", "SigBlk", "SigIgn", "SigCgt")]
        for task in sorted(Path(f"/proc/{proc.pid}/task").iterdir()):
            lines.append(f"task {task.name}: {(task / 'comm').read_text().strip()} wchan={(task / 'wchan').read_text()}")
    except OSError as e:
        lines.append(f"/proc unreadable: {e}")
    os.kill(proc.pid, signal.SIGABRT)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        err = "(no stacks: it did not die of SIGABRT either)"
    return "kgen warm did not stop within 10 s of SIGINT:\n" + "\n".join(lines) + "\n" + err


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone_within(pids: list[int], seconds: float) -> bool:
    end = time.time() + seconds
    while time.time() < end:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_ctrl_c_stops_warm_and_its_compilers(tmp_path, slow_compiler):
    clang, pids = slow_compiler
    proc = _start_warm(tmp_path, clang)
    compilers = _wait_for(pids, 2, proc)
    start = time.time()
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends the foreground job on Ctrl-C
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        raise AssertionError(_hung(proc)) from None
    assert time.time() - start < 2.0
    assert proc.returncode == 130
    assert err == "error: interrupted; the builds in progress were stopped and nothing half-built was kept\n"
    assert _gone_within(compilers, 2.0)
    assert not list((tmp_path / "cache" / "entries").rglob("manifest.json")) if (tmp_path / "cache" / "entries").exists() else True


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_killed_parent_leaves_no_orphans(tmp_path, slow_compiler):
    clang, pids = slow_compiler
    proc = _start_warm(tmp_path, clang)
    compilers = _wait_for(pids, 2, proc)
    proc.kill()
    proc.communicate(timeout=10)
    assert _gone_within(compilers, 3.0), "the workers' compilers outlived their killed parent"


def test_a_worker_killed_mid_build_is_one_line(tmp_path):
    """The stand-in compiler kills the worker that runs it, as the OOM killer would."""
    proc = _start_warm(tmp_path, _stand_in(tmp_path, "kill -KILL $PPID\nsleep 5\n"))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert err.startswith("error: a build worker died (killed by a signal, perhaps out of memory); ") and err.count("\n") == 1
    assert err.endswith("builds did not finish; try fewer parallel builds with --jobs\n")
