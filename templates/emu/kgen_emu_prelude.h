// What the host C++ compile of a kgen HIP source sees in place of the GPU: the attributes as
// host C++, the builtins as calls into the emulation runtime (kgen_emu_rt.cpp).
#pragma once
#define KG_DEVICE __attribute__((always_inline)) inline  // as on the GPU: an error names the kernel line
#define KG_KERNEL extern "C"
// LDS: static arrays in one section, whose bounds the memory checks read (kgen_emu_memcheck.cpp);
// `used`, so that the optimizer takes their contents as unknown, as LDS is on the GPU
#define KG_SHARED static __attribute__((section("kgemu_lds"), used))
#define __HIP_MEMORY_SCOPE_AGENT 3
// the kernel attribute that bounds the workgroup size, empty on the host
#define amdgpu_flat_work_group_size(lo, hi)
int __builtin_amdgcn_workitem_id_x();
int __builtin_amdgcn_workgroup_id_x();
int __builtin_amdgcn_workgroup_id_y();
int __builtin_amdgcn_workgroup_id_z();
void __builtin_amdgcn_s_barrier();
unsigned __builtin_amdgcn_mbcnt_lo(unsigned, unsigned);
unsigned __builtin_amdgcn_mbcnt_hi(unsigned, unsigned);
int __builtin_amdgcn_ds_bpermute(int, int);
int __builtin_amdgcn_readfirstlane(int);
// fences order memory between the GPU's threads; the emulation runs one thread at a time
inline void __builtin_amdgcn_fence(int, const char*) {}
// one thread at a time, and none is switched out inside: a plain add is atomic
template <class T> inline T kgemu_atomic_add(T* p, T v) { T old = *p; *p = old + v; return old; }
#define __hip_atomic_fetch_add(p, v, order, scope) kgemu_atomic_add(p, v)
// MFMA: a rendezvous of the wave, each lane giving its A, B and C registers (kgen_emu_rt.cpp)
typedef short kgemu_short4 __attribute__((ext_vector_type(4)));
typedef _Float16 kgemu_half4 __attribute__((ext_vector_type(4)));
typedef float kgemu_float16 __attribute__((ext_vector_type(16)));
typedef float kgemu_float4 __attribute__((ext_vector_type(4)));
kgemu_float16 __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(kgemu_short4, kgemu_short4, kgemu_float16, int, int, int);
kgemu_float4 __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(kgemu_short4, kgemu_short4, kgemu_float4, int, int, int);
kgemu_float16 __builtin_amdgcn_mfma_f32_32x32x8f16(kgemu_half4, kgemu_half4, kgemu_float16, int, int, int);
kgemu_float4 __builtin_amdgcn_mfma_f32_16x16x16f16(kgemu_half4, kgemu_half4, kgemu_float4, int, int, int);
