// kgen's CUDA backend primitives (sm_80, sm_90a): types, thread indices, barriers, shuffles,
// math, atomics and the mma.sync wrapper. kgen_tile.h builds the tile operations on these.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define KG_DEVICE __device__ __forceinline__
#define KG_KERNEL extern "C" __global__

namespace kg {
typedef __nv_bfloat16 bf16;
typedef __half fp16;
constexpr int WAVE = 32;

KG_DEVICE int thread_id() { return threadIdx.x; }
KG_DEVICE int block_id_x() { return blockIdx.x; }
KG_DEVICE int block_id_y() { return blockIdx.y; }
KG_DEVICE int block_id_z() { return blockIdx.z; }
KG_DEVICE void sync() { __syncthreads(); }
// barrier `id` among `threads` threads, whole warps (PTX ISA, bar.sync; id 0 is __syncthreads')
KG_DEVICE void sync_named(int id, int threads) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory"); }
// arrive at barrier `id` without waiting (PTX ISA, bar.arrive): the `threads` count the syncing ones too
KG_DEVICE void arrive_named(int id, int threads) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory"); }
// a warpgroup's registers per thread moved to N (PTX ISA, setmaxnreg; sm_90a, every warp of the group)
template <int N> KG_DEVICE void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N> KG_DEVICE void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }
KG_DEVICE float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
KG_DEVICE int shfl_xor(int v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
KG_DEVICE long long shfl_xor(long long v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
// The 64-bit product of two 32-bit words, from the high and low halves' multiplies. Written as one
// 64-bit product, a chain of them (Philox's rounds, kgen_tile.h) had its words widened to 64 bits
// by LLVM's combining and multiplied with mul.lo.s64, several instructions each.
KG_DEVICE unsigned long long mul_wide_u32(uint32_t a, uint32_t b) {
  return (unsigned long long)__umulhi(a, b) << 32 | (a * b);
}

KG_DEVICE float float_of_bits(uint32_t u) { return __uint_as_float(u); }
KG_DEVICE float f32(bf16 x) { return __bfloat162float(x); }
KG_DEVICE float f32(fp16 x) { return __half2float(x); }
template <class T> KG_DEVICE T cvt(float x) { return (T)x; }
template <> KG_DEVICE bf16 cvt<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> KG_DEVICE fp16 cvt<fp16>(float x) { return __float2half_rn(x); }

// ex2.approx.ftz (PTX ISA, "ex2"): one MUFU.EX2. Without .ftz ptxas adds a range test and two
// multiplies to produce subnormal results; kgen flushes them to zero, as FlashAttention's
// --use_fast_math build does (results below 2^-126 only).
KG_DEVICE float exp2_(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
// exp(x) as exp2(x log2(e)), as Triton lowers tl.exp: a multiply and one MUFU.EX2 where expf's
// range reduction is several more instructions; the error adds the product's rounding (relative
// |x| 2^-24 in the exponent) to ex2.approx's own, far below bf16's 2^-8. The chunked scan's
// exp(cs_t - cs_s) runs once per element of every (rows x positions) tile.
KG_DEVICE float exp_(float x) { return exp2_(x * 1.4426950408889634f); }
KG_DEVICE float log_(float x) { return logf(x); }
KG_DEVICE float log2_(float x) { return log2f(x); }
KG_DEVICE float sqrt_(float x) { return sqrtf(x); }
KG_DEVICE float rsqrt_(float x) { return rsqrtf(x); }
KG_DEVICE float pow_(float a, float b) { return powf(a, b); }
// CUDA's own single-precision functions (2 ulp at most for tanhf and erff; CUDA C++ Programming
// Guide, "Mathematical Functions"; kgen compiles without --use_fast_math; sin and cos are in
// kgen_tile.h); sigmoid as 1 / (1 + exp(-x)) with exp_ above: 1 at large x (exp flushes to 0).
KG_DEVICE float sigmoid_(float x) { return 1.0f / (1.0f + exp_(-x)); }
KG_DEVICE float tanh_(float x) { return tanhf(x); }
KG_DEVICE float erf_(float x) { return erff(x); }
KG_DEVICE float floor_(float x) { return floorf(x); }
KG_DEVICE float ceil_(float x) { return ceilf(x); }
KG_DEVICE void atomic_add(float* p, float v) { atomicAdd(p, v); }
// N consecutive floats (8- or 16-byte aligned) added by one red.global.add.vN.f32 (PTX ISA, red:
// vector forms need .global and sm_90); the descriptor's global_fp32_atomic_vector allows N > 1
template <int N> KG_DEVICE void atomic_add_vec(float* p, const float* v);
template <> KG_DEVICE void atomic_add_vec<1>(float* p, const float* v) { atomicAdd(p, v[0]); }
template <> KG_DEVICE void atomic_add_vec<2>(float* p, const float* v) {
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(v[0]), "f"(v[1]) : "memory");
}
template <> KG_DEVICE void atomic_add_vec<4>(float* p, const float* v) {
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]) : "memory");
}
// max.NaN / min.NaN (PTX ISA, sm_80+): NaN if either operand is NaN, in one FMNMX
#define KG_HAS_NAN_MINMAX 1
KG_DEVICE float fmax_nan(float a, float b) { float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
KG_DEVICE float fmin_nan(float a, float b) { float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }

// mma.sync.m16n8k16, fp32 accumulate (PTX ISA, "Matrix Fragments for mma.m16n8k16"): A is 8
// 16-bit values per lane (4 registers), B is 4 (2 registers), C/D 4 floats; the element order
// in each array is the descriptor's register order (kgen/hw/data/sm_90.yaml).
// One name, overloaded on the element type (a kernel's source can then serve both).
#define KG_MMA_16816(NAME, T, PTXT)                                                                   \
  KG_DEVICE void NAME(float* d, const T* a, const T* b) {                                             \
    const uint32_t* A = reinterpret_cast<const uint32_t*>(a);                                         \
    const uint32_t* B = reinterpret_cast<const uint32_t*>(b);                                         \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTXT "." PTXT ".f32 "                       \
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                              \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                     \
                 : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));                 \
  }
KG_MMA_16816(mma_m16n8k16, bf16, "bf16")
KG_MMA_16816(mma_m16n8k16, fp16, "f16")

// ldmatrix (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): COUNT 8x8 matrices of
// 16-bit elements; lanes 8j..8j+7 give the shared addresses of matrix j's rows, and each lane
// receives one 32-bit register per matrix (row lane / 4, elements 2 * (lane % 4) and + 1; with
// .trans, of the transposed matrix).
KG_DEVICE uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
#define KG_LDMATRIX(NAME, SHAPE, OUTS, ...)                                                           \
  KG_DEVICE void NAME(void* dst, const void* src) {                                                 \
    uint32_t* r = reinterpret_cast<uint32_t*>(dst);                                                  \
    asm volatile("ldmatrix.sync.aligned.m8n8." SHAPE ".shared.b16 " OUTS ", [%" #__VA_ARGS__ "];"   \
                 : KG_LDMATRIX_OUT_##NAME : "r"(smem_addr(src)));                                   \
  }
#define KG_LDMATRIX_OUT_ldmatrix_x1 "=r"(r[0])
#define KG_LDMATRIX_OUT_ldmatrix_x2 "=r"(r[0]), "=r"(r[1])
#define KG_LDMATRIX_OUT_ldmatrix_x4 "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
#define KG_LDMATRIX_OUT_ldmatrix_x1_trans KG_LDMATRIX_OUT_ldmatrix_x1
#define KG_LDMATRIX_OUT_ldmatrix_x2_trans KG_LDMATRIX_OUT_ldmatrix_x2
#define KG_LDMATRIX_OUT_ldmatrix_x4_trans KG_LDMATRIX_OUT_ldmatrix_x4
KG_LDMATRIX(ldmatrix_x1, "x1", "{%0}", 1)
KG_LDMATRIX(ldmatrix_x2, "x2", "{%0,%1}", 2)
KG_LDMATRIX(ldmatrix_x4, "x4", "{%0,%1,%2,%3}", 4)
KG_LDMATRIX(ldmatrix_x1_trans, "x1.trans", "{%0}", 1)
KG_LDMATRIX(ldmatrix_x2_trans, "x2.trans", "{%0,%1}", 2)
KG_LDMATRIX(ldmatrix_x4_trans, "x4.trans", "{%0,%1,%2,%3}", 4)

// cp.async (PTX ISA, "cp.async"): BYTES from global to shared without registers; only SRC_BYTES
// are read and the rest of the destination is zero-filled. Groups complete in commit order;
// wait_group N returns when at most N of this thread's most recent groups are pending.
// A whole chunk takes the form without a source size, with the L2::128B prefetch hint: on the
// H200 the source-size form moved each thread's 16 bytes as its own L2 sector request and its own
// shared-memory wavefront (Nsight Compute, D=128 forward: 32 sectors and 32 wavefronts per
// instruction where 16 and 4 were ideal; docs/PERFORMANCE.md). Edge chunks keep the zero fill.
template <int BYTES> KG_DEVICE void cp_async(void* dst, const void* src, int src_bytes) {
  static_assert(BYTES == 16, "cp.async.cg copies 16 bytes");
  if (src_bytes == 16)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes) : "memory");
}
KG_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> KG_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// wgmma support (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"; sm_90a).
// A shared-memory matrix descriptor: start address, leading and stride byte offsets, each in
// 16-byte units, and the swizzle mode (0 none, 1 the 128-byte swizzle; kgen/codegen/wgmma.py
// says which offset is which).
KG_DEVICE uint64_t wgmma_desc(const void* p, int lead_bytes, int stride_bytes, int swizzle_mode) {
  return (uint64_t)((smem_addr(p) & 0x3FFFF) >> 4) | ((uint64_t)(lead_bytes >> 4) << 16) | ((uint64_t)(stride_bytes >> 4) << 32) |
         ((uint64_t)swizzle_mode << 62);
}
// A wgmma wrapper's accumulator operands (kgen/codegen/wgmma.py): the floats d[i] .. d[i + 3]
// (or .. d[i + 15]) read and written in place, in the order of the instruction's D registers.
#define KG_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define KG_D16(i) KG_D4(i), KG_D4(i + 4), KG_D4(i + 8), KG_D4(i + 12)
KG_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
KG_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> KG_DEVICE void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// ties an accumulator register to this point: nothing reads it before the wait above
KG_DEVICE void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
KG_DEVICE void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
// shared memory written by ordinary stores or cp.async, read next by wgmma (the async proxy)
KG_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Bulk reductions (PTX ISA, cp.reduce.async.bulk; PTX 8.0, sm_90): the copy engine adds `bytes`
// of fp32 from shared memory into global memory (both 16-byte aligned, bytes a multiple of 16).
// A thread's reductions form bulk groups; wait_read returns once its groups have read their
// shared source (the buffer may be rewritten), wait_all once they have completed.
KG_DEVICE void bulk_add_f32(float* dst, const float* src, int bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
               ::"l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
}
KG_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
KG_DEVICE void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
KG_DEVICE void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
KG_DEVICE void sync_warp() { __syncwarp(); }

// Tensor copies (PTX ISA, "cp.async.bulk.tensor" and "mbarrier"; sm_90). The host encodes each
// tensor map (kgen/runtime/_launcher.cpp); the kernel takes it as a __grid_constant__ parameter
// and passes its generic address. One thread arms a barrier with the bytes to expect
// (arrive.expect_tx, the barrier's one arrival) and issues the copies; the copy engine completes
// the transaction; every thread waits for that phase to complete.
struct alignas(128) TensorMap { unsigned long long opaque[16]; };  // CUtensorMap (cuda.h)
KG_DEVICE void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// the barriers' initialization visible to the copy engine before any copy signals them
KG_DEVICE void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
KG_DEVICE void mbar_expect_tx(uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
KG_DEVICE bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done != 0;
}
// returns once the phase of parity `parity` has completed (the barrier's phases alternate 0, 1)
KG_DEVICE void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  while (!mbar_try_wait(addr, parity)) {}
}
KG_DEVICE void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
#define KG_TMA_LOAD(N, COORDS, ...)                                                                   \
  KG_DEVICE void tma_load_##N##d(void* dst, const TensorMap* map, uint64_t* bar, __VA_ARGS__) {      \
    asm volatile("cp.async.bulk.tensor." #N "d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" \
                 " [%0], [%1, {" COORDS "}], [%2];"                                                   \
                 ::"r"(smem_addr(dst)), "l"(map), "r"(smem_addr(bar)), KG_TMA_COORDS_##N : "memory");  \
  }
#define KG_TMA_COORDS_1 "r"(c0)
#define KG_TMA_COORDS_2 "r"(c0), "r"(c1)
#define KG_TMA_COORDS_3 "r"(c0), "r"(c1), "r"(c2)
#define KG_TMA_COORDS_4 "r"(c0), "r"(c1), "r"(c2), "r"(c3)
#define KG_TMA_COORDS_5 "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
KG_TMA_LOAD(1, "%3", int c0)
KG_TMA_LOAD(2, "%3, %4", int c0, int c1)
KG_TMA_LOAD(3, "%3, %4, %5", int c0, int c1, int c2)
KG_TMA_LOAD(4, "%3, %4, %5, %6", int c0, int c1, int c2, int c3)
KG_TMA_LOAD(5, "%3, %4, %5, %6, %7", int c0, int c1, int c2, int c3, int c4)
}  // namespace kg
