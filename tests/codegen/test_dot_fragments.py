"""Lane-level CPU simulation of the index arithmetic kgen emits for `dot`, against A @ B.

tests/hw/test_fragments.py checks the descriptors' fragment layouts against the ISA; this file
checks the code built on them. The real specs (matmul.yaml, matmul_bwd.yaml) are compiled with
the real pass pipeline for every target, variant and a few block shapes and warp counts chosen
so that the tiling pass picks every matrix instruction the target has, with warps and repeats
along both M and N. The op contexts kgen/codegen/emit.py produces for the templates are then
run by tests/codegen/lane_sim.py, every lane of every warp of every block: global loads into
registers, staging into shared memory, the fragment reads of each k-step (warp_row/a_row/a_col,
warp_col/b_col/b_k, copy_vec packing), the matrix instruction (per the descriptor), the
accumulator registers each instruction updates, and the store of the accumulators. Inputs are
small integers, so the simulated output must equal the float64 reference exactly.

Every line of C the simulation evaluates must also occur verbatim in the source render_kernel
produces, so what is checked is the generated code, not a re-derivation of it. A second test
perturbs single formulas by one lane, register or warp and requires the simulation to notice.
"""
from __future__ import annotations

import re
import sys
import tempfile
import zlib
from functools import lru_cache
from itertools import product
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
sys.path.insert(0, str(HERE))  # for lane_sim
import helpers  # noqa: E402
import lane_sim  # noqa: E402

from kgen.codegen.emit import Emitter  # noqa: E402
from kgen.codegen.render import name_values, render_kernel, tensor_dims  # noqa: E402
from kgen.hw.descriptor import load_target, target_names  # noqa: E402
from kgen.ir.core import walk  # noqa: E402
from kgen.driver import compile_kernel  # noqa: E402
from kgen.options import DEFAULT, CompileOptions  # noqa: E402
from kgen.spec.expr import eval_expr  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPECS = HERE.parents[1] / "specs"
TUNABLES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "WARPS")
# matmul.yaml tunables (BLOCK_M, BLOCK_N, BLOCK_K, WARPS) and variant, and what the tiling pass
# makes of them. Small tiles keep the time down: compile_kernel's verifier dominates it.
MATMUL_TILES = [
    ((64, 64, 32, 4), "bf16"),  # the spec's own: AMD 32x32x8 on 2x2 warps; NVIDIA 4x1 warps, 8 mma each
    ((16, 32, 16, 2), "bf16"),  # M too short for 32x32: AMD 16x16x16 on 1x2 warps
    ((32, 64, 16, 2), "fp16"),  # AMD 32x32x8 on 1x2 warps; NVIDIA 2x1 warps, 8 mma each
    ((64, 32, 16, 8), "fp16"),  # 8 warps cannot split a 32x32 tiling: AMD 16x16x16 on 4x2 warps
    ((64, 64, 16, 1), "bf16"),  # one warp, several instructions along M and N (AMD 2x2, NVIDIA 4x8)
]
# wgmma (sm_90, whole warpgroups of 4 warps, 64-row instructions): two warpgroups along M, and
# one warpgroup with two repeats along M and, at n = 256, two along N.
# 128-deep K and 128-wide N blocks: rows of 256 bytes, stored in the 128-byte swizzle as two
# column blocks (A K-major, B N-major with the leading offset between its blocks).
WGMMA_TILES = [((128, 64, 32, 8), "bf16"), ((128, 512, 16, 4), "fp16"), ((128, 128, 128, 8), "bf16")]
# matmul_bwd's dots read transposed tiles (.T). Its layouts are those of matmul's dots, so the
# shipped targets and sm_80 (mma.sync, ldmatrix) suffice; on sm_90 64-deep K blocks make both of
# its dots wgmma, dB's A read M-major (the transpose bit).
BWD_CASES = [(kernel, target, dtype, (64, 64, 32, 4)) for target in ("gfx942", "sm_80")
             for kernel, dtype in ((0, "bf16"), (1, "fp16"))]
BWD_CASES += [(kernel, "sm_90", dtype, (64, 64, 64, 4)) for kernel, dtype in ((0, "bf16"), (1, "fp16"))]


# chain.yaml (tests/codegen/specs): a dot's accumulator, cast, is the next dot's A operand. On
# mma.sync and wgmma that is read from registers; 2 warps give two repeats along M.
CHAIN_TILES = [((64, 32, 32, 4), "bf16"), ((64, 32, 16, 2), "fp16")]
SPEC_FILES = {"matmul": SPECS / "matmul.yaml", "matmul_bwd": SPECS / "matmul_bwd.yaml", "chain": HERE / "specs" / "chain.yaml",
              "chain_t": HERE / "specs" / "chain_t.yaml", "matmul_rev": HERE / "specs" / "matmul_rev.yaml",
              "scaled_rev": HERE / "specs" / "scaled_rev.yaml", "two_starts": HERE / "specs" / "two_starts.yaml",
              "two_starts_rows": HERE / "specs" / "two_starts.yaml"}
# cases lowered with other than the default options: two_starts with its rows copied through
# shared memory (ir/passes/row_loads.py)
SPEC_OPTIONS = {"two_starts_rows": CompileOptions(shared_row_loads=True)}
# cases whose spec is another's with kernel fields added: two_starts' rows asked for in three
# slots (`row_load_slots`), which the loop's dot operands then share on sm_80 (sm_90's tensor
# copies keep two)
SPEC_FIELDS = {"two_starts_rows3": ("two_starts", "    shared_row_loads: true\n    row_load_slots: 3\n")}


@lru_cache(maxsize=None)
def spec_path(spec: str) -> Path:
    if spec not in SPEC_FIELDS:
        return SPEC_FILES[spec]
    base, field = SPEC_FIELDS[spec]
    text = SPEC_FILES[base].read_text().replace("    warps: WARPS\n", "    warps: WARPS\n" + field, 1)
    path = Path(tempfile.mkdtemp(prefix="kgen-case-")) / f"{spec}.yaml"
    path.write_text(text)
    return path


def _cases():
    for target, (tile, dtype) in product(target_names(), MATMUL_TILES):
        yield ("matmul", 0, target, dtype, tile)
    for tile, dtype in WGMMA_TILES:
        yield ("matmul", 0, "sm_90", dtype, tile)
    for kernel, target, dtype, tile in BWD_CASES:
        yield ("matmul_bwd", kernel, target, dtype, tile)
    for target, (tile, dtype) in product(("gfx942", "sm_80", "sm_90"), CHAIN_TILES):
        yield ("chain", 0, target, dtype, tile)
    # chain_t.yaml: the accumulator as the next dot's B, staged from registers (wgmma: N-major)
    yield ("chain_t", 0, "sm_90", "bf16", (64, 128, 32, 4))
    # matmul_rev.yaml: K blocks last to first, the copies' index computed in the loop body
    for target, dtype in (("sm_80", "fp16"), ("sm_90", "bf16")):
        yield ("matmul_rev", 0, target, dtype, (64, 64, 32, 4))
    # scaled_rev.yaml: register loads in the loop (a block of a, a row of scales), prefetched
    for target, dtype in (("gfx942", "bf16"), ("sm_80", "fp16"), ("sm_90", "bf16")):
        yield ("scaled_rev", 0, target, dtype, (64, 64, 16, 4))
    # two_starts.yaml: on sm_90 the second dot's start computed before the first dot issues
    # (passes/dot_issue.py), both in flight at once; K = 2 * 2 groups
    for target, dtype in (("sm_80", "fp16"), ("sm_90", "bf16")):
        yield ("two_starts", 0, target, dtype, (64, 64, 2, 4))
        yield ("two_starts_rows", 0, target, dtype, (64, 64, 2, 4))
        yield ("two_starts_rows3", 0, target, dtype, (64, 64, 2, 4))


CASES = list(_cases())


def case_id(case) -> str:
    spec, kernel, target, dtype, tile = case
    return f"{spec}-k{kernel}-{target}-{dtype}-{'x'.join(map(str, tile[:3]))}w{tile[3]}"


@lru_cache(maxsize=None)
def lowered(case):
    """(LoadedSpec, IR after all passes, target, variant) of one case."""
    spec, kernel, target, dtype, tile = case
    ls = load_spec(spec_path(spec))
    tg = load_target(target)
    variant = {"dtype": dtype}
    options = SPEC_OPTIONS.get(spec, DEFAULT)
    return ls, compile_kernel(ls, kernel, variant, dict(zip(TUNABLES, tile)), tg, options=options), tg, variant


def _flat(ctxs):
    for c in ctxs:
        yield c
        if c["macro"] == "for_loop":
            yield from _flat(c["body"])


def simulate(case, perturb=None, land="at_wait"):
    """Run one kernel of the case on a 2x2 grid (two iterations of its loop over blocks) with the
    emitted op contexts, optionally changed by `perturb(ctxs)` first. Returns the simulated
    and the reference value of each tensor the kernel stores, and the simulator."""
    ls, k, tg, variant = lowered(case)
    spec, kernel_index, tile = ls.spec, case[1], dict(zip(TUNABLES, case[4]))
    sizes = {"M": 2 * tile["BLOCK_M"], "N": 2 * tile["BLOCK_N"], "K": 2 * tile["BLOCK_K"], "P": 2 * tile["BLOCK_N"]}
    sizes = {n: sizes[n] for n in spec.sizes}
    env = {**variant, **tile, **sizes}
    name_values(k)  # as render_kernel does, so the names match the rendered source
    emitter = Emitter(k, tg, tensor_dims(k))
    ctxs = emitter.ops(k.body)
    macros = emitter.macros()
    if perturb:  # on the expressions written out, so that the variables the macros hold can be perturbed
        ctxs, macros = lane_sim.expand_all(ctxs, macros), []
        perturb(ctxs)

    rng = np.random.default_rng(zlib.crc32(case_id(case).encode()))
    inputs = {n: rng.integers(-4, 5, helpers.tensor_shape(spec, n, env)).astype(np.float64) for n in spec.inputs()}
    outputs = {n: np.full(helpers.tensor_shape(spec, n, env), np.nan) for n in spec.outputs()}
    tensors = {**inputs, **outputs}
    sim = lane_sim.ProgramSim(k, tg, {n: tensors[n] for n in k.tensors}, sizes, land=land, macros=macros)
    grid = [int(eval_expr(g, env)) for g in spec.kernels[kernel_index].grid]
    for block in product(*(range(g) for g in grid + [1] * (3 - len(grid)))):
        sim.run_block(block, ctxs)

    ref = helpers.reference(ls, {n: torch.from_numpy(x) for n, x in inputs.items()})
    stored = [c["tensor"] for c in _flat(ctxs) if c["macro"] == "store"]
    assert stored, "the kernel stores nothing"
    return {n: tensors[n] for n in stored}, {n: ref[n].numpy() for n in stored}, sim


def mismatch(got: dict, want: dict) -> str | None:
    """None when every stored tensor equals its reference exactly, else what differs."""
    for name in want:
        bad = ~(got[name] == want[name])
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"{name}: {int(bad.sum())} of {bad.size} elements differ ({int(np.isnan(got[name]).sum())} never "
                    f"written); first at {first}: got {got[name][first]}, want {want[name][first]}")
    return None


@lru_cache(maxsize=None)
def unperturbed_outcome(case) -> str | None:
    return outcome(case)


def outcome(case, perturb=None) -> str | None:
    """None when the simulated kernel computes the reference, else why it does not."""
    try:
        got, want, _ = simulate(case, perturb)
    except lane_sim.SimError as e:
        return f"simulation refused: {e}"
    return mismatch(got, want)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_emitted_dot_indexing_computes_the_matmul(case):
    got, want, sim = simulate(case)
    assert sim.dots_run > 0, "no dot was simulated"
    ls, k, tg, variant = lowered(case)
    source = render_kernel(k, tg, spec_file=f"specs/{case[0]}.yaml", program_line=1, variant=variant)
    missing = sorted(s for s in sim.snippets if s not in source)
    assert not missing, "the simulation evaluated lines the generated source does not contain:\n" + "\n".join(missing)
    problem = mismatch(got, want)
    assert problem is None, problem


def _scopes(target):
    return sorted({mi.scope for mi in load_target(target).matrix_instrs})


@pytest.mark.parametrize("target, scope", [(t, s) for t in target_names() for s in _scopes(t)])
def test_cases_cover_every_matrix_instruction_and_split(target, scope):
    """The cases above reach every warp-level instruction of every target (for warpgroup
    instructions, whose shapes differ only in n: each input dtype and several n), and groups of
    warps and repeats along both M and N (otherwise a wrong warp_row or rm term would go
    unexercised)."""
    tg = load_target(target)
    dots = [op for case in CASES if case[2] == target for op in walk(lowered(case)[1].body)
            if op.kind == "dot" and tg.matrix_instr(op.attrs["instr"]).scope == scope]
    reached = {tg.matrix_instr(op.attrs["instr"]) for op in dots}
    wanted = [mi for mi in tg.matrix_instrs if mi.scope == scope]
    if scope == "warp":
        assert reached == set(wanted)
    else:
        assert {mi.ab_dtype for mi in reached} == {mi.ab_dtype for mi in wanted}
        assert len({mi.n for mi in reached}) >= 3
    for attr in ("warps_m", "warps_n", "reps_m", "reps_n"):
        assert any(op.attrs[attr] > 1 for op in dots), f"no case has {attr} > 1 on {target} ({scope})"


ASYNC_CASES = [c for c in CASES if any(op.kind == "copy_async" for op in walk(lowered(c)[1].body))]


@pytest.mark.parametrize("case", ASYNC_CASES, ids=case_id)
def test_async_copies_land_in_time_however_early(case):
    """The same kernels with every async copy landing the moment it is issued: a prefetch placed
    before the last read of the buffer it overwrites would now corrupt that read. (The test
    above lands them as late as each wait allows, so a wait that lets a read run early fails.)"""
    got, want, _ = simulate(case, land="at_issue")
    problem = mismatch(got, want)
    assert problem is None, problem


def test_async_copy_cases_include_prefetching_loops():
    assert any(op.kind == "copy_async" and op.attrs["pred"] for c in ASYNC_CASES for op in walk(lowered(c)[1].body))
    assert any(op.kind == "wait_async" and op.attrs["pending"] > 0 for c in ASYNC_CASES for op in walk(lowered(c)[1].body))


@pytest.mark.parametrize("target, kinds", [("sm_80", {"reg", "matrix", "matrix_trans"}),
                                           ("sm_90", {"reg", "matrix", "matrix_trans", "desc"}), ("gfx942", {"vec"})])
def test_cases_cover_every_way_of_reading_operands(target, kinds):
    """Registers, ldmatrix and ldmatrix.trans on NVIDIA, and on sm_90 wgmma's descriptors, for
    A and B each read K-major and M/N-major; vector reads on AMD (whose MFMA C layout is not its
    A layout, so chain.yaml stages its A operand there)."""
    dots = [op for case in CASES if case[2] == target for op in walk(lowered(case)[1].body) if op.kind == "dot"]
    assert {op.attrs[f"{r}_load"] for op in dots for r in "ab"} == kinds
    if "desc" in kinds:
        majors = {(r, op.attrs[f"{r}_major"]) for op in dots for r in "ab" if op.attrs[f"{r}_load"] == "desc"}
        assert majors == {(r, m) for r in "ab" for m in ("k", "mn")}


# (macro, which occurrence of it, path to the formula in its context, variable, replacement):
# each moves one formula to the neighbouring lane, register, group or warp.
COMMON = [
    # register tiles written to shared memory (AMD: matmul's staged loads, pipelined through
    # registers, kgen/ir/passes/staged_loads.py): a's before the loop, b's in it
    ("stage_into", 0, ("slot",), "e", "(e + 1)"),
    ("stage_into", 3, ("slot",), "lane", "(lane + 1)"),
    ("store", 0, ("dims", 0, "first"), "lane", "(lane + 1)"),
    ("store", 0, ("dims", 0, "at"), "e", "(e + 2)"),  # +2: NVIDIA stores pairs, e + 1 is the same pair
]
VEC = [  # fragments read with vector loads (AMD)
    ("dot", 0, ("a", "addr"), "lane", "(lane + 1)"),
    ("dot", 0, ("a", "addr"), "i", "(i + 1)"),
    ("dot", 0, ("b", "addr"), "lane", "(lane + 1)"),
    ("dot", 0, ("b", "addr"), "i", "(i + 1)"),
    ("dot", 0, ("a", "addr"), "warp", "(warp + 1)"),
    ("dot", 0, ("b", "addr"), "warp", "(warp + 1)"),
]
MATRIX = [  # fragments read with ldmatrix (NVIDIA), plain and transposed
    ("dot", 0, ("a", "addr"), "lane", "(lane + 1)"),
    ("dot", 0, ("b", "addr"), "lane", "(lane + 1)"),
    ("dot", 0, ("a", "addr"), "warp", "(warp + 1)"),
]
GROUPS_B = [("dot", 0, ("b", "addr"), "g", "(g + 1)")]  # where B takes several ldmatrix.x4
GROUPS_A = [("dot", 0, ("a", "addr"), "g", "(g + 1)")]  # where A does (2 repeats along M)
ASYNC = [  # global -> shared copies (NVIDIA), prefetched a loop iteration ahead
    ("copy_async", 0, ("chunk",), "lane", "(lane + 1)"),
    ("copy_async", 0, ("off",), "k_", "(k_ + 8)"),
    ("copy_async", 0, ("count",), "i0_", "(i0_ + 1)"),
    ("copy_async", 1, ("row",), "c_", "(c_ + 64)"),
    ("copy_async", 1, ("slot",), "r_", "(r_ + 1)"),
    ("copy_async", 2, ("i0",), "r_", "(r_ + 1)"),
    ("wait_async", 1, ("pending",), None, 1),  # one more group left in flight: a read too early
]
REG = [  # A from the registers of the previous dot's accumulator
    ("dot", 1, ("a", "ptr"), "ks", "(ks + 1)"),
    ("dot", 1, ("a", "ptr"), "rm", "(rm + 1)"),
]
WGMMA = [  # descriptors: the k-step, the warpgroup's strip, the two core strides
    ("wgmma_dot", 0, ("a", "offset"), "ks", "(ks + 1)"),
    ("wgmma_dot", 0, ("b", "offset"), "ks", "(ks + 1)"),
    ("wgmma_dot", 0, ("group",), "warp", "(warp + 4)"),
    ("wgmma_dot", 0, ("a", "offset"), "wg_", "(wg_ + 1)"),
    ("wgmma_dot", 0, ("a", "lead"), None, 16),
    ("wgmma_dot", 0, ("b", "stride"), None, 16),
    # copies whose chunks step whole rows: the thread's first row, and the step (the a tile's
    # copy takes two steps)
    ("copy_async", 0, ("stepped", "row0"), "lane", "(lane + 1)"),
    ("copy_async", 0, ("stepped", "rows"), None, 1),
]
WGMMA_REPS = [("wgmma_dot", 0, ("a", "offset"), "rm", "(rm + 1)"), ("wgmma_dot", 0, ("b", "offset"), "rn", "(rn + 1)")]
WGMMA_REG = [("wgmma_dot", 1, ("a", "ptr"), "ks", "(ks + 1)"), ("wgmma_dot", 1, ("b", "lead"), None, 16)]
WGMMA_TRANS_A = [("wgmma_dot", 0, ("a", "offset"), "ks", "(ks + 1)"), ("wgmma_dot", 0, ("a", "stride"), None, 16)]
# 32x32x8 on 2x2 warps, 16x16x16 on 4x2 warps, mma.sync on 4x2 warps (ldmatrix, .trans for B),
# matmul_bwd's dA on mma.sync (ldmatrix.trans for A), chain on 2x1 warps with 2 repeats along M;
# wgmma on 2 warpgroups, with repeats, A from registers, A M-major
PERTURBED = [(("matmul", 0, "gfx942", "bf16", (64, 64, 32, 4)), COMMON + VEC),
             (("matmul", 0, "gfx942", "fp16", (64, 32, 16, 8)), COMMON + VEC),
             (("matmul", 0, "sm_80", "fp16", (64, 32, 16, 8)), COMMON[2:] + MATRIX + ASYNC),
             (("matmul_bwd", 1, "sm_80", "fp16", (64, 64, 32, 4)), MATRIX),
             (("matmul", 0, "sm_80", "bf16", (64, 64, 32, 4)), GROUPS_B),
             (("chain", 0, "sm_90", "fp16", (64, 32, 16, 2)), REG + GROUPS_A),
             (("matmul", 0, "sm_90", "bf16", (128, 64, 32, 8)), COMMON[2:] + WGMMA),
             (("matmul", 0, "sm_90", "fp16", (128, 512, 16, 4)), WGMMA_REPS),
             (("chain", 0, "sm_90", "bf16", (64, 32, 32, 4)), WGMMA_REG),
             (("matmul_bwd", 1, "sm_90", "fp16", (64, 64, 64, 4)), WGMMA_TRANS_A)]
PERTURBED_CASES = [(case, p) for case, ps in PERTURBED for p in ps]


def _perturbation(macro, nth, path, var, repl):
    def perturb(ctxs):
        node = [c for c in _flat(ctxs) if c["macro"] == macro][nth]
        for key in path[:-1]:
            node = node[key]
        before = node[path[-1]]
        if var is None:  # a number: add repl
            node[path[-1]] = before + repl
            return
        node[path[-1]] = re.sub(rf"\b{var}\b", repl, before)
        assert node[path[-1]] != before, f"{macro}.{path} has no '{var}' to perturb: {before!r}"
    return perturb


@pytest.mark.parametrize("case, perturbation", PERTURBED_CASES,
                         ids=[f"{case_id(c)}-{m}{n}.{'.'.join(map(str, p))}-{v}" for c, (m, n, p, v, _) in PERTURBED_CASES])
def test_simulation_catches_a_formula_off_by_one(case, perturbation):
    assert unperturbed_outcome(case) is None  # the unperturbed kernel passes, so what follows is the perturbation's doing
    macro, nth, path, var, repl = perturbation
    problem = outcome(case, _perturbation(macro, nth, path, var, repl))
    assert problem is not None, f"{macro}.{path} with {var} -> {repl} went unnoticed"


REVERSED = [c for c in CASES if c[0] == "matmul_rev"]


@pytest.mark.parametrize("case", REVERSED, ids=case_id)
def test_copies_indexed_by_loop_arithmetic_are_prefetched_with_it_recomputed(case, monkeypatch):
    """matmul_rev's copies read block nk - 1 - j: they are prefetched (predicated copies before
    and inside the loop), and a pass whose in-loop copies took this iteration's index instead of
    the next one's is caught by the simulation."""
    body = lowered(case)[1].body
    assert sum(op.kind == "copy_async" and op.attrs["pred"] for op in walk(body)) == 4  # a and b: prologue + loop
    from kgen.ir.passes import async_copy

    real, calls = async_copy._copy_at, []

    def stale(copy, chain, iv, at, pred, dst=None):  # the prologue's two copies first, then the loop's
        calls.append(copy)
        return real(copy, chain, iv, iv if len(calls) > 2 else at, pred, dst)

    monkeypatch.setattr(async_copy, "_copy_at", stale)
    lowered.cache_clear()
    try:
        got, want, _ = simulate(case)
        assert mismatch(got, want) is not None
    finally:
        monkeypatch.undo()
        lowered.cache_clear()


def test_prefetching_loops_use_two_slots_and_a_shared_slot_is_caught():
    """Pipelined buffers get two slots (the next iteration's copy lands in the other one); with
    every slot view pointed at slot 0, a copy landing at issue overwrites the tile being read."""
    case = ("matmul", 0, "sm_90", "bf16", (128, 64, 32, 8))
    assert any(op.kind == "alloc_shared" and op.attrs.get("slots") == 2 for op in walk(lowered(case)[1].body))

    def one_slot(ctxs):
        for c in _flat(ctxs):
            if c["macro"] == "slot":
                c["offset"] = re.sub(r"% 2\b", "% 1", c["offset"])

    got, want, _ = simulate(case, one_slot, land="at_issue")
    assert mismatch(got, want) is not None


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_three_slots_keep_two_iterations_in_flight_and_a_wait_one_short_is_caught(target):
    """two_starts' rows asked for in three slots (`row_load_slots: 3`): the prologue copies two
    iterations, each iteration copies the one two ahead, and each wait leaves the 7 groups
    committed after its copy in flight. Letting one more stay in flight reads a slot before its
    copy lands."""
    case = ("two_starts_rows3", 0, target, "bf16" if target == "sm_90" else "fp16", (64, 64, 2, 4))
    k = lowered(case)[1]
    rows = [op for op in walk(k.body) if op.kind == "alloc_shared" and op.attrs.get("slots_asked") == 3]
    assert len(rows) == 2 and all(op.attrs["slots"] == 3 for op in rows)
    loop = next(op for op in walk(k.body) if op.kind == "for")
    before = [op for op in k.body.ops[:k.body.ops.index(loop)] if op.kind == "copy_async" and op.attrs["tensor"] in "uw"]
    assert len(before) == 4  # u and w for iterations 0 and 1
    assert {op.attrs["pending"] for op in loop.body.ops if op.kind == "wait_async" and not op.attrs.get("tma")} <= {6, 7}

    def one_short(ctxs):
        for c in _flat(ctxs):
            if c["macro"] == "wait_async" and "pending" in c:
                c["pending"] += 1

    with pytest.raises(lane_sim.SimError, match="reads a slot nothing wrote"):
        simulate(case, one_short)


def test_a_write_that_overtakes_a_dot_in_flight_is_caught():
    """A wgmma dot is deferred (overlap_async_dots): the simulation computes it at issue and again
    at its dot_wait. Issued before the loop's copies, with those copies sent into the slot it
    reads, the dot's own product is still right (it was computed at issue and the next iteration
    reads the copied data) but its operands changed while it was in flight, which is caught."""
    case = ("matmul", 0, "sm_90", "bf16", (128, 64, 32, 8))

    def overtake(ctxs):
        body = next(c for c in _flat(ctxs) if c["macro"] == "for_loop")["body"]
        dot = next(c for c in body if c["macro"] == "wgmma_dot")
        assert dot["deferred"] and any(c["macro"] == "dot_wait" for c in body)
        body.remove(dot)
        body.insert(next(i for i, c in enumerate(body) if c["macro"] == "copy_async"), dot)
        for c in _flat(ctxs):
            if c["macro"] == "slot":
                c["offset"] = re.sub(r"% 2\b", "% 1", c["offset"])

    with pytest.raises(lane_sim.SimError, match="changed between its issue and its wait"):
        simulate(case, overtake, land="at_issue")


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_a_copied_row_read_before_its_copy_lands_is_caught(target):
    """two_starts' rows of u and w go through shared memory (passes/row_loads.py), each read
    after the wait for its copy; moved above the body's first wait, the read of w in the second
    iteration meets a slot no copy has filled yet."""
    case = ("two_starts_rows", 0, target, "bf16" if target == "sm_90" else "fp16", (64, 64, 2, 4))
    assert sum(op.kind == "read_shared" for op in walk(lowered(case)[1].body)) == 2

    def early(ctxs):
        body = next(c for c in _flat(ctxs) if c["macro"] == "for_loop")["body"]
        reads = [i for i, c in enumerate(body) if c["macro"] == "read_shared"]
        body.insert(min(i for i, c in enumerate(body) if c["macro"] == "wait_async"), body.pop(reads[-1]))

    with pytest.raises(lane_sim.SimError, match="reads a slot nothing wrote"):
        simulate(case, early)


SWIZZLED = ("matmul", 0, "sm_90", "bf16", (128, 128, 128, 8))  # A K-major, B N-major, two 128-byte column blocks each
SWIZZLED_MN = ("matmul_bwd", 1, "sm_90", "fp16", (64, 64, 64, 4))  # dB: A read M-major
STAGED = ("chain_t", 0, "sm_90", "bf16", (64, 128, 32, 4))  # B staged from registers, read N-major


def _layouts(case) -> dict[str, set[str]]:
    """smem_layout of each buffer a wgmma dot reads, by the major it is read in."""
    k = lowered(case)[1]
    stages = {id(op.result): op for op in walk(k.body) if op.kind in ("stage", "alloc_shared")}
    views = {id(op.result): op.operands[0] for op in walk(k.body) if op.kind in ("view_shared", "slot")}
    out: dict[str, set[str]] = {"k": set(), "mn": set()}
    for op in walk(k.body):
        if op.kind == "dot":
            for i, r in enumerate("ab"):
                if op.attrs[f"{r}_load"] == "desc":
                    v = op.operands[i]
                    while id(v) in views:
                        v = views[id(v)]
                    out[op.attrs[f"{r}_major"]].add(stages[id(v)].attrs["smem_layout"])
    return out


def test_sm90_cases_read_swizzled_buffers_both_ways_and_plain_cores():
    """Tiles copied from global memory with rows of 128 bytes or more take the 128-byte swizzle,
    read K-major and MN-major; 64-byte rows (32-deep K blocks) and tiles staged from registers
    keep plain core matrices."""
    assert _layouts(SWIZZLED) == {"k": {"sw128"}, "mn": {"sw128"}}
    assert "sw128" in _layouts(SWIZZLED_MN)["mn"]
    staged = [op.attrs["smem_layout"] for op in walk(lowered(STAGED)[1].body) if op.kind == "stage"]
    assert staged == ["cores"]  # the register tile; chain_t's loaded tiles became cp.async buffers
    assert _layouts(("matmul", 0, "sm_90", "bf16", (128, 64, 32, 8)))["k"] == {"cores"}


def _edit(macro, key, fn):
    def perturb(ctxs):
        hit = False
        for c in _flat(ctxs):
            if c["macro"] == macro:
                for f in ([c[key]] if key in ("a", "b") else [c]):
                    hit |= fn(f)
        assert hit, f"nothing to change in {macro}.{key}"
    return perturb


def _drop_xor(c):
    before = c.get("slot", "")
    c["slot"] = before.replace(" ^ ", " | 0 * ")
    return c["slot"] != before


def _plain_descriptor(f):
    if f.get("kind") == "desc" and f["mode"] == 1:
        f["mode"] = 0
        return True
    return False


def _lead_off(f):
    if f.get("kind") == "desc" and f["mode"] == 1 and f["trans"]:
        f["lead"] += 1024
        return True
    return False


@pytest.mark.parametrize("case, perturb", [
    (SWIZZLED, _edit("copy_async", None, _drop_xor)),         # copies written unswizzled
    (SWIZZLED, _edit("wgmma_dot", "a", _plain_descriptor)),   # A read without the swizzle
    (SWIZZLED, _edit("wgmma_dot", "b", _plain_descriptor)),
    (SWIZZLED, _edit("wgmma_dot", "b", _lead_off)),           # N-major: the next 128-byte block
    (SWIZZLED_MN, _edit("wgmma_dot", "a", _plain_descriptor)),
], ids=["copy-xor", "desc-a-mode", "desc-b-mode", "mn-lead", "mn-desc-mode"])
def test_simulation_catches_a_wrong_swizzle(case, perturb):
    assert unperturbed_outcome(case) is None
    assert outcome(case, perturb) is not None


SCALED = [c for c in CASES if c[0] == "scaled_rev"]


@pytest.mark.parametrize("case", SCALED, ids=case_id)
def test_register_loads_are_prefetched_with_their_index_recomputed(case, monkeypatch):
    """scaled_rev's loop loads a block of a and a row of scales into registers at block
    nk - 1 - j: both are loaded one iteration ahead (predicated loads before and inside the
    loop), and a pass whose in-loop loads took this iteration's index instead of the next one's
    is caught by the simulation."""
    k = lowered(case)[1]
    staged = {id(op.operands[1]) for op in walk(k.body) if op.kind == "stage_into"}
    moved = [op.attrs["tensor"] for op in walk(k.body)
             if op.kind == "load" and op.attrs.get("pred") and id(op.result) not in staged]
    # prologue and loop (b: cp.async, or on gfx942 a staged load pipelined through registers)
    assert sorted(moved) == ["a", "a", "s", "s"]
    from kgen.ir.passes import prefetch

    real, calls = prefetch.recompute_chain, []

    def stale(chain, iv, at, operands):  # per load: the prologue's first, then the loop's
        calls.append(at)
        return real(chain, iv, iv if len(calls) % 2 == 0 else at, operands)

    monkeypatch.setattr(prefetch, "recompute_chain", stale)
    lowered.cache_clear()
    try:
        got, want, _ = simulate(case)
        assert mismatch(got, want) is not None
    finally:
        monkeypatch.undo()
        lowered.cache_clear()
