// The emulated grid's fibers (kernel_emulator.h) and tensor_core.h's product for the host, for
// every kernel body the host tests run on it.
#include "kernel_emulator.h"

#include <ucontext.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "backends/cuda/tensor_core.h"

#if defined(__SANITIZE_ADDRESS__)
#define KILN_EMULATOR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_EMULATOR_ASAN 1
#endif
#endif
#ifdef KILN_EMULATOR_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace kernel_emulator {
namespace {

// Room for a kernel body unoptimised and under AddressSanitizer, whose frames are larger; only
// the pages a body touches are ever mapped.
constexpr std::size_t kStackBytes = 1 << 20;

void fiber_main();

#if defined(__x86_64__)
// A switch that keeps the callee-saved registers on the stack it leaves and takes them from the
// one it enters: swapcontext also saves the signal mask, a system call each way, and the fibers
// switch at every barrier.
extern "C" void kiln_emulator_switch(void** save_sp, void* next_sp);
asm(R"(
  .text
  .p2align 4
  .globl kiln_emulator_switch
  .type kiln_emulator_switch, @function
kiln_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kiln_emulator_switch, .-kiln_emulator_switch
)");

struct Context {
  void* sp = nullptr;
};
// A stack whose first switch "returns" into fiber_main with the alignment of a call.
void prepare(Context& context, char* stack, std::size_t bytes) {
  auto top = reinterpret_cast<std::uintptr_t>(stack + bytes) & ~std::uintptr_t{15};
  auto* slot = reinterpret_cast<void**>(top - 16);
  *slot = reinterpret_cast<void*>(&fiber_main);
  for (int r = 1; r <= 6; ++r) slot[-r] = nullptr;  // the six registers popped first
  context.sp = slot - 6;
}
void switch_context(Context& from, Context& to) { kiln_emulator_switch(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t context{};
};
void prepare(Context& context, char* stack, std::size_t bytes) {
  getcontext(&context.context);
  context.context.uc_stack.ss_sp = stack;
  context.context.uc_stack.ss_size = bytes;
  makecontext(&context.context, fiber_main, 0);
}
void switch_context(Context& from, Context& to) { swapcontext(&from.context, &to.context); }
#endif

struct Fiber {
  Context context;
  ThreadState state;
  bool finished = false;
  char* stack = nullptr;
#ifdef KILN_EMULATOR_ASAN
  void* fake_stack = nullptr;
#endif
};

// One block's fibers, run on one host thread: the lowest-numbered runnable one next.
struct Scheduler {
  Context context;
  std::vector<Fiber> fibers;
  std::vector<std::uint64_t> runnable;  // a bit per fiber
  unsigned current = 0;
  const std::function<void(unsigned)>* body = nullptr;
#ifdef KILN_EMULATOR_ASAN
  const void* stack_bottom = nullptr;
  std::size_t stack_size = 0;
#endif

  void set_runnable(unsigned f, bool on) {
    const std::uint64_t bit = std::uint64_t{1} << (f % 64);
    runnable[f / 64] = on ? runnable[f / 64] | bit : runnable[f / 64] & ~bit;
  }
  // The lowest runnable fiber, or fibers.size().
  std::size_t next() const {
    for (std::size_t w = 0; w < runnable.size(); ++w) {
      if (runnable[w] != 0) return 64 * w + static_cast<std::size_t>(std::countr_zero(runnable[w]));
    }
    return fibers.size();
  }
};

thread_local Scheduler* t_scheduler = nullptr;

// The stacks, kept for the next block (a fresh page costs far more to map than to reuse).
std::vector<std::unique_ptr<char[]>>& stacks() {
  thread_local std::vector<std::unique_ptr<char[]>> pool;
  return pool;
}

// The fiber's side of a switch to the scheduler and back.
void yield_to_scheduler() {
  Scheduler& s = *t_scheduler;
  Fiber& f = s.fibers[s.current];
#ifdef KILN_EMULATOR_ASAN
  __sanitizer_start_switch_fiber(&f.fake_stack, s.stack_bottom, s.stack_size);
#endif
  switch_context(f.context, s.context);
#ifdef KILN_EMULATOR_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &s.stack_bottom, &s.stack_size);
#endif
}

void fiber_main() {
  Scheduler& s = *t_scheduler;
#ifdef KILN_EMULATOR_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &s.stack_bottom, &s.stack_size);
#endif
  (*s.body)(s.current);
  s.fibers[s.current].finished = true;
  s.set_runnable(s.current, false);
#ifdef KILN_EMULATOR_ASAN
  __sanitizer_start_switch_fiber(nullptr, s.stack_bottom, s.stack_size);  // its fake stack goes
#endif
  Context unused;
  switch_context(unused, s.context);  // never resumed
  std::abort();
}

}  // namespace

void Barrier::arrive_and_wait() {
  Scheduler& s = *t_scheduler;
  if (static_cast<std::ptrdiff_t>(waiting_.size()) + 1 == count_) {
    for (const unsigned f : waiting_) s.set_runnable(f, true);
    waiting_.clear();
    return;
  }
  waiting_.push_back(s.current);
  s.set_runnable(s.current, false);
  yield_to_scheduler();
}

void run_block(unsigned threads, const std::function<void(unsigned thread)>& body) {
  Scheduler s;
  s.body = &body;
  s.fibers.resize(threads);
  s.runnable.assign((threads + 63) / 64, 0);
  auto& pool = stacks();
  while (pool.size() < threads) pool.push_back(std::make_unique<char[]>(kStackBytes));
  for (unsigned i = 0; i < threads; ++i) {
    Fiber& f = s.fibers[i];
    f.stack = pool[i].get();
    prepare(f.context, f.stack, kStackBytes);
    s.set_runnable(i, true);
  }
  t_scheduler = &s;
  // This thread's own values of the thread-locals, kept aside while the fibers run.
  ThreadState host;
  host.swap_with_thread_locals();
  for (;;) {
    const std::size_t next = s.next();
    if (next == threads) {
      std::string waiting;
      for (unsigned i = 0; i < threads && waiting.size() < 200; ++i) {
        if (!s.fibers[i].finished) waiting += " " + std::to_string(i);
      }
      if (waiting.empty()) break;
      std::fprintf(stderr,
                   "kernel_emulator: deadlock: threads%s... wait at barriers that no other "
                   "thread will reach\n",
                   waiting.c_str());
      std::abort();
    }
    Fiber& f = s.fibers[next];
    s.current = static_cast<unsigned>(next);
    f.state.swap_with_thread_locals();
#ifdef KILN_EMULATOR_ASAN
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, f.stack, kStackBytes);
#endif
    switch_context(s.context, f.context);
#ifdef KILN_EMULATOR_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
    f.state.swap_with_thread_locals();
  }
  host.swap_with_thread_locals();
  t_scheduler = nullptr;
}

}  // namespace kernel_emulator

namespace kiln::cuda::tensor_core {

void tc_host_mma(float* c, const unsigned* a, unsigned b0, unsigned b1, bool bf16) {
  kernel_emulator::mma_16bit(c, a, b0, b1, bf16);
}

}  // namespace kiln::cuda::tensor_core
