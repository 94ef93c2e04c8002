"""The report parsers, on short samples captured from nvcc 13.0, clang 19, llvm-readelf-19,
llvm-objdump-19, cuobjdump and nvdisasm 13. No compiler is needed."""
from __future__ import annotations

import json
from pathlib import Path

from kgen.errors import SourceLoc
from kgen.toolchain import KernelResources, spec_location_for
from kgen.toolchain.cuda import ptx_line_to_source
from kgen.toolchain.hip import amd_kernel_resources
from kgen.toolchain.resources import (
    compile_error, first_error, parse_amdgpu_disasm, parse_amdgpu_metadata, parse_ptxas_info,
    parse_ptx_matrix, parse_resource_remarks, parse_sass)

# nvcc -cubin -Xptxas -v --resource-usage, sm_80: a __constant__, a kernel with a local array, a
# __noinline__ device function (no "entry"), a template kernel (mangled), plus a spilling kernel
# built with -maxrregcount=24 for sm_90a.
PTXAS = """\
ptxas info    : 0 bytes gmem, 64 bytes cmem[3]
ptxas info    : Compiling entry function 'usecst' for 'sm_80'
ptxas info    : Function properties for usecst
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 2.453 ms
ptxas info    : Compiling entry function 'tile' for 'sm_80'
ptxas info    : Function properties for tile
    1024 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes cumulative stack size, 512 bytes smem, 364 bytes cmem[0]
ptxas info    : Function properties for _Z6helperPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z2tkILi4EEvPf' for 'sm_80'
ptxas info    : Function properties for _Z2tkILi4EEvPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Overriding maximum register limit 256 for 'spill' with  24 of maxrregcount option
ptxas info    : Compiling entry function 'spill' for 'sm_90a'
ptxas info    : Function properties for spill
    1896 bytes stack frame, 2844 bytes spill stores, 2904 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 1896 bytes cumulative stack size
"""  # noqa: E501


def test_ptxas_info():
    res = parse_ptxas_info(PTXAS)
    assert sorted(res) == ["_Z2tkILi4EEvPf", "spill", "tile", "usecst"]  # no device function
    assert res["usecst"] == KernelResources(name="usecst", registers=8)
    tile = res["tile"]
    assert (tile.registers, tile.shared_bytes, tile.stack_bytes, tile.spill_bytes) == \
        (40, 512, 1024, 0)
    spill = res["spill"]
    assert (spill.registers, spill.stack_bytes, spill.spill_bytes) == (24, 1896, 2844 + 2904)
    assert spill.occupancy is None and spill.disasm_tool is None
    assert all(r.mma_notes == () for r in res.values())


# ptxas 13.0 on a wgmma kernel whose accumulator was zeroed between the instructions of a dot
PTXAS_MMA = """\
ptxas info    : Compiling entry function 'fwd' for 'sm_90a'
ptxas info    : Function properties for fwd
ptxas info    : (C7519) warpgroup.arrive is injected in around line 5269 by compiler to allow use of registers in GMMA in function 'fwd'
ptxas info    : (C7517) warpgroup.wait is injected in around line 5269 by compiler to allow use of registers defined by GMMA in function 'fwd'
ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in the function 'fwd'
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 249 registers, used 1 barriers
ptxas info    : Compiling entry function 'other' for 'sm_90a'
ptxas info    : Function properties for other
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
"""  # noqa: E501


def test_ptxas_wgmma_notes_are_kept_per_kernel():
    res = parse_ptxas_info(PTXAS_MMA)
    assert res["fwd"].mma_notes == ("C7515", "C7517", "C7519") and res["fwd"].registers == 249
    assert res["other"].mma_notes == ()


# llvm-readelf-19 --notes on a gfx942 code object (one kernel; .args trimmed to two entries).
READELF = """\
Displaying notes found in: .note
  Owner                Data size 	Description
  AMDGPU               0x00000299	NT_AMDGPU_METADATA (AMDGPU Metadata)
    AMDGPU Metadata:
        ---
amdhsa.kernels:
  - .agpr_count:     16
    .args:
      - .actual_access:  read_only
        .address_space:  global
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
      - .actual_access:  write_only
        .address_space:  global
        .offset:         16
        .size:           8
        .value_kind:     global_buffer
    .group_segment_fixed_size: 512
    .kernarg_segment_align: 8
    .kernarg_segment_size: 24
    .max_flat_workgroup_size: 64
    .name:           mfma_tile
    .private_segment_fixed_size: 0
    .sgpr_count:     14
    .sgpr_spill_count: 0
    .symbol:         mfma_tile.kd
    .uniform_work_group_size: 1
    .uses_dynamic_stack: false
    .vgpr_count:     24
    .vgpr_spill_count: 0
    .wavefront_size: 64
  - .agpr_count:     0
    .args:
      - .address_space:  global
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
    .group_segment_fixed_size: 0
    .max_flat_workgroup_size: 1024
    .name:           spilly
    .private_segment_fixed_size: 1040
    .sgpr_count:     40
    .vgpr_count:     22
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx942
amdhsa.version:
  - 1
  - 2
...
"""

# clang++-19 -Rpass-analysis=kernel-resource-usage, on stderr of the same compile (carets kept).
REMARKS = """\
k.hip:6:1: remark: Function Name: mfma_tile [-Rpass-analysis=kernel-resource-usage]
    6 | void mfma_tile(const bf16x4* __restrict__ a, const bf16x4* __restrict__ b) {
      | ^
k.hip:6:1: remark:     SGPRs: 14 [-Rpass-analysis=kernel-resource-usage]
k.hip:6:1: remark:     VGPRs: 6 [-Rpass-analysis=kernel-resource-usage]
k.hip:6:1: remark:     AGPRs: 16 [-Rpass-analysis=kernel-resource-usage]
k.hip:6:1: remark:     ScratchSize [bytes/lane]: 0 [-Rpass-analysis=kernel-resource-usage]
k.hip:6:1: remark:     Dynamic Stack: False [-Rpass-analysis=kernel-resource-usage]
k.hip:6:1: remark:     Occupancy [waves/SIMD]: 8 [-Rpass-analysis=kernel-resource-usage]
k.hip:6:1: remark:     SGPRs Spill: 0 [-Rpass-analysis=kernel-resource-usage]
k.hip:6:1: remark:     VGPRs Spill: 0 [-Rpass-analysis=kernel-resource-usage]
k.hip:6:1: remark:     LDS Size [bytes/block]: 512 [-Rpass-analysis=kernel-resource-usage]
"""


def test_amdgpu_metadata():
    kernels = parse_amdgpu_metadata(READELF)
    assert [k["name"] for k in kernels] == ["mfma_tile", "spilly"]
    first = kernels[0]
    # The kernel's own keys, not those of its .args entries (.size, .offset stay out).
    assert first["agpr_count"] == "16" and first["vgpr_count"] == "24"
    assert first["group_segment_fixed_size"] == "512" and "size" not in first
    assert kernels[1]["private_segment_fixed_size"] == "1040"


def test_resource_remarks():
    remarks = parse_resource_remarks(REMARKS)
    assert list(remarks) == ["mfma_tile"]
    assert remarks["mfma_tile"]["VGPRs"] == "6"
    assert remarks["mfma_tile"]["Occupancy [waves/SIMD]"] == "8"
    assert remarks["mfma_tile"]["Dynamic Stack"] == "False"


def test_amd_merge_prefers_remark_vgprs():
    res = amd_kernel_resources(parse_amdgpu_metadata(READELF), parse_resource_remarks(REMARKS))
    tile = res["mfma_tile"]
    # .vgpr_count 24 is the unified total (6 rounded to 8, plus 16 AGPRs): arch VGPRs are 6.
    assert (tile.registers, tile.agprs, tile.sgprs) == (6, 16, 14)
    assert (tile.shared_bytes, tile.spill_bytes, tile.occupancy) == (512, 0, 8)
    assert (tile.wavefront_size, tile.max_workgroup_size) == (64, 64)
    spilly = res["spilly"]  # no remark: VGPRs from the metadata, occupancy unknown
    assert (spilly.registers, spilly.spill_bytes, spilly.occupancy) == (22, 1040, None)


def test_amd_remarks_alone():
    """Without llvm-readelf the remarks still give every number."""
    tile = amd_kernel_resources([], parse_resource_remarks(REMARKS))["mfma_tile"]
    assert (tile.registers, tile.agprs, tile.sgprs, tile.shared_bytes, tile.occupancy) == \
        (6, 16, 14, 512, 8)


OBJDUMP = """\
k.hsaco:	file format elf64-amdgpu

Disassembly of section .text:

0000000000001700 <mfma_tile>:
	ds_read_b64 v[4:5], v1                                     // 000000001740: D8EC0000 04000001
	s_waitcnt vmcnt(0) lgkmcnt(0)                              // 000000001748: BF8C0070
	v_mfma_f32_32x32x8_bf16 a[0:15], v[4:5], v[2:3], 0         // 00000000174C: D3E08000 02020504
	v_mfma_f32_32x32x8_bf16 a[0:15], v[6:7], v[2:3], a[0:15]   // 000000001754: D3E08000 04020506
	s_endpgm                                                   // 00000000177C: BF810000

0000000000001800 <plain>:
	s_endpgm                                                   // 000000001800: BF810000
"""


def test_amdgpu_disasm():
    assert parse_amdgpu_disasm(OBJDUMP) == {"mfma_tile": ("v_mfma_f32_32x32x8_bf16",),
                                            "plain": ()}


CUOBJDUMP = """\

	code for sm_90a
	.target	sm_90a

		Function : mma_tile
	.headerflags	@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                   /* 0x00000a00ff017b82 */
                                                                            /* 0x000fe20000000800 */
        /*01a0*/                   HMMA.16816.F32.BF16 R12, R12, R16, RZ ;  /* 0x000000100c0c723c */
                                                                            /* 0x004fde00000418ff */
        /*01b0*/              @P0  HMMA.16816.F32.BF16 R12, R12, R16, R12 ;  /* 0x000000100c0c723c */
		Function : wgmma_tile
        /*0340*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
        /*0350*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
"""

NVDISASM = """\
//--------------------- .text.mma_tile            --------------------------
	.section	.text.mma_tile,"ax",@progbits
	.align	128
        .global         mma_tile
        .type           mma_tile,@function
mma_tile:
.text.mma_tile:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*01a0*/                   HMMA.16816.F32.BF16 R12, R12, R16, RZ ;
"""


def test_sass():
    assert parse_sass(CUOBJDUMP) == {"mma_tile": ("HMMA.16816.F32.BF16",),
                                     "wgmma_tile": ("HGMMA.64x128x16.F32.BF16",)}
    assert parse_sass(NVDISASM) == {"mma_tile": ("HMMA.16816.F32.BF16",)}


PTX_ENTRIES = """\
.version 9.0
.target sm_90a
.visible .entry mma_tile(
	.param .u64 mma_tile_param_0
)
{
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f5, %f6, %f7, %f8};
	@%p1 mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f5, %f6, %f7, %f8};
}
.visible .entry wgmma_tile(
	.param .u64 wgmma_tile_param_0
)
{
	wgmma.fence.sync.aligned;
	wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f1}, %rd1, %rd2, p, 1, 1, 0, 1;
	wgmma.commit_group.sync.aligned;
}
.visible .entry copy(
)
{
	ld.global.f32 %f1, [%rd1];
}
"""


def test_ptx_matrix_instructions():
    """The matrix instructions of each entry of a PTX text, fences and waits left out."""
    assert parse_ptx_matrix(PTX_ENTRIES) == {
        "mma_tile": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",),
        "wgmma_tile": ("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",),
        "copy": ()}


def test_as_dict_is_json():
    res = KernelResources(name="k", registers=4, matrix_instrs=("HMMA.16816.F32.BF16",),
                          disasm_tool="cuobjdump")
    d = json.loads(json.dumps(res.as_dict()))
    assert d["matrix_instrs"] == ["HMMA.16816.F32.BF16"] and d["occupancy"] is None


# ------------------------------------------------------------------------- errors and spec lines

GENERATED = """\
// generated by kgen
#include "kgen_common.h"
// spec: specs/matmul.yaml:12:3
void prologue();
  // spec: specs/matmul.yaml:20:5
void body();
"""


def test_spec_location_for():
    assert spec_location_for(GENERATED, 1) is None
    assert spec_location_for(GENERATED, 2) is None
    assert spec_location_for(GENERATED, 3) == "specs/matmul.yaml:12:3"  # at the line itself
    assert spec_location_for(GENERATED, 4) == "specs/matmul.yaml:12:3"
    assert spec_location_for(GENERATED, 6) == "specs/matmul.yaml:20:5"  # the nearest above
    assert spec_location_for(GENERATED, 99) == "specs/matmul.yaml:20:5"
    assert spec_location_for("// spec: not a location\nx\n", 2) is None


def test_spec_location_in_the_kernels_own_spec():
    """A comment without a file is a position in the spec the kernel's first line names."""
    source = ("// Generated by kgen 0.1.0 from specs/my op.yaml (kernel 'k', target sm_90).\n"
              "// spec: 7:3\nint x;\n  // spec: other.yaml:2:5\nint y;\n")
    assert spec_location_for(source, 3) == "specs/my op.yaml:7:3"
    assert spec_location_for(source, 5) == "other.yaml:2:5"
    assert spec_location_for("// spec: 7:3\nint x;\n", 2) is None  # no first line to name the file


def test_first_error_formats():
    clang = first_error("k.hip:3:16: warning: unused\nk.hip:4:2: error: expected ';'\n")
    assert (clang.text, clang.file, clang.line, clang.ptx) == \
        ("k.hip:4:2: error: expected ';'", "k.hip", 4, False)
    nvcc = first_error('k.cu(4): warning #177-D: unused\nk.cu(7): error: expected a ";"\n')
    assert (nvcc.file, nvcc.line) == ("k.cu", 7)
    nvcc20 = first_error('k.cu(9): error #20: identifier "x" is undefined\n')
    assert (nvcc20.file, nvcc20.line) == ("k.cu", 9)
    ptxas = first_error("ptxas /tmp/tmpxft_1-6_k.ptx, line 29; error   : Unknown modifier\n")
    assert (ptxas.file, ptxas.line, ptxas.ptx) == ("/tmp/tmpxft_1-6_k.ptx", 29, True)
    linker = first_error("clang++-19: error: unable to execute command: ld.lld not found\n")
    assert linker.text.startswith("clang++-19: error") and linker.file is None
    assert first_error("").text == "the compiler failed without a message"


PTX = """\
.visible .entry bad(
	.param .u64 bad_param_0
)
{
	.loc	1 1 0
	ld.param.u64 	%rd1, [bad_param_0];
	.loc	1 2 3
	cvta.to.global.u64 	%rd2, %rd1;
	// begin inline asm
	mma.bogus.f32 %f1;
	// end inline asm
}
	.file	1 "/gen/kernel.cu"
"""


def test_ptx_line_to_source():
    assert ptx_line_to_source(PTX, 10) == ("/gen/kernel.cu", 2)
    assert ptx_line_to_source(PTX, 2) is None  # above the first .loc


def test_compile_error_message(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "op.yaml").write_text("name: op\nop: matmul\n  tile: [64, 64]\n")
    source = tmp_path / "gen" / "kernel.hip"
    source.parent.mkdir()
    source.write_text("// spec: specs/op.yaml:3:3\nint x = ;\n")
    exc = compile_error("gen/kernel.hip:2:9: error: expected expression\n1 error generated.\n",
                        source, tmp_path)
    assert exc.message == ("gen/kernel.hip:2:9: error: expected expression\n"
                           "  generated source gen/kernel.hip:2: int x = ;\n"
                           "  from spec specs/op.yaml:3:3: tile: [64, 64]")
    assert exc.where == SourceLoc("specs/op.yaml", 3, 3)
    assert str(exc).startswith("gen/kernel.hip:2:9: error")  # the compiler's line comes first
    # A spec file that is not there: the location alone.
    source.write_text("// spec: gone.yaml:1:1\nint x = ;\n")
    exc = compile_error("gen/kernel.hip:2:9: error: expected expression\n", source, tmp_path)
    assert exc.message.splitlines()[-1] == "  from spec gone.yaml:1:1"
    # An error outside the generated source (a header): its line, but no spec lookup.
    (tmp_path / "gen" / "common.h").write_text("#pragma once\nbroken\n")
    exc = compile_error("gen/common.h:2:1: error: unknown type name 'broken'\n", source, tmp_path)
    assert exc.message.splitlines()[1:] == ["  generated source gen/common.h:2: broken"]
    assert exc.where is None


def test_compile_error_without_location():
    exc = compile_error("nvcc fatal   : Unsupported gpu architecture 'compute_10'\n",
                        Path("/nonexistent/k.cu"), Path("/"))
    assert exc.message == "nvcc fatal   : Unsupported gpu architecture 'compute_10'"
