// Host runtime of the wave64 emulation: every thread of a workgroup is a fiber (ucontext); a
// cross-lane builtin or a barrier is a rendezvous of the wave's or the workgroup's fibers.
// Fibers switch only there, so between two rendezvous a thread runs alone.
#include "kgen_emu_rt.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kgemu {
std::vector<Fiber> fibers;
std::vector<char*> stacks;
int cur = 0, nthreads = 0, wg[3];
unsigned epoch = 0, wg_epoch = 0;
char error[1024];
const void* error_pc = nullptr;
namespace {
struct Wave { int arrived = 0; unsigned gen = 0; long long slot[WAVE]; };
struct Group { int arrived = 0; unsigned gen = 0; };
std::vector<Wave> waves;
Group group;
jmp_buf sched;
void (*body)(void*) = nullptr;
void* body_arg = nullptr;
std::vector<const void*> wait_pc;  // where each waiting thread waits

}  // namespace
void record(const char* what, int t, const void* pc) {
  if (error[0]) return;
  std::snprintf(error, sizeof error, "%s (thread %d of workgroup %d,%d,%d)", what, t, wg[0], wg[1], wg[2]);
  error_pc = pc;
}
namespace {
[[noreturn]] void to_scheduler() { _longjmp(sched, 1); }
// wait until *gen moves from its value now (a rendezvous completes)
void wait_for(const unsigned* gen, const void* pc) {
  Fiber& f = fibers[cur];
  f.waiting = true;
  f.wait_gen = gen;
  f.wait_val = *gen;
  wait_pc[cur] = pc;
  while (*gen == f.wait_val)
    if (!_setjmp(f.jb)) to_scheduler();
  f.waiting = false;
}
void entry() { body(body_arg); settle(); fibers[cur].done = true; to_scheduler(); }
// run thread t until it waits or ends (a function of its own: the _setjmp frame holds nothing else)
__attribute__((noinline)) void resume(int t) {
  if (_setjmp(sched)) return;
  Fiber& f = fibers[t];
  if (!f.started) {
    f.started = true;
    setcontext(&f.ctx);
  }
  _longjmp(f.jb, 1);
}
int lanes_of(int w) { int n = nthreads - w * WAVE; return n < WAVE ? n : WAVE; }
void wave_sync(const void* pc) {
  settle();
  Wave& w = waves[cur / WAVE];
  if (++w.arrived == lanes_of(cur / WAVE)) { w.arrived = 0; ++w.gen; return; }
  wait_for(&w.gen, pc);
}
}  // namespace

void fail(const char* what, const void* pc) {
  record(what, cur, pc);
  fibers[cur].done = true;  // never resumed: the launch ends with the error
  to_scheduler();
}
}  // namespace kgemu

using namespace kgemu;
#define PC __builtin_return_address(0)
int __builtin_amdgcn_workitem_id_x() { return cur; }
int __builtin_amdgcn_workgroup_id_x() { return wg[0]; }
int __builtin_amdgcn_workgroup_id_y() { return wg[1]; }
int __builtin_amdgcn_workgroup_id_z() { return wg[2]; }
// S_BARRIER: every wave of the workgroup arrives before any goes on; a new LDS interval begins
void __builtin_amdgcn_s_barrier() {
  settle();
  if (++group.arrived == nthreads) {
    group.arrived = 0;
    ++group.gen;
    if (unwritten_reads()) fail(error, PC);  // recorded for the reading thread
    ++epoch;
    return;
  }
  wait_for(&group.gen, PC);
}
// V_MBCNT_LO/HI_U32_B32 (CDNA3 ISA): src1 plus the set bits of src0 among the lanes below this one
unsigned __builtin_amdgcn_mbcnt_lo(unsigned mask, unsigned acc) {
  int lane = cur % WAVE;
  unsigned below = lane >= 32 ? 0xffffffffu : ((1u << lane) - 1u);
  return acc + __builtin_popcount(mask & below);
}
unsigned __builtin_amdgcn_mbcnt_hi(unsigned mask, unsigned acc) {
  int lane = cur % WAVE;
  unsigned below = lane < 32 ? 0u : (lane == 63 ? 0x7fffffffu : ((1u << (lane - 32)) - 1u));
  return acc + __builtin_popcount(mask & below);
}
// DS_BPERMUTE_B32 (CDNA3 ISA): this lane reads the value lane (addr / 4) % 64 supplied, 0 from
// a lane that is not active (past the workgroup's last thread in a partial wave)
int __builtin_amdgcn_ds_bpermute(int addr, int v) {
  Wave& w = waves[cur / WAVE];
  w.slot[cur % WAVE] = v;
  wave_sync(PC);
  const int from = (addr >> 2) & (WAVE - 1);
  int r = from < lanes_of(cur / WAVE) ? (int)w.slot[from] : 0;
  wave_sync(PC);
  return r;
}
// V_READFIRSTLANE_B32: the value of the wave's first active lane (all lanes are active here)
int __builtin_amdgcn_readfirstlane(int v) {
  Wave& w = waves[cur / WAVE];
  w.slot[cur % WAVE] = v;
  wave_sync(PC);
  int r = (int)w.slot[0];
  for (int l = 0; l < lanes_of(cur / WAVE); ++l)
    if ((int)w.slot[l] != r) fail("readfirstlane of a value that differs between the lanes of a wave", PC);
  wave_sync(PC);
  return r;
}

// MFMA (CDNA3 ISA, "Matrix fused multiply-add", and AMD's matrix instruction calculator for
// the register layouts). A and B: 4 values per lane; for an m x n x k instruction with m = n =
// 32 (k = 8) or 16 (k = 16), lane l holds A[l % m][4 * (l / m) + v] and B[4 * (l / n) + v][l % n];
// D: lane l register r holds D[i][l % n] with i = 8 * (r / 4) + 4 * (l / 32) + r % 4 (32x32x8)
// or i = 4 * (l / 16) + r (16x16x16). Products are exact in float; sums in float.
typedef short short4 __attribute__((ext_vector_type(4)));
typedef _Float16 half4 __attribute__((ext_vector_type(4)));
typedef float float16v __attribute__((ext_vector_type(16)));
typedef float float4v __attribute__((ext_vector_type(4)));
namespace {
struct MfmaSlots { float a[WAVE][4], b[WAVE][4], c[WAVE][16], d[WAVE][16]; };
std::vector<MfmaSlots> mfma_slots;
float bf16f(short v) { unsigned u = (unsigned)(unsigned short)v << 16; float f; std::memcpy(&f, &u, 4); return f; }
template <int M> void mfma(const float* a, const float* b, float* d_out, const float* c_in, int nregs, const void* pc) {
  MfmaSlots& s = mfma_slots[cur / WAVE];
  const int lane = cur % WAVE;
  std::memcpy(s.a[lane], a, sizeof(float) * 4);
  std::memcpy(s.b[lane], b, sizeof(float) * 4);
  std::memcpy(s.c[lane], c_in, sizeof(float) * nregs);
  wave_sync(pc);
  if (lane == 0) {  // one lane computes the whole product for the wave
    const int K = M == 32 ? 8 : 16;
    float A[32][16], B[16][32];
    for (int l = 0; l < WAVE; ++l)
      for (int v = 0; v < 4; ++v) { A[l % M][4 * (l / M) + v] = s.a[l][v]; B[4 * (l / M) + v][l % M] = s.b[l][v]; }
    for (int l = 0; l < WAVE; ++l)
      for (int r = 0; r < nregs; ++r) {
        const int i = M == 32 ? 8 * (r / 4) + 4 * (l / 32) + r % 4 : 4 * (l / 16) + r, j = l % M;
        float acc = s.c[l][r];
        for (int k = 0; k < K; ++k) acc += A[i][k] * B[k][j];
        s.d[l][r] = acc;
      }
  }
  wave_sync(pc);
  std::memcpy(d_out, s.d[lane], sizeof(float) * nregs);
  wave_sync(pc);
}
}  // namespace
namespace {
float elem(short v) { return bf16f(v); }  // bf16, kept as its bits
float elem(_Float16 v) { return (float)v; }
// one lane's MFMA: its 4 A and 4 B values widened to float, its C registers in, D out
template <int M, int NREGS, class In, class Acc> Acc mfma_lane(In a, In b, Acc c, const void* pc) {
  float fa[4], fb[4], fc[16], fd[16];
  for (int v = 0; v < 4; ++v) { fa[v] = elem(a[v]); fb[v] = elem(b[v]); }
  for (int r = 0; r < NREGS; ++r) fc[r] = c[r];
  mfma<M>(fa, fb, fd, fc, NREGS, pc);
  Acc d;
  for (int r = 0; r < NREGS; ++r) d[r] = fd[r];
  return d;
}
}  // namespace
float16v __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(short4 a, short4 b, float16v c, int, int, int) { return mfma_lane<32, 16>(a, b, c, PC); }
float4v __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(short4 a, short4 b, float4v c, int, int, int) { return mfma_lane<16, 4>(a, b, c, PC); }
float16v __builtin_amdgcn_mfma_f32_32x32x8f16(half4 a, half4 b, float16v c, int, int, int) { return mfma_lane<32, 16>(a, b, c, PC); }
float4v __builtin_amdgcn_mfma_f32_16x16x16f16(half4 a, half4 b, float4v c, int, int, int) { return mfma_lane<16, 4>(a, b, c, PC); }

extern "C" const void* kgemu_error_pc() { return error_pc; }
extern "C" const char* kgemu_launch(int gx, int gy, int gz, int threads, void (*fn)(void*), void* arg, char* lds_begin,
                                    char* lds_end, int nregions, const char* const* names, void* const* ptrs,
                                    const long long* bytes) {
  error[0] = 0;
  error_pc = nullptr;
  set_regions(nregions, names, ptrs, bytes);
  set_lds(lds_begin, lds_end);
  body = fn; body_arg = arg; nthreads = threads;
  fibers.assign(threads, Fiber{});
  wait_pc.assign(threads, nullptr);
  while ((int)stacks.size() < threads) stacks.push_back((char*)std::malloc(STACK));
  waves.assign((threads + WAVE - 1) / WAVE, Wave{});
  for (int w = 0; w < (int)waves.size(); ++w)  // inactive lanes hold no value: poison, never read
    for (int l = lanes_of(w); l < WAVE; ++l) waves[w].slot[l] = 0x7eadbeef;
  mfma_slots.assign((threads + WAVE - 1) / WAVE, MfmaSlots{});
  for (wg[2] = 0; wg[2] < gz; ++wg[2])
    for (wg[1] = 0; wg[1] < gy; ++wg[1])
      for (wg[0] = 0; wg[0] < gx; ++wg[0]) {
        group = Group{};
        begin_workgroup();
        for (int t = 0; t < threads; ++t) {
          fibers[t] = Fiber{};
          getcontext(&fibers[t].ctx);
          fibers[t].ctx.uc_stack.ss_sp = stacks[t];
          fibers[t].ctx.uc_stack.ss_size = STACK;
          fibers[t].ctx.uc_link = nullptr;
          makecontext(&fibers[t].ctx, entry, 0);
        }
        for (;;) {
          int live = 0, ran = 0;
          for (cur = 0; cur < threads; ++cur) {
            Fiber& f = fibers[cur];
            if (f.done) continue;
            ++live;
            if (f.waiting && *f.wait_gen == f.wait_val) continue;  // its rendezvous is not complete
            ++ran;
            resume(cur);
            if (error[0]) return error;
          }
          if (!live) {
            if (unwritten_reads()) return error;
            break;
          }
          if (!ran) {  // every live thread waits for one that ended or waits elsewhere
            int waiter = 0;
            bool any_done = false;
            for (int t = threads - 1; t >= 0; --t) {
              if (!fibers[t].done) waiter = t;
              any_done |= fibers[t].done;
            }
            record(any_done ? "a barrier or cross-lane op that some threads of the workgroup never reach"
                            : "no thread can go on: a barrier or cross-lane op is waited for in a different order",
                   waiter, wait_pc[waiter]);
            return error;
          }
        }
      }
  return nullptr;
}
