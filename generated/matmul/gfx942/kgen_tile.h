// kgen tile primitives shared by both backends. The backend header (kgen_cuda.h or kgen_hip.h)
// comes first and defines: KG_DEVICE, kg::bf16, kg::fp16, kg::f32(x), kg::cvt<T>(float),
// kg::block_id_{x,y,z}(), kg::thread_id(), kg::sync(), kg::shfl_xor(), the math functions and
// the matrix instruction wrappers. What follows is written once, in terms of those.
#pragma once

// Loops over a tile's registers, written `KG_UNROLL for (...)`: unrolled, so that every register
// index is a constant and the tile stays in registers rather than local memory.
#define KG_UNROLL _Pragma("unroll")

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
KG_DEVICE float abs_(float x) { return __builtin_fabsf(x); }
KG_DEVICE int abs_(int x) { return x < 0 ? -x : x; }

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
