"""kgen tune (kgen/tune.py, kgen/runtime/tuning.py) without a GPU: each candidate timed through the
op on the CPU interpreter with a stand-in timer, the fastest kept in the tuning database under
the cache directory for its size bucket, the runtime's lookup of it (and of nothing else), the
build order it sets, `kgen tune --show`, and the command's errors."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kgen.build import build_variant, tunable_candidates
from kgen.cli import run
from kgen.errors import UsageError
from kgen.hw.descriptor import load_target
from kgen.runtime import tuning
from kgen.runtime.op import load
from kgen.spec.load import load_spec
from kgen.tune import show_rows, store, tune_variant

ROOT = Path(__file__).resolve().parents[1]
SPEC = """kgen: 1
name: scaled_rows
summary: y = x * 2 over blocks of a row.
variants:
  dtype: [fp32]
sizes: [M, N]
tensors:
  x: {shape: [M, N], dtype: $dtype}
  y: {shape: [M, N], dtype: $dtype, role: output}
tunables: {BLOCK: [64, 128, 256], WARPS: [4, 2]}
kernels:
  - name: scale
    grid: M, cdiv(N, BLOCK)
    warps: WARPS
    program: |
      cols = block(program_id(1), BLOCK)
      store(y[program_id(0), cols], load(x[program_id(0), cols]) * 2.0)
reference: |
  y = x * 2
"""


@pytest.fixture
def spec(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "scaled_rows.yaml"
    path.write_text(SPEC)
    return path


def test_bucket_rounds_each_size_up_to_a_power_of_two():
    assert tuning.size_bucket({"N": 1000, "M": 1, "K": 1024}) == {"K": 1024, "M": 1, "N": 1024}


def test_the_fastest_candidate_is_kept_and_then_preferred(spec):
    ls, target = load_spec(spec), load_target("sm_90")
    op = load(spec)
    variant = {"dtype": "fp32"}
    want = {"BLOCK": 128, "WARPS": 2}
    ran = []

    def timer(fns):  # a stand-in for CUDA events: the candidate the op ran decides the time
        times = []
        for fn in fns:
            fn()
            ran.append(dict(op.last_tunables))
            times.append(1.0 if op.last_tunables == want else 3.0)
        return times

    tuned = tune_variant(op, variant, target, {"M": 3, "N": 1000}, "cpu", timer)
    assert ran == tunable_candidates(ls, variant)  # every candidate, each run as itself
    assert tuned.winner == (want, 1.0) and tuned.default == ({"BLOCK": 64, "WARPS": 4}, 3.0)
    assert tuned.sizes == {"M": 3, "N": 1000}
    entry = store(ls, target, tuned)
    assert entry["bucket"] == {"M": 4, "N": 1024} and entry["tunables"] == want
    # the same bucket finds it, another bucket, target or spec text does not
    assert tuning.preferred(ls, variant, target, {"M": 4, "N": 900}) == want
    assert tuning.preferred(ls, variant, target, {"M": 4, "N": 2000}) is None
    assert tuning.preferred(ls, variant, load_target("sm_80"), {"M": 4, "N": 900}) is None
    spec.write_text(SPEC.replace("y = x * 2 over", "y = x * 2, over"))
    assert tuning.preferred(load_spec(spec), variant, target, {"M": 4, "N": 900}) is None
    (row,) = [r for r in show_rows() if r["source"] == "local"]  # beside the shipped H200 entries
    assert row["speedup"] == 3.0 and row["spec"] == "scaled_rows" and not row["regressed"]


def test_the_scalars_given_are_those_the_timed_calls_take(tmp_path, monkeypatch):
    """--scalar: a tune of prefix-LM attention times calls with the prefix asked for (a window,
    a prefix or a cap changes which blocks run), the others at their fixed stand-ins."""
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "cache"))
    op = load(ROOT / "specs/variants/prefix_lm.yaml")
    seen = []
    run_op = op.run

    def run(*args):
        seen.append(args)
        return run_op(*args)

    monkeypatch.setattr(op, "run", run)
    variant = {"dtype": "bf16", "head_dim": 32, "causal": False}
    sizes = {"B": 1, "SQ": 32, "SK": 32, "H": 1, "HKV": 1}
    tune_variant(op, variant, load_target("sm_90"), sizes, "cpu", lambda fns: [fn() and 1.0 for fn in fns], {"prefix": 24})
    ints = [[a for a in args if type(a) is int] for args in seen]
    assert ints and all(24 in i and 3 not in i for i in ints)


def test_a_backward_tuned_is_what_the_backward_of_the_op_then_builds(tmp_path, monkeypatch):
    """--backward tunes the op's backward (here the one specs/variants/softcap.yaml derives from
    fa2_bwd): the entry stored for its bucket is the one the backward op's builds then take."""
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "cache"))
    from kgen.cli import _tuned_spec

    bwd = load(ROOT / "specs/variants/softcap.yaml").backward_op
    ls, target = _tuned_spec(ROOT / "specs/variants/softcap.yaml", True), load_target("sm_90")
    assert ls.spec.name == bwd.ls.spec.name == "fa2_softcap_bwd" and ls.yaml.text == bwd.ls.yaml.text
    variant = {"dtype": "bf16", "head_dim": 64, "causal": True, "deterministic": False}
    want = tunable_candidates(ls, variant)[-1]
    sizes = {"B": 1, "SQ": 64, "SK": 64, "H": 2, "HKV": 2}
    def timer(fns):
        times = []
        for fn in fns:
            fn()
            times.append(1.0 if bwd.last_tunables == want else 2.0)
        return times

    tuned = tune_variant(bwd, variant, target, sizes, "cpu", timer)
    assert tuned.winner == (want, 1.0)
    store(ls, target, tuned)
    assert tuning.preferred(bwd.ls, variant, target, sizes) == want


def test_the_choice_is_built_first(spec):
    ls = load_spec(spec)
    built = build_variant(ls, {"dtype": "fp32"}, load_target("sm_90"), compile=False, first={"BLOCK": 256, "WARPS": 2})
    assert built.tunables == {"BLOCK": 256, "WARPS": 2}
    assert build_variant(ls, {"dtype": "fp32"}, load_target("sm_90"), compile=False).tunables == {"BLOCK": 64, "WARPS": 4}


def test_the_op_still_computes_with_a_forced_candidate(spec):
    op = load(spec)
    op.force_tunables({"BLOCK": 256, "WARPS": 2})
    x = torch.randn(3, 1000)
    torch.testing.assert_close(op(x), x * 2)
    assert op.last_tunables == {"BLOCK": 256, "WARPS": 2}


@pytest.mark.parametrize("argv, message", [
    (["tune"], "kgen tune needs a spec file: kgen tune SPEC --size NAME=VALUE ... (or --show)"),
    (["tune", "{spec}", "-s", "M=4"], "kgen tune needs every size of scaled_rows; missing N; its sizes: M, N"),
    (["tune", "{spec}", "-s", "M=4", "-s", "Q=2"], "--size Q is not a size of scaled_rows; its sizes: M, N"),
    (["tune", "{spec}", "--backward", "-s", "M=4", "-s", "N=8"],
     "--backward: scaled_rows has no backward (no autograd in {spec}); tune the spec itself, or its backward's own file"),
    (["tune", "{root}/specs/variants/document.yaml", "--backward", "-s", "B=1"],
     "kgen tune needs every size of fa2_document_bwd; missing SQ, SK, H, HKV, N1; its sizes: B, SQ, SK, H, HKV, N1"),
    (["tune", "{root}/specs/variants/prefix_lm.yaml", *"-s B=1 -s SQ=64 -s SK=64 -s H=2 -s HKV=2 -S prefx=8".split()],
     "--scalar prefx is not a run-time scalar of fa2_prefix_lm; its scalars: softmax_scale, prefix"),
    (["tune", "{root}/specs/variants/prefix_lm.yaml", *"--backward -s B=1 -s SQ=64 -s SK=64 -s H=2 -s HKV=2 -S prefix=2.5".split()],
     "--scalar prefix=2.5: prefix is an int32 scalar of fa2_prefix_lm_bwd; give a whole number from -2147483648 to 2147483647"),
    (["tune", "{root}/specs/variants/prefix_lm.yaml", *"-s B=1 -s SQ=64 -s SK=64 -s H=2 -s HKV=2 -S prefix=4e9".split()],
     "--scalar prefix=4e+09: prefix is an int32 scalar of fa2_prefix_lm; give a whole number from -2147483648 to 2147483647"),
    (["tune", "{spec}", "-s", "M=4", "-s", "N=8", "--where", "WARPS > 9", "--where", "WARP == 2"],
     "--where 'WARP == 2' could not be evaluated ('WARP == 2' uses 'WARP', which is not a size, variant axis or tunable); "
     "it may name scaled_rows's tunables and variant axes: BLOCK, WARPS, dtype"),
    (["tune", "{spec}", "-s", "M=4", "-s", "N=8", "--where", "WARPS > 2", "--where", "BLOCK == 32"],
     "no tunable candidate of scaled_rows (dtype-fp32) meets --where WARPS > 2 and BLOCK == 32; "
     "its tunables: {{'BLOCK': [64, 128, 256], 'WARPS': [4, 2]}}"),
])
def test_usage_errors_are_one_sentence(spec, argv, message):
    with pytest.raises(UsageError) as e:
        run([a.format(spec=spec, root=ROOT) for a in argv])
    assert str(e.value) == message.format(spec=spec)


def test_where_chooses_candidates_that_prebuild_builds_as_the_tune_finds_them(spec):
    """--where keeps the candidates its expressions hold for, in order; prebuild builds them in
    worker processes under the keys the tune's own calls look up (no build after it)."""
    from kgen.runtime.cache import Cache
    from kgen.runtime.compiled import _entry
    from kgen.tune import chosen_candidates, prebuild

    ls, target, variant = load_spec(spec), load_target("sm_90"), {"dtype": "fp32"}
    cands = chosen_candidates(ls, variant, ["WARPS == 2", "BLOCK < 256"])
    assert cands == [{"BLOCK": 64, "WARPS": 2}, {"BLOCK": 128, "WARPS": 2}]
    done = []
    prebuild(spec, False, variant, target, cands, 2, on_done=lambda i, _: done.append(i))
    assert sorted(done) == [0, 1]
    def entries():
        return sorted(p.name for p in Cache().root.glob("entries/??/*"))

    built = entries()  # the variants' entries and their kernels' code objects
    found = {_entry(ls, variant, target, c).name for c in cands}
    assert len(found) == 2 and found <= set(built)
    assert entries() == built


def test_without_a_gpu_tune_says_so(spec):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(UsageError, match="kgen tune times kernels on this machine's GPU, and none was found"):
        run(["tune", str(spec), "-s", "M=4", "-s", "N=100"])


def test_show_lists_the_database(spec, capsys):
    assert run(["tune", "--show"]) == 0
    assert "tuning database" in capsys.readouterr().out


BUCKETED = """kgen: 1
name: bucketed_rows
summary: y = x * 2, a whole row a program.
variants:
  ROW: [64, 256]
buckets: {ROW: N}
sizes: [M, N]
tensors:
  x: {shape: [M, N], dtype: fp32}
  y: {shape: [M, N], dtype: fp32, role: output}
tunables: {WARPS: [4, 2]}
kernels:
  - name: scale
    grid: M
    warps: WARPS
    program: |
      cols = block(0, ROW)
      store(y[program_id(0), cols], load(x[program_id(0), cols]) * 2.0)
reference: |
  y = x * 2
"""


@pytest.mark.parametrize("sizes, message", [
    (["-s", "M=4", "-s", "N=300"], "--size N=300 is above the largest bucket of ROW; accepted: N <= 256"),
    (["-s", "M=4", "-s", "N=100", "-v", "ROW=64"],
     "no selected variant of bucketed_rows is in the buckets of these sizes (ROW=256)"),
])
def test_tune_runs_only_the_buckets_of_its_sizes(tmp_path, monkeypatch, sizes, message):
    """A bucketed axis follows its size at a call, so a tune of other buckets' variants would time
    kernels no call of these sizes runs (and record them under the wrong variant)."""
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "bucketed_rows.yaml"
    path.write_text(BUCKETED)
    with pytest.raises(UsageError) as e:
        run(["tune", str(path), *sizes])
    assert str(e.value) == message


def _stand_in_device(monkeypatch) -> list[str]:
    """torch.cuda's events, synchronize and _sleep replaced by entries in the returned log; an
    event's time is the number of entries between its two records."""
    import kgen.tune as tune_mod

    log: list[str] = []

    class Event:
        def __init__(self, enable_timing):
            self.at = None

        def record(self):
            log.append("record")
            self.at = len(log)

        def elapsed_time(self, end):
            return float(end.at - self.at)

    monkeypatch.setattr(tune_mod.torch.cuda, "Event", Event)
    monkeypatch.setattr(tune_mod.torch.cuda, "synchronize", lambda: log.append("sync"))
    monkeypatch.setattr(tune_mod.torch.cuda, "_sleep", lambda cycles: log.append("sleep"), raising=False)
    return log


def test_the_timer_does_not_wait_between_calls(monkeypatch):
    """cuda_timer issues the timed calls back to back and synchronises once, so that a call's time
    is its kernels' and not the host's path to them (a stand-in for torch.cuda's events)."""
    from kgen.tune import cuda_timer

    log = _stand_in_device(monkeypatch)
    (ms,) = cuda_timer(5)([lambda: log.append("call")])
    # warm-up, one call timed on the host, then the device waits while the timed calls are queued
    assert log[:7] == ["call"] * 3 + ["sync", "call", "sync", "sleep"]
    timed = log[7:]
    assert timed.count("sync") == 1 and timed[-1] == "sync" and "sleep" not in timed
    assert log.count("call") == 3 + 1 + 5
    assert ms == 2.0  # record, call, record


def test_the_timer_interleaves_the_candidates(monkeypatch):
    """Candidates are timed in rounds, each round calling every one once, in turn and then in
    reverse (so none is always first after the wait): each sees the same clocks and power state.
    Each call's time is its own (here one more entry for the second candidate's extra call)."""
    from kgen.tune import cuda_timer

    log = _stand_in_device(monkeypatch)
    fns = [lambda: log.append("a"), lambda: (log.append("b"), log.append("b"))]
    ms = cuda_timer(4)(fns)
    timed = [e for e in log[log.index("sleep") + 1:] if e != "record"]
    assert timed == ["a", "b", "b", "b", "b", "a"] * 2 + ["sync"]
    assert ms == [2.0, 3.0]


def test_the_timer_flushes_the_l2_before_each_timed_call(monkeypatch):
    """With a flush (kgen.tune.l2_flush), each timed call follows one, outside its events: the
    time is the call's alone, after its inputs left the L2 (as triton.testing.do_bench)."""
    from kgen.tune import cuda_timer

    log = _stand_in_device(monkeypatch)
    (ms,) = cuda_timer(4, flush=lambda: log.append("flush"))([lambda: log.append("call")])
    timed = log[log.index("sleep") + 1:-1]
    assert timed == ["flush", "record", "call", "record"] * 4 and log[-1] == "sync"
    assert ms == 2.0


def test_the_flush_buffer_exceeds_the_l2(monkeypatch):
    import kgen.tune as tune_mod

    made = {}

    class Props:
        L2_cache_size = 200 * 2**20

    real_empty = tune_mod.torch.empty

    def empty(n, dtype, device):
        made["n"] = n
        return real_empty(1, dtype=dtype)

    monkeypatch.setattr(tune_mod.torch.cuda, "get_device_properties", lambda device: Props)
    monkeypatch.setattr(tune_mod.torch, "empty", empty)
    tune_mod.l2_flush()
    assert made["n"] == 400 * 2**20  # twice a large L2; at least triton's 256 MB otherwise
    Props.L2_cache_size = 50 * 2**20
    tune_mod.l2_flush()
    assert made["n"] == tune_mod.FLUSH_BYTES
