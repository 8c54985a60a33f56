// Flash attention's body (src/backends/cuda/attention_kernels.h, the template NVRTC
// instantiates) on the emulated grid of kernel_emulator.h, without a GPU: the 128-row blocks and
// 64-key tiles, both shared stages and the copies in flight, the tiles checked or not, the warps
// that skip a tile under the causal cut, and every index, against the float64 loops of
// attention_cases.h on the inputs the GPU test draws. Each case runs with cp.async's bytes landing
// at the copy and again at the wait that retires it.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/cpu_tensor.h"
#include "backends/cuda/attention_kernels.h"
#include "gpu/attention_cases.h"
#include "kernel_emulator.h"

// The primitives attention_kernels.h declares for the host.
namespace kiln::cuda::attention_kernels {

unsigned ka_thread() { return kernel_emulator::t_thread; }
unsigned ka_block() { return kernel_emulator::t_block; }
void ka_sync() { kernel_emulator::sync_block(); }
void ka_copy16(unsigned short* dst, const unsigned short* src, bool valid) {
  kernel_emulator::copy16(dst, src, valid);
}
void ka_commit() { kernel_emulator::commit_copies(); }
void ka_wait_host(int pending) { kernel_emulator::wait_copies(pending); }
void ka_ldsm(unsigned* r, KaShared at) {
  kernel_emulator::ldmatrix(r, reinterpret_cast<const unsigned short*>(at), false);
}
void ka_ldsm_t(unsigned* r, KaShared at) {
  kernel_emulator::ldmatrix(r, reinterpret_cast<const unsigned short*>(at), true);
}
float ka_shfl_xor(float v, int mask) {
  return std::bit_cast<float>(kernel_emulator::shfl_xor(std::bit_cast<unsigned>(v), mask));
}

bool ka_any(bool v) { return kernel_emulator::any_lane(v); }

}  // namespace kiln::cuda::attention_kernels

namespace gpu_attention_emulated {

using namespace gpu_attention;
namespace ka = kiln::cuda::attention_kernels;

const kiln::cpu::CpuTensor& cpu_tensor(const Primitive& p) {
  const auto* t = dynamic_cast<const kiln::cpu::CpuTensor*>(p.get());
  if (t == nullptr) throw std::logic_error("an attention test input is not a CPU tensor");
  return *t;
}

// The address and the strides of t's first `dims` dims, 0 along a broadcast dim, as
// cuda_attention.cpp passes them.
template <std::size_t dims>
unsigned long long address_and_strides(const Primitive& p, long long (&strides)[dims]) {
  const kiln::cpu::CpuTensor& t = cpu_tensor(p);
  for (std::size_t d = 0; d < dims; ++d) strides[d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
  return reinterpret_cast<std::uintptr_t>(t.data());
}

// c's attention through the kernel body on the emulated grid.
template <int KD, bool kBf16, bool kMask, bool kBias>
TensorData run_kernel(const AttentionCase& c, const Inputs& in) {
  EXPECT_EQ(c.depth, KD);
  EXPECT_EQ(c.dtype == DType::BF16, kBf16);
  EXPECT_EQ(in.mask.has_value(), kMask);
  EXPECT_EQ(in.bias.has_value(), kBias);
  ka::KaParams p{};
  p.batch = c.batch;
  p.heads = c.heads;
  p.queries = c.queries;
  p.keys = c.keys;
  p.query_blocks = (c.queries + ka::kKaRows - 1) / ka::kKaRows;
  p.q = address_and_strides(in.q, p.q_strides);
  p.k = address_and_strides(in.k, p.k_strides);
  p.v = address_and_strides(in.v, p.v_strides);
  if (kMask) p.mask = address_and_strides(*in.mask, p.mask_strides);
  if (kBias) p.bias = address_and_strides(*in.bias, p.bias_strides);
  p.scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(KD)));
  p.causal = c.causal ? 1 : 0;
  // Every element of the output is written: a NaN pattern where one is not shows.
  std::vector<unsigned short> out(static_cast<std::size_t>(c.batch * c.heads * c.queries * KD),
                                  0x7FC1);
  p.out = reinterpret_cast<std::uintptr_t>(out.data());
  const auto blocks = static_cast<unsigned>(c.batch * c.heads * p.query_blocks);
  kernel_emulator::launch(
      blocks, ka::kKaThreads, ka::ka_shared_bytes(KD), [&](unsigned char* smem) {
        ka::ka_attention<KD, kBf16, kMask, kBias>(p, reinterpret_cast<unsigned short*>(smem));
      });
  std::vector<std::byte> bytes(out.size() * 2);
  std::memcpy(bytes.data(), out.data(), bytes.size());
  return TensorData(std::move(bytes), Shape{c.batch, c.heads, c.queries, KD}, c.dtype);
}

struct EmulatedCase {
  AttentionCase c;
  TensorData (*run)(const AttentionCase&, const Inputs&);
};

}  // namespace gpu_attention_emulated

namespace gpu_attention_emulated {

void check(const EmulatedCase& e, std::uint64_t seed, kernel_emulator::Copies copies) {
  SCOPED_TRACE(describe(e.c) +
               (copies == kernel_emulator::Copies::lazy ? ", copies land late" : ""));
  const Inputs in = make_inputs(e.c, seed);
  kernel_emulator::g_copies = copies;
  expect_matches(e.c, in, e.run(e.c, in));
  kernel_emulator::g_copies = kernel_emulator::Copies::eager;
}

const DType b = DType::BF16, h = DType::F16;
const MaskKind none = MaskKind::None;
// Two query blocks, five key tiles (both stages reused, the last one partial).
const EmulatedCase kStages = {{b, 1, 2, 200, 300, 64}, &run_kernel<64, true, false, false>};
// The causal diagonal across three query blocks: warps that skip a tile, rows past the end.
const EmulatedCase kCausal = {{h, 1, 1, 260, 260, 128, none, false, true},
                              &run_kernel<128, false, false, false>};

}  // namespace gpu_attention_emulated

TEST(GpuAttentionEmulated, KernelBodyMatchesFloat64Reference) {
  using namespace gpu_attention_emulated;
  const EmulatedCase cases[] = {
      kStages,
      kCausal,
      // A random mask and a bias on every tile.
      {{b, 2, 1, 70, 129, 32, MaskKind::Full, true, false}, &run_kernel<32, true, true, true>},
      // One key/value head for every query head; fewer queries than keys under the causal cut.
      {{h, 2, 2, 33, 90, 16, none, false, true, Layout::Contiguous, 1},
       &run_kernel<16, false, false, false>},
      // Heads viewed out of [B, S, H, D].
      {{b, 2, 3, 70, 70, 64, none, false, false, Layout::HeadsOfRows},
       &run_kernel<64, true, false, false>},
      // A padding mask whose last batch keeps no key (rows of zeros).
      {{b, 3, 2, 20, 128, 64, MaskKind::Padding}, &run_kernel<64, true, true, false>},
      // A NaN query row.
      {{b, 1, 2, 40, 40, 64, none, false, false, Layout::Contiguous, 0, true},
       &run_kernel<64, true, false, false>},
  };
  std::uint64_t seed = 1900;
  for (const EmulatedCase& e : cases) check(e, seed += 10, kernel_emulator::Copies::eager);
}

// Copies whose bytes land only at the wait that retires them, where a tile read before its wait
// shows (the eager copies of the test above show a stage refilled before its readers are done).
TEST(GpuAttentionEmulated, CopiesLandingAtTheWait) {
  using namespace gpu_attention_emulated;
  check(kStages, 1910, kernel_emulator::Copies::lazy);
  check(kCausal, 1920, kernel_emulator::Copies::lazy);
}
