"""kgen.build against the checked-in generated/: it must be what `kgen build` makes today, and
every shipped kernel must fit the target without spills (as compiled here, or as generated/
records its compile by the same compiler).

Each (spec, target) is built once per session, as `kgen build` builds it (compiling when the
backend's compiler is installed: the compile takes part in choosing tunables), in a forked worker
so that two builds share the two cores; the staleness tests and the resource tests read that one
build. Variants share kernels, and a build compiles each distinct source once (kgen.codeobjects).
A source that generated/ records byte for byte, for the same compiler, is answered from its
manifest's record, except a sample per kernel name and flags that is compiled and compared with the record
(tests/recorded_compiles.py): a change to what kgen generates is compiled whole.
Under pytest-xdist every test of this file runs on one worker (`--dist loadfile` in
pyproject.toml), so each build is made once.
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import sys
import traceback
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kgen.build
import kgen.driver
import kgen.ir.core
import kgen.options
import kgen.backends
from kgen.build import BuiltVariant, build_spec, manifest
from kgen.hw.descriptor import Target, load_target
from kgen.ir.core import walk
from kgen.knobs import knobs
from kgen.paths import templates_dir
from kgen.spec.load import load_spec
from kgen.errors import SpecError
from kgen.backends import available
from kgen.toolchain.resources import parse_resource_remarks

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/, for recorded_compiles
from golden_diff import first_line_difference, manifest_problem  # noqa: E402
from recorded_compiles import RecordedCompiles  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
GENERATED = REPO / "generated"
TARGETS = ("sm_90", "gfx942")
# generated/ is made from the checkout's specs/ (the folder shipped_specs_dir() names in a
# checkout), by path relative to the repository root: that path is written into every file.
SPEC_FILES = sorted(p.name for p in (REPO / "specs").glob("*.yaml"))
AMD_LDS_BYTES = 65536  # what one gfx942 workgroup can address, whatever the descriptor says
# What a source asks for (a call in it or the bodies it includes) -> the PTX instruction that
# must survive into its PTX: fragment loads, async copies, warpgroup instructions.
PTX_ASKED = (("kg::ldmatrix_", "ldmatrix.sync.aligned.m8n8"), ("kg::cp_async<", "cp.async.cg.shared.global"),
             ("kg::wgmma_m64n", "wgmma.mma_async.sync.aligned.m64n"), ("kg::fence_proxy_async", "fence.proxy.async"),
             ("kg::tma_load_", "cp.async.bulk.tensor"), ("kg::mbar_wait", "mbarrier.try_wait.parity"),
             ("kg::mbar_expect_tx", "mbarrier.arrive.expect_tx"))
PTX_DOTS = ("mma.sync.aligned.m16n8k16", "wgmma.mma_async.sync.aligned.m64n")


def regenerate_command(spec_file: str, target: str) -> str:
    return (f"kgen build specs/{spec_file} --target {target}   (run from the repository root, "
            "with nvcc and clang-19 installed so commands and resources are recorded)")


@dataclass
class Build:
    """One `kgen build` in memory, made in a worker process (so everything here pickles)."""

    op: str
    target: Target
    variants: list[BuiltVariant]
    manifest: dict
    compiled: bool
    logs: dict[str, str] = field(default_factory=dict)  # source text -> compiler output
    # source text -> which of PTX_ASKED's instructions its kept PTX holds (CUDA without a SASS
    # disassembler: compile_cuda keeps the PTX; the whole text stays in the worker)
    ptx_holds: dict[str, frozenset[str]] = field(default_factory=dict)
    has_dot: dict[str, bool] = field(default_factory=dict)  # source file -> its IR has a dot
    replayed: set[str] = field(default_factory=set)  # files answered from generated/'s records
    checked: list[str] = field(default_factory=list)  # recorded files compiled and compared
    mismatches: list[str] = field(default_factory=list)  # where those differ from the record


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _build(spec_file: str, target_name: str) -> Build:
    """What `kgen build specs/<spec_file> --target <target_name>` computes, kept in memory, with
    the IR of each tunable choice (to know which kernels have a dot), the compiler output of
    each compile (the AMD spill counts are only there) and what its kept PTX holds. Sources that
    generated/ records are answered from the record, but a sample (tests/recorded_compiles.py)."""
    irs: dict[str, list] = {}
    logs: dict[str, str] = {}
    ptx_holds: dict[str, frozenset[str]] = {}
    real_lower = kgen.build.lower_variant

    def lower(ls, variant, *args, **kwargs):
        tunables, kernels = real_lower(ls, variant, *args, **kwargs)
        irs[json.dumps([variant, tunables], sort_keys=True)] = kernels
        return tunables, kernels

    def logged(compile_fn):
        def run(source, *args, **kwargs):
            result = compile_fn(source, *args, **kwargs)
            # keyed by text: a tunable choice that spilled compiled under the same file name
            text = Path(source).read_text()
            logs[text] = result.log
            if getattr(result, "ptx", None) is not None:
                ptx_holds[text] = frozenset(i for _, i in PTX_ASKED if i in result.ptx)
            return result
        return run

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)  # generated files name the spec relative to the working directory
        mp.setattr(kgen.build, "lower_variant", lower)
        ls = load_spec(Path("specs") / spec_file)
        target = load_target(target_name)
        compiled = available(target.backend)
        recorded = RecordedCompiles(GENERATED / ls.spec.name / target_name, target.backend) if compiled else None
        for name, be in list(kgen.backends.BACKENDS.items()):
            compile_fn = recorded.wrap(be.compile) if recorded is not None and name == target.backend else be.compile
            mp.setitem(kgen.backends.BACKENDS, name, dataclasses.replace(be, compile=logged(compile_fn)))
        variants = build_spec(ls, target, ls.select_variant({}), compile=compiled)
        doc = manifest(ls, target, variants)
    build = Build(ls.spec.name, target, variants, doc, compiled, logs, ptx_holds=ptx_holds)
    if recorded is not None:
        build.replayed, build.checked, build.mismatches = recorded.replayed, recorded.checked, recorded.mismatches
    for bv in variants:
        kernels = {k.name: k for k in irs[json.dumps([bv.variant, bv.tunables], sort_keys=True)]}
        for bk in bv.kernels:
            build.has_dot[bk.file] = any(op.kind == "dot" for op in walk(kernels[bk.name].body))
    return build


def _build_or_error(spec_file: str, target_name: str) -> Build | str:
    try:
        return _build(spec_file, target_name)
    except Exception:  # kgen's errors need not pickle: hand back their text
        return traceback.format_exc(limit=-3)


def _builds_wanted(session: pytest.Session) -> list[tuple[str, str]]:
    """The (spec_file, target) builds the selected tests of this module read, in run order."""
    wanted = []
    for item in session.items:
        params = getattr(item, "callspec", None) and item.callspec.params
        if item.path == Path(__file__) and params and "built" in getattr(item, "fixturenames", ()):
            key = (params["spec_file"], params["target"])
            if key not in wanted:
                wanted.append(key)
    return wanted


def _kernel_count(key: tuple[str, str]) -> int:
    """How many kernels a build renders: what its time grows with."""
    ls = load_spec(REPO / "specs" / key[0])
    return len(ls.variants()) * len(ls.spec.kernels)


@pytest.fixture(scope="module")
def built(request):
    """get(spec_file, target) -> Build, each built once. Builds run in forked workers, one per
    core: compiles are single-threaded and most of this module's time. Every build the selected
    tests need is submitted at once, the largest first (so the longest one does not start last
    and run alone), and a test waits only for its own."""
    wanted = _builds_wanted(request.session)
    pool = ProcessPoolExecutor(_cores(), mp_context=multiprocessing.get_context("fork"))
    futures: dict[tuple[str, str], Future] = {
        k: pool.submit(_build_or_error, *k) for k in sorted(wanted, key=_kernel_count, reverse=True)}

    def get(spec_file: str, target: str) -> Build:
        key = (spec_file, target)
        if key not in futures:
            futures[key] = pool.submit(_build_or_error, *key)
        result = futures[key].result()
        if isinstance(result, str):
            pytest.fail(f"kgen build specs/{spec_file} --target {target} fails:\n{result}")
        return result
    yield get
    pool.shutdown(cancel_futures=True)


def require_compiler(backend: str) -> None:
    """Skip without the backend's compiler, except in CI (CI=true), where that must fail."""
    if available(backend):
        return
    hint = {"cuda": "set KGEN_NVCC or install the CUDA toolkit",
            "hip": "install ROCm or clang-19 + lld-19, or set KGEN_HIP_CLANG"}[backend]
    if knobs().ci:
        pytest.fail(f"CI=true but no {backend} compiler was found ({hint})")
    pytest.skip(f"no {backend} compiler found ({hint})")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("spec_file", SPEC_FILES)
def test_generated_matches_build(built, spec_file, target):
    b = built(spec_file, target)
    folder = GENERATED / b.op / target
    where = folder.relative_to(GENERATED.parent)
    fix = f"regenerate with: {regenerate_command(spec_file, target)}"
    if not folder.is_dir():
        pytest.fail(f"{where} does not exist; {fix}")
    expected = {Path(h).name: (templates_dir() / h).read_bytes() for h in kgen.backends.backend(b.target.backend).headers}
    expected.update({k.file: k.source.encode() for bv in b.variants for k in bv.kernels if not k.empty})
    expected.update({name: body.encode() for bv in b.variants for k in bv.kernels if not k.empty for name, body in k.includes})
    problems = []
    for name, content in expected.items():
        path = folder / name
        if not path.is_file():
            problems.append(f"{where / name} is missing")
        elif path.read_bytes() != content:
            diff = first_line_difference(path.read_text(errors="replace"), content.decode())
            problems.append(f"{where / name} differs from the build ({diff})")
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        problems.append(f"{where / 'manifest.json'} is missing")
    elif (problem := manifest_problem(json.loads(manifest_path.read_text()), b)) is not None:
        problems.append(f"{where / 'manifest.json'} {problem}")
    produced = set(expected) | {"manifest.json"}
    on_disk = (str(p.relative_to(folder)) for p in folder.rglob("*"))  # hidden ones too
    extra = sorted(rel for rel in on_disk if rel not in produced)
    if extra:
        problems.append(f"{where} holds files the build does not produce: {', '.join(extra)}")
    assert not problems, "generated/ is stale:\n  " + "\n  ".join(problems) + f"\n{fix}"


def test_generated_holds_only_shipped_builds():
    """A folder of generated/ no spec or target produces (a removed spec, a leftover .old) fails."""
    ops = {load_spec(REPO / "specs" / f).spec.name for f in SPEC_FILES}
    extra = [str(p.relative_to(GENERATED.parent)) for p in sorted(GENERATED.iterdir())
             if p.name not in ops]
    for op in sorted(ops & {p.name for p in GENERATED.iterdir()}):
        extra += [str(p.relative_to(GENERATED.parent)) for p in sorted((GENERATED / op).iterdir())
                  if p.name not in TARGETS]
    assert not extra, ("generated/ holds what no shipped spec and target builds: "
                       f"{', '.join(extra)}; delete it (git rm -r), or rebuild with "
                       "`kgen build specs/<spec>.yaml --target <sm_90|gfx942>` from the repository "
                       "root")


def _kernels(b: Build):
    """Each kernel the build compiles (an empty one is not compiled: BuiltKernel.empty)."""
    for bv in b.variants:
        for k in bv.kernels:
            if k.empty:
                continue
            yield f"{k.file} ({k.name}, {bv.id})", k


@pytest.mark.parametrize("target", ["gfx942"])
@pytest.mark.parametrize("spec_file", SPEC_FILES)
def test_gfx942_kernels_fit(built, spec_file, target):
    require_compiler("hip")
    b = built(spec_file, target)
    limit = b.target.lds_bytes_per_block
    problems = []
    for label, k in _kernels(b):
        r = k.resources
        # a kernel answered from its record has no compiler output, only the recorded resources
        replayed = k.file in b.replayed
        remarks = {} if replayed else parse_resource_remarks(b.logs.get(k.source, "")).get(k.name, {})
        if r is None or not (remarks or replayed):
            problems.append(f"{label}: the compiler reported no resources for the kernel")
            continue
        if r["shared_bytes"] > min(AMD_LDS_BYTES, limit):
            problems.append(f"{label}: LDS {r['shared_bytes']} bytes > {min(AMD_LDS_BYTES, limit)}")
        if r["spill_bytes"] != 0:
            problems.append(f"{label}: private segment (scratch) {r['spill_bytes']} bytes, expected 0")
        # SGPR spills are not checked: the compiler parks scalar registers in lanes of a VGPR
        # (v_writelane/v_readlane), which costs instructions but no memory; kernels with many
        # tensors (attention's backward has eleven, each a 64-bit pointer and strides) do that.
        # A VGPR spill or any scratch goes to memory, and is what must be zero.
        for key in ("VGPRs Spill", "ScratchSize [bytes/lane]") if remarks else ():
            if remarks.get(key) != "0":
                problems.append(f"{label}: {key} is {remarks.get(key)}, expected 0")
        if b.has_dot[k.file] and not any(i.startswith("v_mfma") for i in r["matrix_instrs"]):
            problems.append(f"{label}: has a dot but no v_mfma_* in the ISA "
                            f"(found {r['matrix_instrs']}, disassembler {r['disasm_tool']})")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("target", ["gfx942"])
@pytest.mark.parametrize("spec_file", SPEC_FILES)
def test_gfx942_builds_need_no_compile(built, spec_file, target):
    """`kgen check --emulate` builds gfx942 variants without compiling them; that is the build
    that ships (generated/, test_generated_matches_build) as long as no kernel is rebuilt or
    tunable candidate given up for spilling, which only a compile can see."""
    require_compiler("hip")
    b = built(spec_file, target)
    for bv in b.variants:
        assert all(k.options == kgen.options.DEFAULT for k in bv.kernels), bv.id
        assert not any("spill" in r["why"] for r in bv.rejected), (bv.id, bv.rejected)


@pytest.mark.parametrize("target", ["sm_90"])
@pytest.mark.parametrize("spec_file", SPEC_FILES)
def test_sm90_kernels_fit(built, spec_file, target):
    require_compiler("cuda")
    b = built(spec_file, target)
    limit = b.target.lds_bytes_per_block
    problems = []
    for label, k in _kernels(b):
        r = k.resources
        if r is None:
            problems.append(f"{label}: ptxas reported no resources for the kernel")
            continue
        # smem is dynamic (extern __shared__, k.shared_bytes at launch) plus ptxas's static count
        if r["shared_bytes"] + k.shared_bytes > limit:
            problems.append(f"{label}: shared memory {r['shared_bytes']} static + {k.shared_bytes} "
                            f"dynamic bytes > {limit}")
        # a kernel whose spec asks for more programs a multiprocessor than its registers allow
        # trades spills for them (build.py: _without_spills keeps its least-spilling form)
        if (r["spill_bytes"] != 0 or r["stack_bytes"] != 0) and k.occupancy <= 1:
            problems.append(f"{label}: {r['spill_bytes']} bytes spilled, {r['stack_bytes']} bytes "
                            "stack, expected 0")
        if r.get("mma_notes"):  # ptxas serialised wgmma or injected waits into a dot
            problems.append(f"{label}: ptxas wgmma performance notes {r['mma_notes']}, expected none")
        if r["disasm_tool"] == "ptx":  # no cuobjdump / nvdisasm: the kept PTX shows the choices
            if k.file not in b.replayed:  # compiled here (a recorded kernel kept no PTX)
                holds = b.ptx_holds[k.source]
                text = "\n".join([k.source, *(body for _, body in k.includes)])  # the source and its body
                problems += [f"{label}: the source calls {asked}... but its PTX has no {instr}"
                             for asked, instr in PTX_ASKED if asked in text and instr not in holds]
            if b.has_dot[k.file] and not any(i.startswith(PTX_DOTS) for i in r["matrix_instrs"]):
                problems.append(f"{label}: has a dot but neither mma.sync.aligned.m16n8k16 nor "
                                f"wgmma.mma_async in its PTX ({r['matrix_instrs']})")
        elif b.has_dot[k.file] and not any(i.split(".")[0] in ("HMMA", "HGMMA") for i in r["matrix_instrs"]):
            problems.append(f"{label}: has a dot but no HMMA/HGMMA in the SASS ({r['matrix_instrs']})")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("spec_file", SPEC_FILES)
def test_recorded_compiles_are_the_compilers(built, spec_file, target):
    """The build answers sources generated/ records from the record; the sample it compiles
    anyway (tests/recorded_compiles.py) must get what the record says."""
    require_compiler(load_target(target).backend)
    b = built(spec_file, target)
    checked, replayed, mismatches = len(b.checked), len(b.replayed), b.mismatches
    assert checked or not replayed, "sources were answered from records none of which was checked"
    assert not mismatches, ("generated/'s records differ from what the compiler gives:\n  "
                            + "\n  ".join(mismatches) + f"\nregenerate with: {regenerate_command(spec_file, target)}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("spec_file", ["matmul.yaml", "matmul_bwd.yaml"])
def test_matmul_kernels_have_dots(built, spec_file, target):
    """The tensor-core checks above only bite on kernels with a dot: make sure these have one."""
    b = built(spec_file, target)
    assert b.has_dot and all(b.has_dot.values()), b.has_dot


def test_tunables_move_past_a_warp_count_the_dot_cannot_use(tmp_path):
    # 16 warps cannot split a 32x32 dot with any matrix instruction; the next candidate (4) can
    spec = tmp_path / "mm.yaml"
    spec.write_text("""\
kgen: 1
name: mm
summary: a small matmul
sizes: [M, N, K]
tensors:
  a: {shape: [M, K], dtype: bf16}
  b: {shape: [K, N], dtype: bf16}
  c: {shape: [M, N], dtype: fp32, role: output}
tunables: {WARPS: [16, 4]}
kernels:
  - name: main
    grid: cdiv(M, 32), cdiv(N, 32)
    warps: WARPS
    program: |
      acc = zeros((32, 32), fp32)
      for k in range(cdiv(K, 32)):
          acc = dot(load(a[block(program_id(0), 32), block(k, 32)]), load(b[block(k, 32), block(program_id(1), 32)]), acc)
      store(c[block(program_id(0), 32), block(program_id(1), 32)], acc)
reference: |
  c = a @ b
""")
    ls = load_spec(spec)
    tunables, kernels = kgen.build.lower_variant(ls, {}, load_target("sm_90"))
    assert tunables == {"WARPS": 4} and kernels[0].num_warps == 4


def test_a_block_the_target_cannot_launch_does_not_fit(tmp_path):
    """32 warps are 1024 threads on sm_90, 2048 on gfx942 (64-wide waves): there the next
    candidate is taken, and with none left the error names the limit."""
    spec = tmp_path / "rows.yaml"
    spec.write_text("""\
kgen: 1
name: rows
summary: y = x * 2, one row a program
sizes: [M, N]
tensors:
  x: {shape: [M, N], dtype: fp32}
  y: {shape: [M, N], dtype: fp32, role: output}
tunables: {WARPS: WARPS_LIST}
kernels:
  - name: main
    grid: M
    warps: WARPS
    program: |
      store(y[program_id(0), block(0, 4096)], load(x[program_id(0), block(0, 4096)]) * 2.0)
reference: |
  y = x * 2
""".replace("WARPS_LIST", "[32, 16]"))
    ls = load_spec(spec)
    assert kgen.build.lower_variant(ls, {}, load_target("sm_90"))[0] == {"WARPS": 32}
    assert kgen.build.lower_variant(ls, {}, load_target("gfx942"))[0] == {"WARPS": 16}
    spec.write_text(spec.read_text().replace("[32, 16]", "[32]"))
    with pytest.raises(SpecError, match="kernel rows_main has 32 warps of 64 threads, 2048 threads, more than gfx942's "
                                        "1024 per block; use fewer warps"):
        kgen.build.lower_variant(load_spec(spec), {}, load_target("gfx942"))


def test_a_spilling_swizzled_variant_is_retried_with_plain_layouts(monkeypatch):
    """The first tunable choice, swizzled, 'spills' (a stand-in compiler says so for any source
    with a swizzled descriptor, whatever the flags); the build tries the same code with the
    target's frugal register flags (not also without bulk reductions: the forward has no atomic
    adds), then keeps those tunables and drops the swizzle rather than moving on to smaller
    tiles."""
    import re

    swizzled = re.compile(r"wgmma_desc\([^;]*, 1\);")
    seen: list[tuple[bool, tuple[str, ...]]] = []

    def fake_compile(bk, target, extra_flags=(), objects=None):
        seen.append((bool(swizzled.search(bk.text)), tuple(extra_flags)))
        bk.resources = {"spill_bytes": 64 if seen[-1][0] else 0}

    monkeypatch.setattr(kgen.driver, "compile_built", fake_compile)
    ls = load_spec(REPO / "specs" / "fa2_fwd.yaml")
    variant = {"dtype": "bf16", "head_dim": 64, "causal": False}
    hopper = load_target("sm_90")
    out = kgen.build.build_variant(ls, variant, hopper, compile=True)
    assert out.tunables == kgen.build.tunable_candidates(ls, variant)[0]
    frugal = hopper.frugal_register_flags
    assert seen == [(True, ()), (True, frugal), (False, ())]
    assert not any(swizzled.search(bk.text) for bk in out.kernels)


def test_a_kernel_that_spills_with_bulk_reductions_is_retried_with_atomics_first(monkeypatch):
    """The D=64 atomic dkdv takes bulk reductions by the descriptor's byte model; told that it spills
    with them, the search builds it again with atomics (the same flags) before any other form."""
    seen: list[tuple[bool, tuple[str, ...]]] = []

    def fake_compile(bk, target, extra_flags=(), objects=None):
        seen.append(("bulk_wait_all" in bk.text, tuple(extra_flags)))
        bk.resources = {"spill_bytes": 64 if seen[-1][0] else 0}

    monkeypatch.setattr(kgen.driver, "compile_built", fake_compile)
    ls = load_spec(REPO / "specs" / "fa2_bwd.yaml")
    variant = {"dtype": "bf16", "head_dim": 64, "causal": False, "deterministic": False}
    out = kgen.build.build_variant(ls, variant, load_target("sm_90"), compile=True, first={"RECOMPUTE_DQ": 0})
    # delta, dkdv and dq as built (blocks is empty: the causal mask needs no table), then dkdv's retry
    assert seen == [(False, ()), (True, ()), (False, ()), (False, ())]
    assert [bk.empty for bk in out.kernels] == [False, True, False, False]
    # dkdv's retry took atomics
    assert [bk.options.bulk_reductions for bk in out.kernels if not bk.empty] == [True, False, True]


def test_a_specialized_kernel_that_spills_is_retried_without_its_producer_first(monkeypatch):
    """The forward at head_dim 128 has a producer warpgroup (its spec asks for one); told that it
    spills, the search builds it again without one before any other form."""
    seen: list[tuple[bool, tuple[str, ...]]] = []

    def fake_compile(bk, target, extra_flags=(), objects=None):
        seen.append(("setmaxnreg" in bk.text, tuple(extra_flags)))
        bk.resources = {"spill_bytes": 64 if seen[-1][0] else 0}

    monkeypatch.setattr(kgen.driver, "compile_built", fake_compile)
    ls = load_spec(REPO / "specs" / "fa2_fwd.yaml")
    variant = {"dtype": "bf16", "head_dim": 128, "causal": False}
    out = kgen.build.build_variant(ls, variant, load_target("sm_90"), compile=True)
    assert seen == [(True, ()), (False, ())]
    assert out.tunables == kgen.build.tunable_candidates(ls, variant)[0] and out.kernels[-1].threads == 256


def test_a_kernel_whose_warpgroups_share_its_dots_is_retried_last_with_constant_indices(monkeypatch):
    """A stand-in compiler says that any source reading the warpgroup index at run time
    spills; after every other form, the search issues each warpgroup's products in a branch
    with a constant index (CompileOptions.constant_groups), and that form is kept, with the same
    tunables. A kernel without such dots has no such retry (nothing to branch on)."""
    seen: list[tuple[bool, tuple[str, ...]]] = []

    def fake_compile(bk, target, extra_flags=(), objects=None):
        seen.append(("const int wg_ = (warp / 4);" in bk.text, tuple(extra_flags)))
        bk.resources = {"spill_bytes": 64 if seen[-1][0] else 0}

    monkeypatch.setattr(kgen.driver, "compile_built", fake_compile)
    ls = load_spec(REPO / "specs" / "fa2_fwd.yaml")
    variant = {"dtype": "bf16", "head_dim": 64, "causal": False}
    hopper = load_target("sm_90")
    out = kgen.build.build_variant(ls, variant, hopper, compile=True)  # 128 x 64 over 8 warps first
    assert seen[-1] == (False, ()) and all(spilled for spilled, _ in seen[:-1]) and len(seen) > 2
    assert out.tunables == kgen.build.tunable_candidates(ls, variant)[0] and out.tunables["WARPS"] == 8
    assert "constexpr int wg_ = 1;" in out.kernels[-1].text and out.kernels[-1].options.constant_groups
    assert kgen.build.spill_retry_options(hopper, grouped=True)[-1] == kgen.options.CompileOptions(constant_groups=True)
    assert all(not o.constant_groups for o in kgen.build.spill_retry_options(hopper))


def test_the_causal_atomic_dkdv_takes_tensor_copies_through_the_frugal_register_flags(tmp_path, monkeypatch):
    """The causal D=128 atomic dkdv over 128 keys (what a variant that rewrites its scores, e.g.
    softcap, takes first) spills at ptxas's default register usage in the tensor-copy form; the
    build retries it with the descriptor's frugal flags, and that form (tensor maps, no spills)
    is what it keeps. The non-causal one needs no retry."""
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path))
    ls = load_spec(REPO / "specs" / "fa2_bwd.yaml")
    target = load_target("sm_90")
    flags = list(target.frugal_register_flags)
    dkdv = {}
    for causal in (True, False):
        variant = {"dtype": "bf16", "head_dim": 128, "causal": causal, "deterministic": False}
        out = kgen.build.build_variant(ls, variant, target, compile=True, first={"RECOMPUTE_DQ": 0, "BLOCK_N": 128})
        assert out.tunables == {"RECOMPUTE_DQ": 0, "BLOCK_M": 64, "BLOCK_N": 128, "WARPS": 8, "DSPLIT": 1}
        dkdv[causal] = next(bk for bk in out.kernels if bk.name == "fa2_bwd_dkdv")
    causal, plain = dkdv[True], dkdv[False]
    assert flags and all(f in causal.options.register_flags for f in flags) and len(causal.tensor_maps) == 4
    assert not causal.resources.get("spill_bytes") and not causal.resources.get("stack_bytes")
    assert not any(f in plain.options.register_flags for f in flags[1:]) and len(plain.tensor_maps) == 4
