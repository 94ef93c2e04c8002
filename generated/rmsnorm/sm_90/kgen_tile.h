// kgen tile primitives shared by both backends. The backend header (kgen_cuda.h or kgen_hip.h)
// comes first and defines: KG_DEVICE, kg::bf16, kg::fp16, kg::f32(x), kg::cvt<T>(float),
// kg::block_id_{x,y,z}(), kg::thread_id(), kg::sync(), kg::shfl_xor(), the math functions and
// the matrix instruction wrappers. What follows is written once, in terms of those.
#pragma once

// Loops over a tile's registers (`KG_FOR(e, 16) x[e] = ...;`), unrolled, so that every register
// index is a constant and the tile stays in registers rather than local memory. KG_FOR_STEP
// takes `s` registers at a time (one vector access).
#define KG_UNROLL _Pragma("unroll")
#define KG_FOR(i, n) KG_UNROLL for (int i = 0; i < (n); ++i)
#define KG_FOR_STEP(i, n, s) KG_UNROLL for (int i = 0; i < (n); i += (s))

// A tensor argument's strides in elements, of every dim but the last (which is contiguous):
// KG_STRIDES3(x) is `int64_t stride_x_0, int64_t stride_x_1, int64_t stride_x_2`.
#define KG_STRIDES1(t) int64_t stride_##t##_0
#define KG_STRIDES2(t) KG_STRIDES1(t), int64_t stride_##t##_1
#define KG_STRIDES3(t) KG_STRIDES2(t), int64_t stride_##t##_2
#define KG_STRIDES4(t) KG_STRIDES3(t), int64_t stride_##t##_3
#define KG_STRIDES5(t) KG_STRIDES4(t), int64_t stride_##t##_4
#define KG_STRIDES6(t) KG_STRIDES5(t), int64_t stride_##t##_5
#define KG_STRIDES7(t) KG_STRIDES6(t), int64_t stride_##t##_6
// Whether each of those strides is a multiple of m (a vector access then stays aligned):
// KG_STRIDES_MULTIPLE2(x, 4) is `stride_x_0 % 4 == 0 && stride_x_1 % 4 == 0`.
#define KG_STRIDES_MULTIPLE1(t, m) stride_##t##_0 % m == 0
#define KG_STRIDES_MULTIPLE2(t, m) KG_STRIDES_MULTIPLE1(t, m) && stride_##t##_1 % m == 0
#define KG_STRIDES_MULTIPLE3(t, m) KG_STRIDES_MULTIPLE2(t, m) && stride_##t##_2 % m == 0
#define KG_STRIDES_MULTIPLE4(t, m) KG_STRIDES_MULTIPLE3(t, m) && stride_##t##_3 % m == 0
#define KG_STRIDES_MULTIPLE5(t, m) KG_STRIDES_MULTIPLE4(t, m) && stride_##t##_4 % m == 0
#define KG_STRIDES_MULTIPLE6(t, m) KG_STRIDES_MULTIPLE5(t, m) && stride_##t##_5 % m == 0
#define KG_STRIDES_MULTIPLE7(t, m) KG_STRIDES_MULTIPLE6(t, m) && stride_##t##_6 % m == 0

namespace kg {

KG_DEVICE float inf() { return __builtin_huge_valf(); }
KG_DEVICE float nan() { return __builtin_nanf(""); }
KG_DEVICE float f32(float x) { return x; }
KG_DEVICE int f32(int x) { return x; }
KG_DEVICE bool f32(bool x) { return x; }

template <class T> KG_DEVICE T max_(T a, T b) { return a > b ? a : b; }
template <class T> KG_DEVICE T min_(T a, T b) { return a < b ? a : b; }
// NaN-propagating max/min for floats, as torch.maximum does: one instruction where the backend
// header has it (KG_HAS_NAN_MINMAX, defining fmax_nan / fmin_nan), else a select
#ifdef KG_HAS_NAN_MINMAX
KG_DEVICE float max_(float a, float b) { return fmax_nan(a, b); }
KG_DEVICE float min_(float a, float b) { return fmin_nan(a, b); }
#else
KG_DEVICE float max_(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
KG_DEVICE float min_(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
#endif
KG_DEVICE int cdiv(int a, int b) { return (a + b - 1) / b; }
KG_DEVICE int floordiv(int a, int b) { int q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
KG_DEVICE int mod(int a, int b) { int r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
// int64 tiles stay 64-bit (kgen spells int64 `long long` on both backends)
KG_DEVICE long long floordiv(long long a, long long b) { long long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
KG_DEVICE long long mod(long long a, long long b) { long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
KG_DEVICE float abs_(float x) { return __builtin_fabsf(x); }
KG_DEVICE int abs_(int x) { return x < 0 ? -x : x; }
KG_DEVICE long long abs_(long long x) { return x < 0 ? -x : x; }

// sin and cos: x reduced by the nearest multiple k of pi / 2 (pi / 2 split into three floats,
// the first two with trailing zero bits, so that k times each is exact for |k| < 2^16: Cody and
// Waite's reduction), then the Taylor series of sin (to r^11) and cos (to r^12) on |r| <= pi / 4
// (truncation below 2^-30) and the quadrant k mod 4. At most 2.2 ulp from sin and cos for |x| <=
// 1000 in a float32 model of these steps; beyond that the reduction loses bits (120 ulp at
// 10^4). Both backends: CUDA's sinf and cosf need a stack frame for their large-argument path,
// and no AMDGPU device library is linked.
KG_DEVICE float reduce_half_pi_(float x, int& quadrant) {
  const float k = __builtin_rintf(x * 0.6366197723675814f);
  quadrant = (int)k & 3;
  return ((x - k * 1.5703125f) - k * 4.837512969970703125e-4f) - k * 7.54978995489188216e-8f;
}
KG_DEVICE float sin_poly_(float r) {
  const float z = r * r;
  float p = -2.505210838544172e-08f;
  p = p * z + 2.7557319223985893e-06f;
  p = p * z - 0.0001984126984126984f;
  p = p * z + 0.008333333333333333f;
  p = p * z - 0.16666666666666666f;
  return r + r * z * p;
}
KG_DEVICE float cos_poly_(float r) {
  const float z = r * r;
  float p = 2.08767569878681e-09f;
  p = p * z - 2.755731922398589e-07f;
  p = p * z + 2.48015873015873e-05f;
  p = p * z - 0.001388888888888889f;
  p = p * z + 0.041666666666666664f;
  p = p * z - 0.5f;
  return 1.0f + z * p;
}
KG_DEVICE float sin_(float x) {
  int q;
  const float r = reduce_half_pi_(x, q);
  const float v = (q & 1) ? cos_poly_(r) : sin_poly_(r);
  return (q & 2) ? -v : v;
}
KG_DEVICE float cos_(float x) {
  int q;
  const float r = reduce_half_pi_(x, q);
  const float v = (q & 1) ? sin_poly_(r) : cos_poly_(r);
  return ((q + 1) & 2) ? -v : v;
}

// rand(seed, offset): Philox4x32-10 (Salmon et al., SC 2011) keyed by the seed's 64 bits, its
// counter the offset's 64 bits shifted right by two (unsigned) and two zero words; word
// offset % 4's top 24 bits as a float on [0, 1). rand8: byte offset % 16 of the call at counter
// offset >> 4 (bits 8(b % 4) .. 8(b % 4) + 7 of word b / 4) in steps of 2^-8.
// kgen/ir/philox.py computes the same bits for the interpreter and the references. The
// 32 x 32 -> 64-bit products are one wide multiply each (mul_wide_u32: mul.wide.u32,
// v_mad_u64_u32). A tile's registers whose counters are provably equal share one call
// (kgen/codegen/rand_draw.py); otherwise a RandMemo keeps the last call's four words and its
// registers, drawn in order, call Philox once for neighbours that share a counter (the memo's test
// is per thread; its words are selected, not indexed, so they stay in registers).
// b / 256 for a byte b, exactly: 1 + b / 256 built in a float's mantissa, less 1 (shifts and
// an add, where a conversion instruction runs at a quarter of the float rate or less: CUDA C++
// Programming Guide, "Arithmetic Instructions", throughput table).
KG_DEVICE float byte_unit(unsigned int b) { return float_of_bits(0x3F800000u | (b << 15)) - 1.0f; }
struct Philox4 {
  unsigned int w0, w1, w2, w3;
  KG_DEVICE float word(int i) const {
    const unsigned int w = (i & 2) ? ((i & 1) ? w3 : w2) : ((i & 1) ? w1 : w0);
    return (float)(w >> 8) * 5.9604644775390625e-08f;  // 2^-24
  }
  // the byte is shifted out of the 64-bit half that holds it (with a select of one of four
  // words, the dropout backward's 64-key form needed registers it did not have)
  KG_DEVICE float byte(int i) const {
    const unsigned long long half = (i & 8) ? ((unsigned long long)w3 << 32 | w2) : ((unsigned long long)w1 << 32 | w0);
    return byte_unit((unsigned int)(half >> ((i & 7) * 8)) & 0xFFu);
  }
};
KG_DEVICE Philox4 philox4(long long seed, unsigned long long c) {
  unsigned int c0 = (unsigned int)c, c1 = (unsigned int)(c >> 32), c2 = 0u, c3 = 0u;
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)((unsigned long long)seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    const unsigned long long p0 = mul_wide_u32(0xD2511F53u, c0), p1 = mul_wide_u32(0xCD9E8D57u, c2);
    unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
    c1 = (unsigned int)p1; c3 = (unsigned int)p0; c0 = n0; c2 = n2;
  }
  return Philox4{c0, c1, c2, c3};
}
struct RandMemo {
  unsigned long long counter = ~0ull;  // no call yet: offset >> 2 (or >> 4) never reaches it
  long long key = 0;
  Philox4 w{0u, 0u, 0u, 0u};
  KG_DEVICE void call(long long seed, unsigned long long c) {
    if (c != counter || seed != key) { w = philox4(seed, c); counter = c; key = seed; }
  }
  KG_DEVICE float uniform(long long seed, long long offset) {
    call(seed, (unsigned long long)offset >> 2);
    return w.word((int)(offset & 3));
  }
  // a memo serves one of rand and rand8 (the counters differ)
  KG_DEVICE float uniform8(long long seed, long long offset) {
    call(seed, (unsigned long long)offset >> 4);
    return w.byte((int)(offset & 15));
  }
};
KG_DEVICE float rand_(long long seed, long long offset) {
  RandMemo m;
  return m.uniform(seed, offset);
}
KG_DEVICE float rand8_(long long seed, long long offset) {
  RandMemo m;
  return m.uniform8(seed, offset);
}
template <class T> KG_DEVICE bool aligned(const T* p, int bytes) {
  return (reinterpret_cast<unsigned long long>(p) & (unsigned long long)(bytes - 1)) == 0;
}

// One element read only when p holds (a load prefetched for a loop iteration that may not
// exist: its address may lie outside the tensor), else `other`.
template <class T, class U> KG_DEVICE T load_if(bool p, const T* a, U other) { return p ? *a : static_cast<T>(other); }

// Copy N elements of T as one access of N * sizeof(T) bytes (both pointers suitably aligned).
template <int BYTES> struct word;
template <> struct word<1> { typedef unsigned char t; };
template <> struct word<2> { typedef unsigned short t; };
template <> struct word<4> { typedef unsigned int t; };
template <> struct word<8> { typedef unsigned long long t; };
struct alignas(16) u128 { unsigned long long lo, hi; };
template <> struct word<16> { typedef u128 t; };
template <> struct word<32> { struct alignas(16) t { u128 a, b; }; };

template <int N, class T> KG_DEVICE void copy_vec(T* dst, const T* src) {
  typedef typename word<N * sizeof(T)>::t W;
  *reinterpret_cast<W*>(dst) = *reinterpret_cast<const W*>(src);
}

}  // namespace kg
