// A sampling profiler for machines without perf (the GPU machine has no perf, gdb or strace):
// LD_PRELOAD it and the thread that loads it (the program's main thread) is interrupted every
// KILN_SAMPLE_US microseconds of wall time (default 50), from KILN_SAMPLE_AFTER_MS milliseconds
// after it starts (default 0: skips a start-up), and its stack recorded; at exit the raw
// stacks go to KILN_SAMPLE_OUT (default sampler.out) as "address address ..." lines, with a copy
// of /proc/self/maps, for bench/probe/sampler_report.py to symbolise (addr2line). Wall time, not
// CPU time: a thread blocked in a lock or a syscall is sampled there. A probe, not part of kiln.
//   g++ -O2 -shared -fPIC bench/probe/sampler.cpp -o sampler.so
//   KILN_SAMPLE_US=50 LD_PRELOAD=./sampler.so PROGRAM ...; python3 sampler_report.py sampler.out
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace {

constexpr int kDepth = 48;
constexpr int kSamples = 1 << 18;

struct Sample {
  int depth;
  void* frames[kDepth];
};

Sample* g_samples = nullptr;
std::atomic<int> g_count{0};
timer_t g_timer;

void on_signal(int) {
  const int index = g_count.load(std::memory_order_relaxed);
  if (index >= kSamples) return;
  Sample& sample = g_samples[index];
  sample.depth = backtrace(sample.frames, kDepth);
  g_count.store(index + 1, std::memory_order_relaxed);
}

struct Sampler {
  Sampler() {
    g_samples = static_cast<Sample*>(std::calloc(kSamples, sizeof(Sample)));
    void* warm[4];
    backtrace(warm, 4);  // loads the unwinder now, not inside the first signal
    const char* period = std::getenv("KILN_SAMPLE_US");
    const long us = period != nullptr ? std::atol(period) : 50;
    struct sigaction action = {};
    action.sa_handler = on_signal;
    action.sa_flags = SA_RESTART;
    sigaction(SIGPROF, &action, nullptr);
    sigevent event = {};
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = SIGPROF;
    event._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
    timer_create(CLOCK_MONOTONIC, &event, &g_timer);
    const char* after = std::getenv("KILN_SAMPLE_AFTER_MS");
    const long first_us = after != nullptr ? std::atol(after) * 1000 : us;
    itimerspec spec = {};
    spec.it_interval.tv_nsec = us * 1000;
    spec.it_value.tv_sec = first_us / 1000000;
    spec.it_value.tv_nsec = first_us % 1000000 * 1000;
    timer_settime(g_timer, 0, &spec, nullptr);
  }
  ~Sampler() {
    timer_delete(g_timer);
    const char* name = std::getenv("KILN_SAMPLE_OUT");
    std::FILE* out = std::fopen(name != nullptr ? name : "sampler.out", "w");
    if (out == nullptr) return;
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) std::fprintf(out, "map %s\n", line.c_str());
    const int count = g_count.load();
    for (int i = 0; i < count; ++i) {
      std::fprintf(out, "stack");
      for (int k = 0; k < g_samples[i].depth; ++k) std::fprintf(out, " %p", g_samples[i].frames[k]);
      std::fprintf(out, "\n");
    }
    std::fclose(out);
  }
};

Sampler g_sampler;

}  // namespace
