// The wave64 emulation's state, shared by its scheduler (kgen_emu_rt.cpp) and its memory
// checks (kgen_emu_memcheck.cpp). Compiled without the kernel's instrumentation.
#pragma once
#include <setjmp.h>
#include <ucontext.h>
#include <cstddef>
#include <vector>

namespace kgemu {
constexpr int WAVE = 64;
constexpr size_t STACK = 1 << 22;
// A thread: started once from its ucontext, then switched with _setjmp/_longjmp, which keep
// the signal mask alone (swapcontext's system call per switch was most of the run time).
// While waiting, it is resumed only once *wait_gen moved from wait_val.
struct Fiber {
  ucontext_t ctx;
  jmp_buf jb;
  bool started = false, done = false, waiting = false;
  const unsigned* wait_gen = nullptr;
  unsigned wait_val = 0;
};
extern std::vector<Fiber> fibers;
extern std::vector<char*> stacks;  // thread t's private memory: stacks[t], STACK bytes
extern int cur, nthreads, wg[3];
extern unsigned epoch;     // the barrier interval now: one more at each barrier and workgroup
extern unsigned wg_epoch;  // the interval the running workgroup began in
extern char error[1024];
extern const void* error_pc;  // where in the kernel's code the error arose
// Record an error for thread `cur` (the first one only) and stop that thread at once.
[[noreturn]] void fail(const char* what, const void* pc);
void record(const char* what, int thread, const void* pc);  // the first error only; no stop
// At the end of a barrier interval: whether a read of LDS no thread had written is still
// unwritten (then recorded as the error): a later write in the interval was a race instead.
bool unwritten_reads();
// A launch's memory: its tensors (name, first byte, one past the last) for the checks.
void set_regions(int n, const char* const* names, void* const* ptrs, const long long* bytes);
void set_lds(char* begin, char* end);  // the kernel's LDS arrays, [begin, end)
void begin_workgroup();  // LDS filled with a NaN pattern; what the last workgroup wrote is gone
// Check the racing LDS writes of the thread that runs now, whose stores are done (fails on one
// that changed its byte); called at each access, rendezvous and thread end.
void settle();
}  // namespace kgemu
