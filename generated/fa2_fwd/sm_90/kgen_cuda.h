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
KG_DEVICE float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

KG_DEVICE float f32(bf16 x) { return __bfloat162float(x); }
KG_DEVICE float f32(fp16 x) { return __half2float(x); }
template <class T> KG_DEVICE T cvt(float x) { return (T)x; }
template <> KG_DEVICE bf16 cvt<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> KG_DEVICE fp16 cvt<fp16>(float x) { return __float2half_rn(x); }

KG_DEVICE float exp_(float x) { return expf(x); }
KG_DEVICE float exp2_(float x) { return exp2f(x); }
KG_DEVICE float log_(float x) { return logf(x); }
KG_DEVICE float log2_(float x) { return log2f(x); }
KG_DEVICE float sqrt_(float x) { return sqrtf(x); }
KG_DEVICE float rsqrt_(float x) { return rsqrtf(x); }
KG_DEVICE float pow_(float a, float b) { return powf(a, b); }
KG_DEVICE void atomic_add(float* p, float v) { atomicAdd(p, v); }

// mma.sync.m16n8k16, fp32 accumulate (PTX ISA, "Matrix Fragments for mma.m16n8k16"): A is 8
// 16-bit values per lane (4 registers), B is 4 (2 registers), C/D 4 floats; the element order
// in each array is the descriptor's register order (kgen/hw/data/sm_90.yaml).
#define KG_MMA_16816(NAME, T, PTXT)                                                                   \
  KG_DEVICE void NAME(float* d, const T* a, const T* b) {                                             \
    const uint32_t* A = reinterpret_cast<const uint32_t*>(a);                                         \
    const uint32_t* B = reinterpret_cast<const uint32_t*>(b);                                         \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTXT "." PTXT ".f32 "                       \
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                              \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                     \
                 : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));                 \
  }
KG_MMA_16816(mma_m16n8k16_bf16, bf16, "bf16")
KG_MMA_16816(mma_m16n8k16_fp16, fp16, "f16")
}  // namespace kg
