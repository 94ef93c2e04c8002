// Memory checks of the wave64 emulation, like compute-sanitizer's memcheck, racecheck and
// initcheck. The kernel's code is compiled with clang's AddressSanitizer instrumentation and
// none of its runtime: with -asan-instrumentation-with-call-threshold=0 every load and store
// becomes a call __asan_loadN(addr) / __asan_storeN(addr) before it, and a block copy (a
// 16-byte vector copy is one) a call __asan_memcpy, all defined here (LLVM's
// AddressSanitizer.cpp names them); its stack and global redzones are off. An access is
// allowed in the thread's own private memory (its fiber's stack), in a tensor argument of the
// launch, or in the kernel's LDS (KG_SHARED puts every LDS array in the section kgemu_lds, whose
// bounds the linker gives the kernel's library as __start_/__stop_kgemu_lds, and its launch
// passes here: set_lds). In LDS, each byte remembers who
// last wrote and read it and in which barrier interval: a thread that reads or writes a byte
// another thread wrote in the same interval, or writes one another thread read in it, races
// (no barrier orders the two), unless the write leaves the byte as it was (threads that hold
// copies of one value and all store it: the order does not matter); a read of a byte no thread
// of the workgroup wrote yet reads garbage on the hardware (LDS is not cleared between
// workgroups). The callback comes before its store, so a racing write's value is compared at
// the thread's next access or rendezvous (settle), when its store has happened.
#include "kgen_emu_rt.h"
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace kgemu {
namespace {
struct Region { std::string name; uintptr_t lo, hi; };
std::vector<Region> regions;
constexpr int MANY = -2;  // more than one thread read the byte in this interval
struct LdsByte { unsigned w_epoch = 0, r_epoch = 0; int writer = -1, reader = -1; };
std::vector<LdsByte> shadow;
// a write that races unless it stores what the byte held: checked once the store is done
struct Pending { const unsigned char* p; unsigned char before; size_t off; int other; bool after_write; const void* pc; };
std::vector<Pending> pending;
// reads of bytes no thread of the workgroup had written: an error at the interval's end unless a
// thread wrote them meanwhile, which the write-after-read check then reports as the race it is
struct Unwritten { size_t off; int reader; const void* pc; };
std::vector<Unwritten> unwritten;

char* lds_begin = nullptr;  // the running kernel's LDS
char* lds_end = nullptr;
uintptr_t lds_lo() { return (uintptr_t)lds_begin; }
uintptr_t lds_hi() { return (uintptr_t)lds_end; }

std::string who(int t) {
  return "thread " + std::to_string(t) + " (wave " + std::to_string(t / WAVE) + ", lane " + std::to_string(t % WAVE) + ")";
}

// Where an address lies against the nearest allocation, for the error message.
std::string locate(uintptr_t a) {
  std::vector<Region> near = regions;
  if (lds_hi() > lds_lo()) near.push_back({"the LDS allocation", lds_lo(), lds_hi()});
  const Region* best = nullptr;
  uintptr_t dist = ~(uintptr_t)0;
  for (const auto& r : near) {
    uintptr_t d = a < r.lo ? r.lo - a : (a >= r.hi ? a - r.hi + 1 : 0);
    if (d < dist) { dist = d; best = &r; }
  }
  char buf[256];
  if (!best || dist > (1u << 20)) return "not in any tensor argument, the LDS allocation or the thread's private memory";
  const long long size = (long long)(best->hi - best->lo);
  if (a < best->lo)
    std::snprintf(buf, sizeof buf, "%llu bytes before the start of %s (%lld bytes)", (unsigned long long)(best->lo - a), best->name.c_str(), size);
  else if (a >= best->hi)
    std::snprintf(buf, sizeof buf, "%llu bytes past the end of %s (%lld bytes)", (unsigned long long)(a - best->hi), best->name.c_str(), size);
  else
    std::snprintf(buf, sizeof buf, "at byte %llu of %s (%lld bytes), running past its end", (unsigned long long)(a - best->lo), best->name.c_str(), size);
  return buf;
}

[[noreturn]] void out_of_bounds(uintptr_t a, int n, bool write, const void* pc) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "out-of-bounds %d-byte %s at 0x%llx, %s", n, write ? "write" : "read",
                (unsigned long long)a, locate(a).c_str());
  fail(buf, pc);
}

[[noreturn]] void lds_error(const char* what, size_t off, int other, const void* pc) {
  std::string text = std::string(what) + " LDS byte " + std::to_string(off);
  if (other == MANY) text += " that several other threads read";
  else if (other != -1) text += " that " + who(other) + (std::strstr(what, "overwrites") ? " read" : " wrote");
  text += other == -1 ? "" : " since the last barrier (a race: no barrier orders the two)";
  fail(text.c_str(), pc);
}

void lds_access(size_t off, int n, bool write, const void* pc) {
  if (shadow.size() < lds_hi() - lds_lo()) shadow.resize(lds_hi() - lds_lo());
  for (int i = 0; i < n; ++i) {
    LdsByte& b = shadow[off + i];
    const bool written_now = b.w_epoch == epoch && b.writer != cur;
    if (write) {
      const unsigned char* p = (const unsigned char*)lds_begin + off + i;
      if (written_now) pending.push_back({p, *p, off + i, b.writer, true, pc});
      else if (b.r_epoch == epoch && b.reader != cur) pending.push_back({p, *p, off + i, b.reader, false, pc});
      b.w_epoch = epoch;
      b.writer = cur;
    } else {
      if (b.w_epoch < wg_epoch && (unwritten.empty() || unwritten.back().off != off + i - 1 || unwritten.back().reader != cur))
        unwritten.push_back({off + i, cur, pc});  // one entry for a run of bytes a thread reads
      if (written_now) lds_error("reads", off + i, b.writer, pc);
      if (b.r_epoch != epoch) { b.r_epoch = epoch; b.reader = cur; }
      else if (b.reader != cur) b.reader = MANY;
    }
  }
}

void access(const void* p, int n, bool write, const void* pc) {
  const uintptr_t a = (uintptr_t)p;
  if (error[0]) fail("", pc);  // another thread failed: this one stops before its next access
  if (!pending.empty()) settle();
  const uintptr_t stack = (uintptr_t)stacks[cur];
  if (a >= stack && a + n <= stack + STACK) return;
  if (a >= lds_lo() && a < lds_hi()) {
    if (a + n > lds_hi()) out_of_bounds(a, n, write, pc);
    lds_access(a - lds_lo(), n, write, pc);
    return;
  }
  for (const auto& r : regions)
    if (a >= r.lo && a + n <= r.hi) return;
  out_of_bounds(a, n, write, pc);
}
}  // namespace

bool unwritten_reads() {
  for (const Unwritten& u : unwritten)
    if (shadow[u.off].w_epoch < wg_epoch) {
      const std::string what = "reads LDS byte " + std::to_string(u.off) + " before any thread of the workgroup wrote it";
      record(what.c_str(), u.reader, u.pc);
      unwritten.clear();
      return true;
    }
  unwritten.clear();
  return false;
}

void settle() {
  for (const Pending& w : pending)
    if (*w.p != w.before) {
      pending.clear();
      lds_error(w.after_write ? "writes another value into" : "overwrites", w.off, w.other, w.pc);
    }
  pending.clear();
}

void set_lds(char* begin, char* end) {
  lds_begin = begin;
  lds_end = end;
}

void set_regions(int n, const char* const* names, void* const* ptrs, const long long* bytes) {
  regions.clear();
  for (int i = 0; i < n; ++i)
    regions.push_back({std::string("tensor '") + names[i] + "'", (uintptr_t)ptrs[i], (uintptr_t)ptrs[i] + (uintptr_t)bytes[i]});
}

void begin_workgroup() {
  pending.clear();
  unwritten.clear();
  wg_epoch = ++epoch;
  if (lds_hi() > lds_lo()) std::memset(lds_begin, 0xff, lds_hi() - lds_lo());  // NaN in every float type
}
}  // namespace kgemu

// The instrumentation's entry points (the kernel's .so gets no AddressSanitizer runtime)
#define KGEMU_HOOKS(N)                                                                                \
  extern "C" void __asan_load##N(void* p) { kgemu::access(p, N, false, __builtin_return_address(0)); } \
  extern "C" void __asan_store##N(void* p) { kgemu::access(p, N, true, __builtin_return_address(0)); }
KGEMU_HOOKS(1)
KGEMU_HOOKS(2)
KGEMU_HOOKS(4)
KGEMU_HOOKS(8)
KGEMU_HOOKS(16)
extern "C" void __asan_loadN(void* p, size_t n) { kgemu::access(p, (int)n, false, __builtin_return_address(0)); }
extern "C" void __asan_storeN(void* p, size_t n) { kgemu::access(p, (int)n, true, __builtin_return_address(0)); }
extern "C" void* __asan_memcpy(void* d, const void* s, size_t n) {
  kgemu::access(s, (int)n, false, __builtin_return_address(0));
  kgemu::access(d, (int)n, true, __builtin_return_address(0));
  return std::memcpy(d, s, n);
}
extern "C" void* __asan_memmove(void* d, const void* s, size_t n) {
  kgemu::access(s, (int)n, false, __builtin_return_address(0));
  kgemu::access(d, (int)n, true, __builtin_return_address(0));
  return std::memmove(d, s, n);
}
extern "C" void* __asan_memset(void* d, int c, size_t n) {
  kgemu::access(d, (int)n, true, __builtin_return_address(0));
  return std::memset(d, c, n);
}
extern "C" void __asan_init() {}
extern "C" void __asan_version_mismatch_check_v8() {}
extern "C" void __asan_handle_no_return() {}
