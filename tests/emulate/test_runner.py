"""kgen/emulate/runner.py: gfx942 kernels, as they ship, run on the CPU in 64-lane waves.

The emulator's MFMA follows the CDNA3 ISA's register layouts (templates/emu/kgen_emu_rt.cpp);
the generated kernels place their fragments by the descriptor's (kgen/hw/data/gfx942.yaml). A
dot that matches its float64 reference is the two readings agreeing. Kernels that hang on the
hardware (a barrier some threads never reach) or break the rules the emulator checks
(readfirstlane of a value that differs between lanes) fail with EmulationError."""
from __future__ import annotations

import random
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for helpers
import helpers  # noqa: E402
from kgen.build import build_variant
from kgen.driver import build_kernel
from kgen.emulate.runner import EmulationError, run_kernel
from kgen.hw.descriptor import load_target
from kgen.spec.expr import eval_expr
from kgen.spec.load import load_spec

TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _spec(name: str):
    return load_spec(Path(__file__).resolve().parents[2] / "specs" / f"{name}.yaml")


def _run_spec(ls, variant, sizes, inputs, tunables=None):
    """Every kernel of one variant, in order, on CPU tensors; outputs and scratch start as NaN."""
    target = load_target("gfx942")
    if tunables is None:
        bv = build_variant(ls, variant, target, compile=False)
        kernels, tunables = bv.kernels, bv.tunables
    else:
        kernels = [build_kernel(ls, i, variant, tunables, target) for i in range(len(ls.spec.kernels))]
    env = {**variant, **tunables, **sizes}
    tensors = dict(inputs)
    for name in [n for n, t in ls.spec.tensors.items() if t.role != "input"]:
        shape = helpers.tensor_shape(ls, name, env)
        tensors[name] = torch.full(shape, float("nan"), dtype=helpers.torch_dtype(ls, name, variant))
    for ks, bk in zip(ls.spec.kernels, kernels):
        grid = tuple(int(eval_expr(g, env)) for g in ks.grid)
        run_kernel(bk, grid, tensors, sizes, {n: float(sc.default) for n, sc in ls.spec.scalars.items()})
    return tensors


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_softmax_runs_and_matches(dtype):
    ls = _spec("softmax")
    torch.manual_seed(1)
    x = torch.randn(9, 1500).to(TORCH[dtype])  # ragged: 1500 in the 4096-wide row bucket
    out = _run_spec(ls, {"dtype": dtype, "ROW": 4096}, {"M": 9, "N": 1500}, {"x": x})
    ref, ref_lowp = helpers.reference(ls, {"x": x}), helpers.reference(ls, {"x": x}, exact=False)
    helpers.check_close("y", out["y"], ref["y"], ref_lowp["y"])


@pytest.mark.parametrize("name, tiles", [("layernorm", {"BLOCK_M": 2, "WARPS": 8, "OCC": 1}),
                                         ("softmax", {"BLOCK_M": 4, "WARPS": 16, "OCC": 1})])
def test_row_sums_across_warps_of_several_rows_match(name, tiles):
    """Rows split over warps (BLOCK_M rows a program): each row's sum goes through shared memory at
    a slot of its own, the row taken from the warp's bits (once written `warp * 2 + warp & 1`,
    which C reads as `(warp * 2 + warp) & 1`: a race the emulation reports, and wrong rows on the
    H200). Not the first tile choice, so only a tune picks it."""
    ls = _spec(name)
    torch.manual_seed(4)
    m, n = 7, 900  # ragged rows and columns in the 1024-wide bucket
    ins = {"x": torch.randn(m, n).to(torch.bfloat16)}
    if name == "layernorm":
        ins.update(w=(1 + 0.1 * torch.randn(n)).to(torch.bfloat16), b=(0.1 * torch.randn(n)).to(torch.bfloat16))
    out = _run_spec(ls, {"dtype": "bf16", "ROW": 1024}, {"M": m, "N": n}, ins, tiles)
    ref, ref_lowp = helpers.reference(ls, ins), helpers.reference(ls, ins, exact=False)
    for o in ls.spec.outputs():
        helpers.check_close(o, out[o], ref[o], ref_lowp[o])


@pytest.mark.parametrize("dtype, tiles", [("bf16", None), ("fp16", None),
                                          ("fp16", {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 16, "WARPS": 8}),
                                          ("bf16", {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 16, "WARPS": 8})])
def test_matmul_on_mfma_matches(dtype, tiles):
    """The default tiles take v_mfma_f32_32x32x8; 64x32x16 on 8 warps takes 16x16x16."""
    ls = _spec("matmul")
    torch.manual_seed(2)
    m, n, k = 100, 70, 96  # ragged in M and N, several blocks each way
    a, b = torch.randn(m, k).to(TORCH[dtype]), torch.randn(k, n).to(TORCH[dtype])
    out = _run_spec(ls, {"dtype": dtype}, {"M": m, "N": n, "K": k}, {"a": a, "b": b}, tiles)
    ref, ref_lowp = helpers.reference(ls, {"a": a, "b": b}), helpers.reference(ls, {"a": a, "b": b}, exact=False)
    helpers.check_close("c", out["c"], ref["c"], ref_lowp["c"])


def _kernel(body: str, signature: str = "pi", threads: int = 128) -> SimpleNamespace:
    """A hand-written kernel in the generated sources' dialect (kgen_hip.h, kgen_tile.h)."""
    source = ('#include "kgen_hip.h"\n#include "kgen_tile.h"\n'
              f"KG_KERNEL void probe(int* __restrict__ t_out, int n) {{\n  const int tid = kg::thread_id();\n{body}\n}}\n")
    return SimpleNamespace(source=source, file=f"probe_{random.getrandbits(32):08x}.hip", name="probe", includes=(),
                           signature=signature, threads=threads,
                           arguments={"tensors": ["out"], "sizes": ["n"], "scalars": []})


def test_cross_lane_and_barrier_semantics():
    """shfl_xor (ds_bpermute over mbcnt's lane ids) pairs lanes of a 64-lane wave; a barrier
    orders LDS between the waves of a workgroup."""
    k = _kernel("""
  KG_SHARED int lds[128];
  lds[tid] = tid * 3;
  kg::sync();
  const int other = lds[127 - tid];
  t_out[tid] = kg::shfl_xor(tid, 5) * 1000 + other;""")
    out = torch.full((128,), -1, dtype=torch.int32)
    run_kernel(k, (1,), {"out": out}, {"n": 128}, {})
    tid = torch.arange(128)
    assert torch.equal(out, ((tid ^ 5) * 1000 + (127 - tid) * 3).int())


def test_ds_bpermute_wraps_byte_addresses_and_reads_zero_from_inactive_lanes():
    """96 threads: wave 1 has 32 active lanes. Lane l asks for lane l + 32 through the byte
    address 4 * (l + 32) + 256 (the lane number is taken modulo 64, the low two bits dropped)."""
    k = _kernel("  const int lane = tid % 64;\n"
                "  t_out[tid] = __builtin_amdgcn_ds_bpermute(4 * (lane + 32) + 256 + 3, tid + 1000);", threads=96)
    out = torch.full((96,), -1, dtype=torch.int32)
    run_kernel(k, (1,), {"out": out}, {"n": 96}, {})
    tid = torch.arange(96)
    lane = tid % 64
    source = (tid - lane) + (lane + 32) % 64
    expect = torch.where(source < 96, source + 1000, 0)
    assert torch.equal(out, expect.int())


def test_a_barrier_some_threads_skip_is_an_error():
    k = _kernel("  if (tid < 64) kg::sync();\n  t_out[tid] = 1;")
    with pytest.raises(EmulationError, match="probe.*never reach"):
        run_kernel(k, (1,), {"out": torch.zeros(128, dtype=torch.int32)}, {"n": 128}, {})


def test_readfirstlane_of_a_value_that_differs_between_lanes_is_an_error():
    k = _kernel("  t_out[tid] = __builtin_amdgcn_readfirstlane(tid);")
    with pytest.raises(EmulationError, match="readfirstlane of a value that differs"):
        run_kernel(k, (1,), {"out": torch.zeros(128, dtype=torch.int32)}, {"n": 128}, {})


# Memory checks (templates/emu/kgen_emu_memcheck.cpp): like compute-sanitizer's memcheck,
# racecheck and initcheck, an error names the kernel, the thread, the address and the line.
@pytest.mark.parametrize("body, message", [
    ("  t_out[tid + 1] = 1;", r"out-of-bounds 4-byte write at 0x[0-9a-f]+, 0 bytes past the end of tensor 'out' \(512 bytes\) "
                              r"\(thread 127 of workgroup 0,0,0\) at probe_\w+\.hip:5"),
    ("  t_out[tid] = t_out[tid - 2];", r"out-of-bounds 4-byte read at 0x[0-9a-f]+, 8 bytes before the start of tensor 'out'"),
    ("  t_out[tid + (1 << 24)] = 1;", r"out-of-bounds 4-byte write .*not in any tensor argument"),
    ("  KG_SHARED int lds[64];\n  lds[tid] = 1;", r"out-of-bounds 4-byte write .*past the end of the LDS allocation \(256 bytes\)"),
    # a barrier missing between a write and another thread's read of it (read after write)
    ("  KG_SHARED int lds[128];\n  lds[tid] = tid;\n  t_out[tid] = lds[tid > 0 ? tid - 1 : 0];",
     r"reads LDS byte \d+ that thread \d+ \(wave \d, lane \d+\) wrote since the last barrier \(a race"),
    # a write over what another thread read since the last barrier (write after read)
    ("  KG_SHARED int lds[129];\n  lds[tid] = tid;\n  lds[128] = 0;\n  kg::sync();\n  const int v = lds[tid + 1];\n  lds[tid] = v + 1;\n  t_out[tid] = v;",
     r"overwrites LDS byte \d+ that thread \d+ \(wave \d, lane \d+\) read since the last barrier"),
    ("  KG_SHARED int lds[128];\n  lds[tid & 1] = tid;\n  kg::sync();\n  t_out[tid] = lds[0];",
     r"writes another value into LDS byte \d+ that thread \d+ .* wrote since the last barrier"),
    ("  KG_SHARED int lds[128];\n  t_out[tid] = lds[tid];", r"reads LDS byte 0 before any thread of the workgroup wrote it \(thread 0 of"),
])
def test_memory_checks_find_the_error(body, message):
    k = _kernel(body)
    with pytest.raises(EmulationError, match="probe .*" + message):
        run_kernel(k, (1,), {"out": torch.zeros(128, dtype=torch.int32)}, {"n": 128}, {})


def test_threads_that_store_one_value_to_one_place_do_not_race():
    """Copies of one value (a tile replicated across waves) all stored to LDS: no order matters."""
    k = _kernel("  KG_SHARED int lds[4];\n  lds[tid & 3] = (tid & 3) * 7;\n  kg::sync();\n  t_out[tid] = lds[3 - (tid & 3)];")
    out = torch.zeros(128, dtype=torch.int32)
    run_kernel(k, (1,), {"out": out}, {"n": 128}, {})
    assert torch.equal(out, (3 - (torch.arange(128) & 3)).int() * 7)


def test_column_sums_of_rows_split_over_warps_take_a_slice_per_row_position():
    """layernorm_bwd on two rows a program (SA 1): dw and db sum the (2 x ROW) tile over its rows,
    which lie in different warps. Each warp writes its partial into the slice of its row (the
    warps of one row hold other columns), so the scratch is 2 x ROW floats, not a slice per warp
    (8 x ROW: 128 KB at 4096 wide, with the rows' copies 192 KB, one program an SM); every warp
    adds the slices in the same order. The sums match the reference in emulation."""
    from kgen.hw.descriptor import load_target as target_of
    from kgen.ir.analysis import scratch_bytes
    from kgen.ir.core import walk
    from kgen.driver import compile_kernel

    ls = _spec("layernorm_bwd")
    tiles = {"RL": 0, "SA": 1, "BLOCK_M": 2, "WARPS": 8, "ROWS": 16, "SPLIT": 1, "BLOCK_C": 256}
    variant = {"dtype": "bf16", "ROW": 1024}
    k = compile_kernel(ls, 0, variant, tiles, target_of("gfx942"))
    column_sums = [op for op in walk(k.body) if op.kind == "reduce" and op.attrs["axis"] == 0 and scratch_bytes(op)]
    assert len(column_sums) == 2 and all(scratch_bytes(op) == 4 * 1024 * 2 for op in column_sums)
    _layernorm_bwd_matches(ls, variant, tiles, 37, seed=6)  # 37 rows: 3 programs, the last one part full


def _layernorm_bwd_matches(ls, variant, tiles, m, seed):
    """layernorm_bwd on m ragged rows of 1000 (in the 1024-wide bucket) in emulation against its reference."""
    torch.manual_seed(seed)
    n = 1000
    x = torch.randn(m, n)
    mean, rstd = x.mean(dim=1), torch.rsqrt(x.var(dim=1, unbiased=False) + 1e-5)
    ins = {"x": x.to(torch.bfloat16), "w": (1 + 0.1 * torch.randn(n)).to(torch.bfloat16), "mean": mean, "rstd": rstd,
           "dy": torch.randn(m, n).to(torch.bfloat16)}
    out = _run_spec(ls, variant, {"M": m, "N": n}, ins, tiles)
    ref, ref_lowp = helpers.reference(ls, ins), helpers.reference(ls, ins, exact=False)
    for o in ls.spec.outputs():
        helpers.check_close(o, out[o], ref[o], ref_lowp[o])


@pytest.mark.parametrize("warps", [8, 16])
def test_a_row_sum_across_warps_is_added_by_the_lanes(warps):
    """A sum with one element of result (a program's one row): each warp writes its partial to
    the slice of its position along the row, then lane l reads slice l mod slices and an
    xor-butterfly over those lane bits adds them, the same tree in every warp. A 4096-wide bf16
    row is 8 waves of 64 lanes x 8 elements: on 16 waves, two hold each part of the row and
    store equal partials into one slice (a store that leaves the bytes as they were, which the
    race check allows). layernorm's mean and variance match the reference in emulation."""
    ls = _spec("layernorm")
    variant, tiles = {"dtype": "bf16", "ROW": 4096}, {"BLOCK_M": 1, "WARPS": warps, "OCC": 1}
    bk = build_kernel(ls, 0, variant, tiles, load_target("gfx942"))
    text = bk.source + "".join(src for _, src in bk.includes)
    assert "scratch_[(warp & 7) * 1 + 0] = " in text and "scratch_[lane & 7]" in text
    torch.manual_seed(8)
    m, n = 3, 3000  # 3000 in the 4096-wide bucket: the padding is in the last waves
    ins = {"x": (2 + torch.randn(m, n)).to(torch.bfloat16), "w": (1 + 0.1 * torch.randn(n)).to(torch.bfloat16),
           "b": (0.1 * torch.randn(n)).to(torch.bfloat16)}
    out = _run_spec(ls, variant, {"M": m, "N": n}, ins, tiles)
    ref, ref_lowp = helpers.reference(ls, ins), helpers.reference(ls, ins, exact=False)
    for o in ls.spec.outputs():
        helpers.check_close(o, out[o], ref[o], ref_lowp[o])


@pytest.mark.parametrize("tiles", [
    {"RL": 0, "SA": 0, "BLOCK_M": 1, "WARPS": 4, "ROWS": 4, "SPLIT": 1, "BLOCK_C": 256},  # one row over 4 waves: lanes add
    {"RL": 0, "SA": 0, "BLOCK_M": 2, "WARPS": 8, "ROWS": 4, "SPLIT": 1, "BLOCK_C": 256},  # two rows of 4 waves: slices read
])
def test_sums_that_share_a_barrier_match(tiles):
    """layernorm_bwd's two row sums (of g and of g * xhat) grouped (kgen/ir/passes/sum_groups.py):
    both write their slices, one barrier, both read. The race check sees a read of a slice not
    yet written and a write over one still being read."""
    from kgen.driver import compile_kernel
    from kgen.ir.analysis import scratch_bytes
    from kgen.ir.core import walk

    ls = _spec("layernorm_bwd")
    variant = {"dtype": "bf16", "ROW": 1024}
    k = compile_kernel(ls, 0, variant, tiles, load_target("gfx942"))
    assert any(op.attrs.get("joins_next") for op in walk(k.body) if op.kind == "reduce" and scratch_bytes(op))
    _layernorm_bwd_matches(ls, variant, tiles, 13, seed=11)  # 13 rows: the last program part full
