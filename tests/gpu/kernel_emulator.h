// An emulated CUDA grid for the kernel bodies that are one text for two compilers
// (src/backends/cuda/quant_kernels.h, attention_kernels.h): a fiber per CUDA thread, a block at
// a time on the calling thread; __syncthreads a barrier of the block's fibers; the warp-wide
// instructions (mma.sync, ldmatrix, shuffles) barriers of the warp's 32 lanes around an exchange
// of what each lane holds. The tests define each header's primitives with these; the GPU runs
// check the CUDA itself.
//
// Fibers, not threads: a block's threads meet at a barrier every few instructions, and as host
// threads each meeting was a futex round trip through the scheduler for 32 or 256 threads (two
// thirds of the tests' time went to the kernel). The scheduler always resumes the lowest-numbered
// thread that can run, so warp 0 runs as far ahead of the others as the barriers let it: a tile
// refilled before the warps that read it are done, or a copy read before its wait, shows on
// every run instead of on the interleavings a host scheduler happens to pick. Threads that all
// wait with none able to run are reported as a deadlock (the kernel's barriers do not match).
//
// cp.async has two readings here, and a test runs both: eager (the bytes land at the call, so a
// copy issued into a tile that another warp still reads corrupts it) and lazy (the bytes land at
// the wait that retires the copy's group, so a read before that wait sees stale bytes). wgmma's
// asynchronous products likewise: eager (done at the call) or lazy (done at the wait that retires
// their group, reading shared memory then, so an accumulator used or changed before its wait
// shows).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "kiln/half.h"

namespace kernel_emulator {

// std::barrier's arrive_and_wait for the fibers of one block: the last to arrive goes on, the
// others wait (yield to the block's scheduler) until it has.
class Barrier {
 public:
  explicit Barrier(std::ptrdiff_t count) : count_(count) {}
  Barrier(const Barrier&) = delete;
  Barrier& operator=(const Barrier&) = delete;
  void arrive_and_wait();

 private:
  std::ptrdiff_t count_;
  std::vector<unsigned> waiting_;  // the fibers that arrived before the last
};

// What the threads of one emulated warp exchange.
struct Warp {
  Warp() : barrier(32) {}
  Barrier barrier;
  unsigned a[32][4];
  unsigned b[32][2];
  unsigned word[32];
  const void* address[32];
};
// What the threads of one emulated block share.
struct Block {
  explicit Block(unsigned threads)
      : barrier(static_cast<std::ptrdiff_t>(threads)), warps(threads / 32) {}
  Barrier barrier;
  std::vector<Warp> warps;
};

inline thread_local unsigned t_thread = 0, t_block = 0, t_threads = 0, t_blocks = 0;
inline thread_local Block* t_shared = nullptr;
inline thread_local const unsigned char* t_smem = nullptr;
inline thread_local std::size_t t_smem_bytes = 0;

enum class Copies { eager, lazy };
inline Copies g_copies = Copies::eager;    // set before a launch, read by its threads
inline Copies g_products = Copies::eager;  // wgmma's, likewise

struct PendingCopy {
  void* dst;
  std::size_t size;
  unsigned char bytes[16];
};
inline thread_local std::vector<PendingCopy> t_open_group;
inline thread_local std::vector<std::vector<PendingCopy>> t_committed;
inline thread_local std::vector<std::function<void()>> t_open_products;
inline thread_local std::vector<std::vector<std::function<void()>>> t_committed_products;

// Each emulated thread's values of the thread-locals above (every one of them), which the
// scheduler swaps in when it resumes the thread's fiber and out when the fiber yields.
struct ThreadState {
  unsigned thread = 0, block = 0, threads = 0, blocks = 0;
  Block* shared = nullptr;
  const unsigned char* smem = nullptr;
  std::size_t smem_bytes = 0;
  std::vector<PendingCopy> open_group;
  std::vector<std::vector<PendingCopy>> committed;
  std::vector<std::function<void()>> open_products;
  std::vector<std::vector<std::function<void()>>> committed_products;

  void swap_with_thread_locals() {
    std::swap(thread, t_thread);
    std::swap(block, t_block);
    std::swap(threads, t_threads);
    std::swap(blocks, t_blocks);
    std::swap(shared, t_shared);
    std::swap(smem, t_smem);
    std::swap(smem_bytes, t_smem_bytes);
    open_group.swap(t_open_group);
    committed.swap(t_committed);
    open_products.swap(t_open_products);
    committed_products.swap(t_committed_products);
  }
};

// Runs body once for each of `threads` fibers, each starting from a fresh ThreadState, until all
// have returned; a deadlock prints the waiting threads and aborts (fibers cannot be unwound).
void run_block(unsigned threads, const std::function<void(unsigned thread)>& body);

// body(smem) for every thread of blocks blocks of threads threads, a block at a time.
template <class Body>
void launch(unsigned blocks, unsigned threads, std::size_t shared_bytes, Body body) {
  for (unsigned b = 0; b < blocks; ++b) {
    Block block(threads);
    // Shared memory is 16-byte aligned, as the kernels' declarations ask.
    std::vector<unsigned char> storage(shared_bytes + 16, 0xA5);
    unsigned char* smem =
        storage.data() + (16 - reinterpret_cast<std::uintptr_t>(storage.data()) % 16) % 16;
    run_block(threads, [&](unsigned i) {
      t_thread = i;
      t_block = b;
      t_threads = threads;
      t_blocks = blocks;
      t_shared = &block;
      t_smem = smem;
      t_smem_bytes = shared_bytes;  // the copy and product groups start empty (a fresh state)
      body(smem);
    });
  }
}

inline unsigned lane() { return t_thread % 32; }
inline Warp& this_warp() { return t_shared->warps[t_thread / 32]; }
inline void sync_block() { t_shared->barrier.arrive_and_wait(); }

// A shared-memory access of `bytes` at p must lie inside the block's shared memory, aligned to
// `align` bytes from its start.
inline void expect_shared(const void* p, std::size_t bytes, std::size_t align, const char* what) {
  const auto* at = static_cast<const unsigned char*>(p);
  const bool inside = at >= t_smem && at + bytes <= t_smem + t_smem_bytes;
  if (!inside || static_cast<std::size_t>(at - t_smem) % align != 0) {
    ADD_FAILURE() << what << " of " << bytes << " bytes at shared offset " << (at - t_smem)
                  << " (shared size " << t_smem_bytes << ", alignment " << align << "), thread "
                  << t_thread << " of block " << t_block;
  }
}

// cp.async of `bytes` (16 or fewer; zeros when !valid) into shared memory.
inline void copy_async(void* dst, const void* src, std::size_t bytes, bool valid) {
  expect_shared(dst, bytes, bytes, "cp.async");
  PendingCopy copy{dst, bytes, {}};
  if (valid) std::memcpy(copy.bytes, src, bytes);
  if (g_copies == Copies::eager) {
    std::memcpy(dst, copy.bytes, bytes);
  } else {
    t_open_group.push_back(copy);
  }
}
inline void copy16(void* dst, const void* src, bool valid) { copy_async(dst, src, 16, valid); }
inline void commit_copies() {
  t_committed.push_back(std::move(t_open_group));
  t_open_group.clear();
}
// Lands every committed group but the newest `pending`.
inline void wait_copies(int pending) {
  while (t_committed.size() > static_cast<std::size_t>(pending)) {
    for (const PendingCopy& c : t_committed.front()) std::memcpy(c.dst, c.bytes, c.size);
    t_committed.erase(t_committed.begin());
  }
}

// Every lane's word, then each lane reads its partner's; a second barrier before any lane's next
// value overwrites its slot.
inline unsigned shfl_xor(unsigned v, int mask) {
  Warp& warp = this_warp();
  warp.word[lane()] = v;
  warp.barrier.arrive_and_wait();
  const unsigned other = warp.word[lane() ^ static_cast<unsigned>(mask)];
  warp.barrier.arrive_and_wait();
  return other;
}

// __any_sync over the whole warp.
inline bool any_lane(bool v) {
  Warp& warp = this_warp();
  warp.word[lane()] = v ? 1 : 0;
  warp.barrier.arrive_and_wait();
  bool any = false;
  for (unsigned l = 0; l < 32; ++l) any = any || warp.word[l] != 0;
  warp.barrier.arrive_and_wait();
  return any;
}

// ldmatrix.x4 (.trans with trans): lanes 8i..8i+7 give the row addresses of 8x8 tile i of 16-bit
// values; lane 4r + c receives row r, elements 2c and 2c + 1 of each tile (transposed: rows 2c
// and 2c + 1 of column r), the lower element in the lower half.
inline void ldmatrix(unsigned* out, const unsigned short* at, bool trans) {
  expect_shared(at, 16, 16, trans ? "ldmatrix.trans row" : "ldmatrix row");
  Warp& warp = this_warp();
  warp.address[lane()] = at;
  warp.barrier.arrive_and_wait();
  const unsigned r = lane() / 4, c = lane() % 4;
  for (unsigned i = 0; i < 4; ++i) {
    unsigned short lo, hi;
    if (trans) {
      lo = static_cast<const unsigned short*>(warp.address[8 * i + 2 * c])[r];
      hi = static_cast<const unsigned short*>(warp.address[8 * i + 2 * c + 1])[r];
    } else {
      const auto* row = static_cast<const unsigned short*>(warp.address[8 * i + r]);
      lo = row[2 * c];
      hi = row[2 * c + 1];
    }
    out[i] = lo | static_cast<unsigned>(hi) << 16;
  }
  warp.barrier.arrive_and_wait();
}

// Lane `lane`'s mma fragments into its warp's slots, every lane's in when this returns.
inline Warp& share_fragments(unsigned lane, const unsigned* a, unsigned b0, unsigned b1) {
  Warp& warp = t_shared->warps[t_thread / 32];
  for (int i = 0; i < 4; ++i) warp.a[lane][i] = a[i];
  warp.b[lane][0] = b0;
  warp.b[lane][1] = b1;
  warp.barrier.arrive_and_wait();
  return warp;
}

inline float half_value(unsigned pair, int which, bool bf16) {
  const auto bits = static_cast<std::uint16_t>((pair >> (16 * which)) & 0xFFFF);
  return bf16 ? kiln::bf16_bits_to_float(bits) : kiln::f16_bits_to_float(bits);
}

// Element (row, k) of the 16 x 16 A operand whose fragments the warp's lanes shared: lane
// 4g + t holds (g, 2t..2t+1) in a[0], (g + 8, 2t..) in a[1], (g, 2t + 8..) in a[2] and
// (g + 8, 2t + 8..) in a[3].
inline double fragment_a(const Warp& warp, int row, int k, bool bf16) {
  const int owner = 4 * (row % 8) + (k % 8) / 2;
  const int reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
  return static_cast<double>(half_value(warp.a[owner][reg], k % 2, bf16));
}

// PTX's mma.m16n8k16.row.col, f32 accumulators: A's fragments as fragment_a reads them; B
// (16 x 8) elements (2t..2t+1, g) in b0 and (2t + 8.., g) in b1; C (16 x 8) elements
// (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). Products summed in double, rounded once.
inline void mma_16bit(float* c, const unsigned* a, unsigned b0, unsigned b1, bool bf16) {
  Warp& warp = share_fragments(lane(), a, b0, b1);
  const int g = static_cast<int>(lane()) / 4, t = static_cast<int>(lane()) % 4;
  // A[row][k] and B[k][col] from the lanes that hold them.
  auto a_at = [&](int row, int k) { return fragment_a(warp, row, k, bf16); };
  auto b_at = [&](int k, int col) {
    const int owner = 4 * col + (k % 8) / 2;
    return static_cast<double>(half_value(warp.b[owner][k >= 8 ? 1 : 0], k % 2, bf16));
  };
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int i = 0; i < 4; ++i) {
    double sum = c[i];
    for (int k = 0; k < 16; ++k) sum += a_at(rows[i], k) * b_at(k, cols[i]);
    c[i] = static_cast<float>(sum);
  }
  warp.barrier.arrive_and_wait();  // every lane has read the fragments before any is rewritten
}

// wgmma's shared operands, 128-byte swizzle only: element (mn, k) of the 16-deep slice whose
// descriptor (start address, LBO, SBO in 16-byte units; the swizzle mode in bits 62-63) is desc,
// K-major (k contiguous; rows 128 bytes apart, 8-row groups SBO apart) or MN-major (mn contiguous
// in 64-wide panels LBO apart; k rows 128 bytes apart, 8-deep groups SBO apart). The swizzle
// permutes the 16-byte chunks of each 128-byte row by address bits 7-9. Addresses are offsets
// from the block's shared memory (the kernels align their tiles to 1024 bytes of it).
inline double wgmma_operand(std::uint64_t desc, int mn, int k, bool k_major, bool bf16) {
  const auto field = [&](int shift) {
    return static_cast<std::uint32_t>((desc >> shift) & 0x3FFF) << 4;
  };
  const std::uint32_t start = field(0), lbo = field(16), sbo = field(32);
  if ((desc >> 62) != 1) ADD_FAILURE() << "a wgmma descriptor without the 128-byte swizzle";
  const auto m = static_cast<std::uint32_t>(mn), kk = static_cast<std::uint32_t>(k);
  std::uint32_t byte =
      k_major ? start + (m / 8) * sbo + (m % 8) * 128 + kk * 2
              : start + (m / 64) * lbo + (kk / 8) * sbo + (kk % 8) * 128 + (m % 64) * 2;
  byte ^= ((byte >> 7) & 7) << 4;
  if (byte + 2 > t_smem_bytes) {
    ADD_FAILURE() << "a wgmma operand at shared offset " << byte << " (shared size " << t_smem_bytes
                  << "), thread " << t_thread << " of block " << t_block;
    return 0;
  }
  std::uint16_t bits;
  std::memcpy(&bits, t_smem + byte, 2);
  return bf16 ? kiln::bf16_bits_to_float(bits) : kiln::f16_bits_to_float(bits);
}

// wgmma.m64nNk16 with f32 accumulators, 16-bit inputs, both operands in shared memory and
// K-major: d = A Bᵀ (+ d when accumulate), A 64 x 16 and B N x 16; or both MN-major (k_major
// false, the instruction's transposes): d = A B, A 64 x 16 and B 16 x N. A thread's d is the
// warp's 16 rows of the 64 (warp w of the warpgroup rows 16w..) as N / 8 mma.m16n8 C tiles side
// by side.
inline void wgmma_shared_now(float* d, int n, std::uint64_t a, std::uint64_t b, bool accumulate,
                             bool bf16, bool k_major = true) {
  const int first = 16 * static_cast<int>((t_thread / 32) % 4);
  const int g = static_cast<int>(lane()) / 4, t = static_cast<int>(lane()) % 4;
  for (int j = 0; j < n / 8; ++j) {
    for (int c = 0; c < 4; ++c) {
      const int row = first + g + 8 * (c >> 1), col = 8 * j + 2 * t + (c & 1);
      double sum = accumulate ? d[4 * j + c] : 0.0;
      for (int k = 0; k < 16; ++k) {
        sum += wgmma_operand(a, row, k, k_major, bf16) * wgmma_operand(b, col, k, k_major, bf16);
      }
      d[4 * j + c] = static_cast<float>(sum);
    }
  }
}

// wgmma.m64nNk16 as above with A in registers (each warp's 16 rows as mma.m16n8k16's A
// fragments) and B (16 x N) MN-major, read transposed: d += A B.
inline void wgmma_registers_now(float* d, int n, const unsigned* a, std::uint64_t b, bool bf16) {
  Warp& warp = share_fragments(lane(), a, 0, 0);
  const int g = static_cast<int>(lane()) / 4, t = static_cast<int>(lane()) % 4;
  for (int j = 0; j < n / 8; ++j) {
    for (int c = 0; c < 4; ++c) {
      const int row = g + 8 * (c >> 1), col = 8 * j + 2 * t + (c & 1);
      double sum = d[4 * j + c];
      for (int k = 0; k < 16; ++k) {
        sum += fragment_a(warp, row, k, bf16) * wgmma_operand(b, col, k, false, bf16);
      }
      d[4 * j + c] = static_cast<float>(sum);
    }
  }
  warp.barrier.arrive_and_wait();  // every lane has read the fragments before any is rewritten
}

// A product done now (eager) or kept in this thread's open group until a wait retires it (lazy):
// every lane of a warp issues and retires the same products in the same order, so the register
// exchange inside one still meets the other lanes'. A's registers are read at the call.
inline void issue_product(std::function<void()> product) {
  if (g_products == Copies::eager) {
    product();
  } else {
    t_open_products.push_back(std::move(product));
  }
}
inline void wgmma_shared(float* d, int n, std::uint64_t a, std::uint64_t b, bool accumulate,
                         bool bf16, bool k_major = true) {
  issue_product([=] { wgmma_shared_now(d, n, a, b, accumulate, bf16, k_major); });
}
inline void wgmma_registers(float* d, int n, const unsigned* a, std::uint64_t b, bool bf16) {
  const unsigned regs[4] = {a[0], a[1], a[2], a[3]};
  issue_product([=] { wgmma_registers_now(d, n, regs, b, bf16); });
}
inline void commit_products() {
  t_committed_products.push_back(std::move(t_open_products));
  t_open_products.clear();
}
// Completes every committed group of products but the newest `pending`.
inline void wait_products(int pending) {
  while (t_committed_products.size() > static_cast<std::size_t>(pending)) {
    for (const auto& product : t_committed_products.front()) product();
    t_committed_products.erase(t_committed_products.begin());
  }
}

}  // namespace kernel_emulator
