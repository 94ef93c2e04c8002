// kgen's HIP backend primitives (gfx942, gfx90a), self-contained: no HIP headers, only clang's
// attributes and __builtin_amdgcn_* builtins, so that Debian's clang-19 compiles it without
// ROCm's device libraries (see docs/ARCHITECTURE.md, "Toolchains"). kgen_tile.h builds the
// tile operations on these.
#pragma once

// (kgen/emulate compiles the same source for the host CPU with its own definitions of these)
#ifndef KG_DEVICE
#define KG_DEVICE __attribute__((device)) __attribute__((always_inline)) inline
#define KG_KERNEL extern "C" __attribute__((global))
#define KG_SHARED __attribute__((shared))
#endif

typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
typedef long long int64_t;

namespace kg {
// bf16 is kept as its bits: Debian's HIP headers predate a usable device bf16 type.
struct bf16 { uint16_t bits; };
typedef _Float16 fp16;
constexpr int WAVE = 64;

KG_DEVICE int thread_id() { return __builtin_amdgcn_workitem_id_x(); }
KG_DEVICE int block_id_x() { return __builtin_amdgcn_workgroup_id_x(); }
KG_DEVICE int block_id_y() { return __builtin_amdgcn_workgroup_id_y(); }
KG_DEVICE int block_id_z() { return __builtin_amdgcn_workgroup_id_z(); }
// a workgroup barrier that also orders LDS and global accesses, as HIP's __syncthreads does
KG_DEVICE void sync() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
KG_DEVICE int shfl_xor(int v, int mask) {
  const int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
  return __builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, v);
}
KG_DEVICE float shfl_xor(float v, int mask) { return __builtin_bit_cast(float, shfl_xor(__builtin_bit_cast(int, v), mask)); }
// ds_bpermute moves 32 bits: an int64 goes as its two halves
KG_DEVICE long long shfl_xor(long long v, int mask) {
  const unsigned long long lo = (unsigned)shfl_xor((int)v, mask), hi = (unsigned)shfl_xor((int)(v >> 32), mask);
  return (long long)(hi << 32 | lo);
}
// The 64-bit product of two 32-bit words (one v_mad_u64_u32 on gfx9).
KG_DEVICE unsigned long long mul_wide_u32(uint32_t a, uint32_t b) { return (unsigned long long)a * b; }

KG_DEVICE float float_of_bits(uint32_t u) { return __builtin_bit_cast(float, u); }
KG_DEVICE float f32(bf16 x) { return __builtin_bit_cast(float, (uint32_t)x.bits << 16); }
KG_DEVICE float f32(fp16 x) { return (float)x; }
template <class T> KG_DEVICE T cvt(float x) { return (T)x; }
// round to nearest even; NaN stays a (quiet) NaN
template <> KG_DEVICE bf16 cvt<bf16>(float x) {
  uint32_t u = __builtin_bit_cast(uint32_t, x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{(uint16_t)((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{(uint16_t)(u >> 16)};
}
template <> KG_DEVICE fp16 cvt<fp16>(float x) { return (fp16)x; }

KG_DEVICE float exp_(float x) { return __builtin_expf(x); }
KG_DEVICE float exp2_(float x) { return __builtin_exp2f(x); }
KG_DEVICE float log_(float x) { return __builtin_logf(x); }
KG_DEVICE float log2_(float x) { return __builtin_log2f(x); }
KG_DEVICE float sqrt_(float x) { return __builtin_sqrtf(x); }
KG_DEVICE float rsqrt_(float x) { return 1.0f / __builtin_sqrtf(x); }
// No device library is linked (-nogpulib): floor and ceil are the instructions LLVM lowers its
// intrinsics to (V_FLOOR_F32, V_CEIL_F32); sigmoid, tanh and erf are built from exp (sin and cos
// are in kgen_tile.h).
KG_DEVICE float floor_(float x) { return __builtin_floorf(x); }
KG_DEVICE float ceil_(float x) { return __builtin_ceilf(x); }
KG_DEVICE float sigmoid_(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }
// tanh: below |x| = 0.625 its odd Taylor series to x^21 (coefficients 2^2n (2^2n - 1) B_2n / (2n)!,
// truncation below 2^-27 relative), above it 1 - 2 / (exp(2|x|) + 1) with x's sign; at most 1.5
// ulp from tanh in a float32 model of these steps (tests/codegen/test_math.py).
KG_DEVICE float tanh_(float x) {
  const float a = __builtin_fabsf(x);
  if (a < 0.625f) {
    const float z = x * x;
    float p = 9.691537956929451e-05f;
    p = p * z - 0.00023912911424355248f;
    p = p * z + 0.000590027440945586f;
    p = p * z - 0.0014558343870513183f;
    p = p * z + 0.003592128036572481f;
    p = p * z - 0.008863235529902197f;
    p = p * z + 0.021869488536155203f;
    p = p * z - 0.05396825396825397f;
    p = p * z + 0.13333333333333333f;
    p = p * z - 0.3333333333333333f;
    return x * (p * z + 1.0f);
  }
  const float r = 1.0f - 2.0f / (__builtin_expf(2.0f * a) + 1.0f);
  return x < 0.0f ? -r : r;
}
// erf: below |x| = 1 its Maclaurin series to x^21 (2 / sqrt(pi) (-1)^n / (n! (2n + 1))), above it
// 1 - t (a1 + ... + a5 t^4) exp(-x^2), t = 1 / (1 + p |x|) (Abramowitz and Stegun 7.1.26, absolute
// error 1.5e-7), with x's sign; at most 3 ulp in a float32 model (tests/codegen/test_math.py).
KG_DEVICE float erf_(float x) {
  const float a = __builtin_fabsf(x);
  if (a < 1.0f) {
    const float z = x * x;
    float p = 1.4807192815879218e-08f;
    p = p * z - 1.6365844691234924e-07f;
    p = p * z + 1.6462114365889246e-06f;
    p = p * z - 1.492565035840625e-05f;
    p = p * z + 0.00012055332981789664f;
    p = p * z - 0.0008548327023450852f;
    p = p * z + 0.005223977625442188f;
    p = p * z - 0.026866170645131252f;
    p = p * z + 0.11283791670955126f;
    p = p * z - 0.37612638903183754f;
    return x * (p * z + 1.1283791670955126f);
  }
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float r = 1.0f - p * t * __builtin_expf(-a * a);
  return x < 0.0f ? -r : r;
}
// a ** b as exp2(b * log2 |a|), with C's powf rules for the rest: a negative base takes an
// integer exponent (odd ones keep the sign; any other exponent gives NaN), and 0 ** 0 is 1
KG_DEVICE float pow_(float a, float b) {
  if (b == 0.0f) return 1.0f;
  const float r = __builtin_exp2f(b * __builtin_log2f(__builtin_fabsf(a)));
  if (a >= 0.0f || a != a) return r;
  if (__builtin_truncf(b) != b) return __builtin_nanf("");
  return __builtin_fmodf(b, 2.0f) != 0.0f ? -r : r;
}
KG_DEVICE void atomic_add(float* p, float v) {
  __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
// no vector fp32 atomics on CDNA (the descriptors say global_fp32_atomic_vector: 1)
template <int N> KG_DEVICE void atomic_add_vec(float* p, const float* v) {
  for (int i = 0; i < N; ++i) atomic_add(p + i, v[i]);
}

// MFMA wrappers (CDNA3 ISA, "Matrix fused multiply-add"): each lane passes 4 16-bit values of A
// and of B, in the descriptor's register order (kgen/hw/data/gfx942.yaml), and its C registers.
// One name per shape, overloaded on the element type (a kernel's source can then serve both).
typedef short short4_ __attribute__((ext_vector_type(4)));
typedef _Float16 half4_ __attribute__((ext_vector_type(4)));
typedef float float16_ __attribute__((ext_vector_type(16)));
typedef float float4_ __attribute__((ext_vector_type(4)));

#define KG_MFMA(NAME, T, VT, ACC, N, BUILTIN)                                        \
  KG_DEVICE void NAME(float* d, const T* a, const T* b) {                          \
    ACC c;                                                                         \
    for (int i = 0; i < N; ++i) c[i] = d[i];                                       \
    c = BUILTIN(*reinterpret_cast<const VT*>(a), *reinterpret_cast<const VT*>(b), c, 0, 0, 0); \
    for (int i = 0; i < N; ++i) d[i] = c[i];                                       \
  }
KG_MFMA(mfma_32x32x8, bf16, short4_, float16_, 16, __builtin_amdgcn_mfma_f32_32x32x8bf16_1k)
KG_MFMA(mfma_16x16x16, bf16, short4_, float4_, 4, __builtin_amdgcn_mfma_f32_16x16x16bf16_1k)
KG_MFMA(mfma_32x32x8, fp16, half4_, float16_, 16, __builtin_amdgcn_mfma_f32_32x32x8f16)
KG_MFMA(mfma_16x16x16, fp16, half4_, float4_, 4, __builtin_amdgcn_mfma_f32_16x16x16f16)
}  // namespace kg
