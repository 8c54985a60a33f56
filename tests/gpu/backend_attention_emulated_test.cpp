// Flash attention's body (src/backends/cuda/attention_kernels.h, the template NVRTC
// instantiates) on the emulated grid of kernel_emulator.h, without a GPU: the 128-row blocks and
// 64-key tiles, both shared stages and the copies in flight, the tiles checked or not, the warps
// that skip a tile under the causal cut, and every index, against the float64 loops of
// attention_cases.h on the inputs the GPU test draws. Each case runs with cp.async's bytes landing
// at the copy and again at the wait that retires it.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_tensor.h"
#include "backends/cuda/attention_hopper.h"
#include "backends/cuda/attention_kernels.h"
#include "contract/attention_dropout.h"
#include "gpu/attention_cases.h"
#include "kernel_emulator.h"
#include "runtime/registry.h"

// The primitives attention_kernels.h declares for the host.
namespace kiln::cuda::attention_kernels {

unsigned ka_thread() { return kernel_emulator::t_thread; }
unsigned ka_block() { return kernel_emulator::t_block; }
void ka_sync() { kernel_emulator::sync_block(); }
void ka_copy16(unsigned short* dst, const unsigned short* src, bool valid) {
  kernel_emulator::copy16(dst, src, valid);
}
void ka_copy8(float* dst, const float* src, bool valid) {
  kernel_emulator::copy_async(dst, src, 8, valid);
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

// attention_hopper.h's: the fences order nothing the emulated grid reorders; the products are
// done at the call or at the wait (kernel_emulator::g_products).
unsigned kh_address(const void* p) {
  return static_cast<unsigned>(static_cast<const unsigned char*>(p) - kernel_emulator::t_smem);
}
void kh_fence_shared() {}
void kh_fence() {}
void kh_commit() { kernel_emulator::commit_products(); }
void kh_wait_host(int pending) { kernel_emulator::wait_products(pending); }
void kh_host_scores(float* d, int n, KhDesc a, KhDesc b, bool accumulate, bool bf16) {
  kernel_emulator::wgmma_shared(d, n, a, b, accumulate, bf16);
}
void kh_host_accumulate(float* d, int n, const unsigned* a, KhDesc b, bool bf16) {
  kernel_emulator::wgmma_registers(d, n, a, b, bf16);
}
void kh_host_product_mn(float* d, KhDesc a, KhDesc b, bool accumulate, bool bf16) {
  kernel_emulator::wgmma_shared(d, 64, a, b, accumulate, bf16, /*k_major=*/false);
}
// The GPU's reductions are atomic; the emulated grid's fibers never interleave inside one.
void kh_red_add2(float* at, float x, float y) {
  at[0] += x;
  at[1] += y;
}

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

// The kernels' parameters for c's inputs, as cuda_attention.cpp fills them (no outputs yet).
template <int KD>
ka::KaParams params_of(const AttentionCase& c, const Inputs& in) {
  ka::KaParams p{};
  p.batch = c.batch;
  p.heads = c.heads;
  p.queries = c.queries;
  p.keys = c.keys;
  p.q = address_and_strides(in.q, p.q_strides);
  p.k = address_and_strides(in.k, p.k_strides);
  p.v = address_and_strides(in.v, p.v_strides);
  if (in.mask) p.mask = address_and_strides(*in.mask, p.mask_strides);
  if (in.bias) p.bias = address_and_strides(*in.bias, p.bias_strides);
  const double scale = 1 / std::sqrt(static_cast<double>(KD));
  p.scale = static_cast<float>(scale);
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  p.causal = c.causal ? 1 : 0;
  return p;
}

// body(p, smem) over `blocks` blocks of every (batch, head): the mma.sync kernels' blocks.
template <class Body>
void launch_blocks(const ka::KaParams& p, long long blocks, int depth, Body body) {
  kernel_emulator::launch(
      static_cast<unsigned>(p.batch * p.heads * blocks), ka::kKaThreads, ka::ka_shared_bytes(depth),
      [&](unsigned char* smem) { body(p, reinterpret_cast<unsigned short*>(smem)); });
}
// The Hopper kernel's blocks (attention_hopper.h), with `shared` bytes (0: kh_shared_bytes).
template <class Body>
void launch_hopper_blocks(const ka::KaParams& p, long long blocks, int depth, Body body,
                          int shared = 0) {
  kernel_emulator::launch(static_cast<unsigned>(p.batch * p.heads * blocks), ka::kKhThreads,
                          shared != 0 ? shared : ka::kh_shared_bytes(depth),
                          [&](unsigned char* smem) { body(p, smem); });
}

// Which forward body: attention_kernels.h's, attention_hopper.h's, or its pipelined one.
enum Body { kMmaSync, kHopper, kPipelined };

// c's attention through a forward body on the emulated grid.
template <int KD, bool kBf16, bool kMask, bool kBias, Body kBody = kMmaSync>
TensorData run_kernel(const AttentionCase& c, const Inputs& in) {
  EXPECT_EQ(c.depth, KD);
  EXPECT_EQ(c.dtype == DType::BF16, kBf16);
  EXPECT_EQ(in.mask.has_value(), kMask);
  EXPECT_EQ(in.bias.has_value(), kBias);
  ka::KaParams p = params_of<KD>(c, in);
  // Every element of the output is written: a NaN pattern where one is not shows.
  std::vector<unsigned short> out(static_cast<std::size_t>(c.batch * c.heads * c.queries * KD),
                                  0x7FC1);
  p.out = reinterpret_cast<std::uintptr_t>(out.data());
  if constexpr (kBody == kHopper) {
    p.query_blocks = (c.queries + ka::kKhRows - 1) / ka::kKhRows;
    launch_hopper_blocks(p, p.query_blocks, KD, ka::kh_attention<KD, kBf16, kMask, kBias, false>);
  } else if constexpr (kBody == kPipelined) {
    p.query_blocks = (c.queries + ka::kKhRows - 1) / ka::kKhRows;
    launch_hopper_blocks(p, p.query_blocks, KD,
                         ka::kh_attention_pipelined<KD, kBf16, kMask, kBias>);
  } else {
    p.query_blocks = (c.queries + ka::kKaRows - 1) / ka::kKaRows;
    launch_blocks(p, p.query_blocks, KD, ka::ka_attention<KD, kBf16, kMask, kBias, false>);
  }
  std::vector<std::byte> bytes(out.size() * 2);
  std::memcpy(bytes.data(), out.data(), bytes.size());
  return TensorData(std::move(bytes), Shape{c.batch, c.heads, c.queries, KD}, c.dtype);
}

// The backward kernels' outputs for c, their addresses set in p: the statistics, dq (zeros for
// the merged kernel, which adds to it; NaN otherwise, so an element left unwritten shows), dk
// and dv (f32, at every head).
struct GradBuffers {
  std::vector<float> stats, dq, dk, dv;
  GradBuffers(const AttentionCase& c, int depth, bool merged, ka::KaParams& p) {
    const long long rows = c.batch * c.heads * c.queries;
    stats.assign(static_cast<std::size_t>(ka::ka_stats_floats(rows)), NAN);
    dq.assign(static_cast<std::size_t>(rows * depth), merged ? 0.f : NAN);
    dk.assign(static_cast<std::size_t>(c.batch * c.heads * c.keys * depth), NAN);
    dv.assign(dk.size(), NAN);
    p.stats = reinterpret_cast<std::uintptr_t>(stats.data());
    p.dq = reinterpret_cast<std::uintptr_t>(dq.data());
    p.dk = reinterpret_cast<std::uintptr_t>(dk.data());
    p.dv = reinterpret_cast<std::uintptr_t>(dv.data());
  }
  static std::vector<double> wide(const std::vector<float>& v) {
    return std::vector<double>(v.begin(), v.end());
  }
};

// Where the backward pass's statistics come from: their own pass, or L from a forward pass
// (the family's own, or the pipelined Hopper one) and D from ka_attention_delta.
enum Stats { kStatsPass, kFromForward, kFromPipelined };

// The backward pass's kernels on the emulated grid for c's inputs and a random output gradient:
// the statistics (for the float64 output rounded to dtype, as the forward pass would give it),
// then dq, and dk with dv (kHopper: attention_hopper.h's three), against float64 loops.
template <int KD, bool kBf16, bool kMask, bool kBias, bool kHopper = false,
          Stats kStats = kStatsPass, bool kMerged = false>
void check_backward(const AttentionCase& c, const Inputs& in, std::uint64_t seed) {
  ka::KaParams p = params_of<KD>(c, in);
  const Shape out_shape{c.batch, c.heads, c.queries, KD};
  std::optional<Host4> mask, bias;
  if (in.mask) mask = host4(*in.mask);
  if (in.bias) bias = host4(*in.bias);
  const double scale = 1 / std::sqrt(static_cast<double>(KD));
  const Reference forward =
      reference(host4(in.q), host4(in.k), host4(in.v), mask, bias, scale, c.causal);
  const Primitive out =
      kiln::detail::from_data(TensorData::from_vec(forward.values, out_shape).convert(c.dtype),
                              Device::cpu(), kiln::Kind::Float, 4);
  const Primitive grad = host_random(out_shape, c.dtype, seed, -1, 1);
  long long unused[3];
  p.out = address_and_strides(out, unused);
  p.grad = address_and_strides(grad, unused);
  const long long rows = c.batch * c.heads * c.queries;
  const GradBuffers grads(c, KD, kMerged, p);
  if constexpr (kStats != kStatsPass) {
    // The forward pass writes L beside an output of its own; D comes from the reference's.
    std::vector<unsigned short> forward_out(static_cast<std::size_t>(rows * KD));
    ka::KaParams f = p;
    f.out = reinterpret_cast<std::uintptr_t>(forward_out.data());
    if constexpr (kStats == kFromPipelined) {
      f.query_blocks = (c.queries + ka::kKhRows - 1) / ka::kKhRows;
      launch_hopper_blocks(f, f.query_blocks, KD,
                           ka::kh_attention_pipelined<KD, kBf16, kMask, kBias>);
    } else if constexpr (kHopper) {
      f.query_blocks = (c.queries + ka::kKhRows - 1) / ka::kKhRows;
      launch_hopper_blocks(f, f.query_blocks, KD, ka::kh_attention<KD, kBf16, kMask, kBias, false>);
    } else {
      f.query_blocks = (c.queries + ka::kKaRows - 1) / ka::kKaRows;
      launch_blocks(f, f.query_blocks, KD, ka::ka_attention<KD, kBf16, kMask, kBias, false>);
    }
    p.query_blocks = (c.queries + ka::kKaThreads / 32 - 1) / (ka::kKaThreads / 32);
    launch_blocks(p, p.query_blocks, KD, ka::ka_attention_delta<KD, kBf16, kMask, kBias>);
  }
  if constexpr (kHopper) {
    p.query_blocks = (c.queries + ka::kKhRows - 1) / ka::kKhRows;
    if constexpr (kStats == kStatsPass) {
      launch_hopper_blocks(p, p.query_blocks, KD, ka::kh_attention<KD, kBf16, kMask, kBias, true>);
    }
    if constexpr (kMerged) {
      launch_hopper_blocks(p, (c.keys + ka::kKhRows - 1) / ka::kKhRows, KD,
                           ka::kh_attention_dkv<KD, kBf16, kMask, kBias, true>,
                           std::max(ka::kh_shared_bytes(KD), ka::kh_dqkv_shared_bytes(KD)));
    } else {
      launch_hopper_blocks(p, p.query_blocks, KD, ka::kh_attention_dq<KD, kBf16, kMask, kBias>);
      launch_hopper_blocks(p, (c.keys + ka::kKhRows - 1) / ka::kKhRows, KD,
                           ka::kh_attention_dkv<KD, kBf16, kMask, kBias>);
    }
  } else {
    p.query_blocks = (c.queries + ka::kKaRows - 1) / ka::kKaRows;
    if constexpr (kStats == kStatsPass) {
      launch_blocks(p, p.query_blocks, KD, ka::ka_attention<KD, kBf16, kMask, kBias, true>);
    }
    p.query_blocks = (c.queries + ka::kKaKeys - 1) / ka::kKaKeys;
    launch_blocks(p, p.query_blocks, KD, ka::ka_attention_dq<KD, kBf16, kMask, kBias>);
    launch_blocks(p, (c.keys + ka::kKaKeys - 1) / ka::kKaKeys, KD,
                  ka::ka_attention_dkv<KD, kBf16, kMask, kBias>);
  }
  const ReferenceGrads want = reference_grads(host4(in.q), host4(in.k), host4(in.v), mask, bias,
                                              host4(grad), scale, c.causal);
  expect_near(GradBuffers::wide(grads.dq), want.dq, c.dtype, describe(c) + " dq");
  expect_near(GradBuffers::wide(grads.dk), want.dk, c.dtype, describe(c) + " dk");
  expect_near(GradBuffers::wide(grads.dv), want.dv, c.dtype, describe(c) + " dv");
}

// Dropout's bodies (kDropout: the forward pass, dq, dk and dv) for c's inputs against the CPU
// backend's attention and gradients with the same seed, computed in float64 (the conformance
// rows check those against float64 loops of their own). The backward pass takes the emulated
// forward pass's output and its statistics from their own pass. kHopper: attention_hopper.h's
// bodies (kMerged: dq from the dk/dv body).
template <int KD, bool kBf16, bool kMask, bool kBias, bool kHopper = false, bool kMerged = false>
void check_dropout(const AttentionCase& c, const Inputs& in, std::uint64_t seed) {
  const double probability = 0.3;
  const std::int64_t seed_value = static_cast<std::int64_t>(seed) * 7919;
  const kiln::AttentionDropout dropout(probability);
  ka::KaParams p = params_of<KD>(c, in);
  p.dropout_seed = reinterpret_cast<std::uintptr_t>(&seed_value);
  p.dropout_threshold = dropout.threshold;
  p.dropout_scale = dropout.scale;
  const long long rows = c.batch * c.heads * c.queries;
  const Shape out_shape{c.batch, c.heads, c.queries, KD};
  std::vector<unsigned short> out(static_cast<std::size_t>(rows * KD), 0x7FC1);
  p.out = reinterpret_cast<std::uintptr_t>(out.data());
  if constexpr (kHopper) {
    p.query_blocks = (c.queries + ka::kKhRows - 1) / ka::kKhRows;
    launch_hopper_blocks(p, p.query_blocks, KD,
                         ka::kh_attention<KD, kBf16, kMask, kBias, false, true>);
  } else {
    p.query_blocks = (c.queries + ka::kKaRows - 1) / ka::kKaRows;
    launch_blocks(p, p.query_blocks, KD, ka::ka_attention<KD, kBf16, kMask, kBias, false, true>);
  }
  std::vector<std::byte> bytes(out.size() * 2);
  std::memcpy(bytes.data(), out.data(), bytes.size());
  const TensorData got_out(std::move(bytes), out_shape, c.dtype);

  kiln::Backend& cpu = kiln::backend_for(Device::cpu());
  auto wide = [&](const Primitive& x) { return cpu.cast(x, DType::F64); };
  const Primitive seed_operand =
      kiln::detail::from_data(TensorData::from_vec(std::vector<std::int64_t>{seed_value}, Shape{1}),
                              Device::cpu(), kiln::Kind::Int, 1);
  const kiln::AttentionOptions options{
      .scale = std::nullopt, .is_causal = c.causal, .dropout = probability};
  std::optional<Primitive> bias;
  if (in.bias) bias = wide(*in.bias);
  // k and v at every head, as the kernels write dk and dv (the plugin sums broadcast heads).
  const Shape keys_shape{c.batch, c.heads, c.keys, KD};
  const Primitive q = wide(in.q), k = cpu.expand(wide(in.k), keys_shape),
                  v = cpu.expand(wide(in.v), keys_shape);
  const TensorData want_out =
      kiln::detail::into_data(cpu.attention(q, k, v, in.mask, bias, seed_operand, options));
  expect_near(got_out.to_f64_vec(), want_out.to_f64_vec(), c.dtype, describe(c) + " dropout out");

  // The backward pass: statistics, then dq, dk and dv with the mask remade.
  const Primitive grad = host_random(out_shape, c.dtype, seed + 1, -1, 1);
  const Primitive out_operand =
      kiln::detail::from_data(got_out, Device::cpu(), kiln::Kind::Float, 4);
  long long unused[3];
  p.out = address_and_strides(out_operand, unused);
  p.grad = address_and_strides(grad, unused);
  const GradBuffers grads(c, KD, kMerged, p);
  if constexpr (kHopper) {
    launch_hopper_blocks(p, p.query_blocks, KD, ka::kh_attention<KD, kBf16, kMask, kBias, true>);
    const long long key_blocks = (c.keys + ka::kKhRows - 1) / ka::kKhRows;
    if constexpr (kMerged) {
      launch_hopper_blocks(p, key_blocks, KD,
                           ka::kh_attention_dkv<KD, kBf16, kMask, kBias, true, true>,
                           std::max(ka::kh_shared_bytes(KD), ka::kh_dqkv_shared_bytes(KD)));
    } else {
      launch_hopper_blocks(p, p.query_blocks, KD,
                           ka::kh_attention_dq<KD, kBf16, kMask, kBias, true>);
      launch_hopper_blocks(p, key_blocks, KD,
                           ka::kh_attention_dkv<KD, kBf16, kMask, kBias, false, true>);
    }
  } else {
    launch_blocks(p, p.query_blocks, KD, ka::ka_attention<KD, kBf16, kMask, kBias, true>);
    p.query_blocks = (c.queries + ka::kKaKeys - 1) / ka::kKaKeys;
    launch_blocks(p, p.query_blocks, KD, ka::ka_attention_dq<KD, kBf16, kMask, kBias, true>);
    launch_blocks(p, (c.keys + ka::kKaKeys - 1) / ka::kKaKeys, KD,
                  ka::ka_attention_dkv<KD, kBf16, kMask, kBias, true>);
  }
  const Primitive g = wide(grad), o = wide(out_operand);
  const std::vector<double> want_dq =
      kiln::detail::into_data(
          cpu.attention_query_backward(q, k, v, o, g, in.mask, bias, seed_operand, options))
          .to_f64_vec();
  const auto [want_dk, want_dv] =
      cpu.attention_key_value_backward(q, k, v, o, g, in.mask, bias, seed_operand, options);
  expect_near(GradBuffers::wide(grads.dq), want_dq, c.dtype, describe(c) + " dropout dq");
  expect_near(GradBuffers::wide(grads.dk), kiln::detail::into_data(want_dk).to_f64_vec(), c.dtype,
              describe(c) + " dropout dk");
  expect_near(GradBuffers::wide(grads.dv), kiln::detail::into_data(want_dv).to_f64_vec(), c.dtype,
              describe(c) + " dropout dv");
}

struct EmulatedCase {
  AttentionCase c;
  TensorData (*run)(const AttentionCase&, const Inputs&);
};

struct BackwardCase {
  AttentionCase c;
  void (*check)(const AttentionCase&, const Inputs&, std::uint64_t);
};

// Each case's check on inputs drawn from seed + 10, + 20, ...
template <std::size_t N>
void run_backward_cases(const BackwardCase (&cases)[N], std::uint64_t seed) {
  for (const BackwardCase& e : cases) {
    SCOPED_TRACE(describe(e.c));
    const Inputs in = make_inputs(e.c, seed += 10);
    e.check(e.c, in, seed + 5);
  }
}

}  // namespace gpu_attention_emulated

namespace gpu_attention_emulated {

void check(const EmulatedCase& e, std::uint64_t seed, kernel_emulator::Copies copies,
           kernel_emulator::Copies products = kernel_emulator::Copies::eager) {
  SCOPED_TRACE(describe(e.c) +
               (copies == kernel_emulator::Copies::lazy ? ", copies land late" : "") +
               (products == kernel_emulator::Copies::lazy ? ", products complete late" : ""));
  const Inputs in = make_inputs(e.c, seed);
  kernel_emulator::g_copies = copies;
  kernel_emulator::g_products = products;
  expect_matches(e.c, in, e.run(e.c, in));
  kernel_emulator::g_copies = kernel_emulator::Copies::eager;
  kernel_emulator::g_products = kernel_emulator::Copies::eager;
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

// The backward pass: statistics, dq, dk and dv against float64 loops; blocks and tiles cut by the
// ends and the causal diagonal, a mask and a bias, one key/value head for every query head, rows
// with every key masked.
TEST(GpuAttentionEmulated, BackwardKernelsMatchFloat64Reference) {
  using namespace gpu_attention_emulated;
  const BackwardCase cases[] = {
      {{b, 1, 2, 130, 150, 64, none, false, true}, &check_backward<64, true, false, false>},
      {{h, 2, 1, 70, 90, 32, MaskKind::Full, true, false}, &check_backward<32, false, true, true>},
      {{h, 2, 2, 33, 90, 16, none, false, true, Layout::Contiguous, 1},
       &check_backward<16, false, false, false>},
      {{b, 3, 2, 20, 70, 64, MaskKind::Padding}, &check_backward<64, true, true, false>},
      // L kept by the forward pass, D from ka_attention_delta.
      {{h, 2, 1, 70, 90, 32, MaskKind::Full, true, false},
       &check_backward<32, false, true, true, false, kFromForward>},
      {{b, 3, 2, 20, 70, 64, MaskKind::Padding},
       &check_backward<64, true, true, false, false, kFromForward>},
  };
  run_backward_cases(cases, 2900);
}

// Dropout in the forward, dq and dk/dv bodies: the mask made from the seed per (query, key) in
// each tile's layout (transposed in dk/dv), the kept weights scaled, the sums over all of them;
// tiles cut by the ends and the causal diagonal, a mask and a bias, broadcast key/value heads.
TEST(GpuAttentionEmulated, DropoutBodiesMatchTheCpuBackend) {
  using namespace gpu_attention_emulated;
  const BackwardCase cases[] = {
      {{b, 1, 2, 130, 150, 64, none, false, true}, &check_dropout<64, true, false, false>},
      {{h, 2, 1, 70, 90, 32, MaskKind::Full, true, false}, &check_dropout<32, false, true, true>},
      {{h, 2, 2, 33, 90, 16, none, false, true, Layout::Contiguous, 1},
       &check_dropout<16, false, false, false>},
      // The Hopper bodies: two key tiles of 128 forward (the last partial), the causal
      // diagonal, a mask and a bias, dq from the dk/dv body.
      {{b, 1, 2, 130, 200, 64, none, false, true}, &check_dropout<64, true, false, false, true>},
      {{h, 2, 1, 70, 150, 128, MaskKind::Full, true, false},
       &check_dropout<128, false, true, true, true>},
      {{b, 2, 2, 33, 150, 64, none, false, true, Layout::Contiguous, 1},
       &check_dropout<64, true, false, false, true, true>},
  };
  run_backward_cases(cases, 3900);
}

// The Hopper kernel (attention_hopper.h: warpgroup products on swizzled tiles read through
// descriptors) against the same float64 loops: two query blocks and three key tiles of 128 (both
// stages, the last partial), the causal diagonal across three query blocks with rows past the end,
// a mask and a bias, heads viewed out of [B, S, H, D], one key/value head for every query head,
// a padding mask that keeps no key, a NaN row; copies landing at the copy and (for the stages) at
// the wait.
TEST(GpuAttentionEmulated, HopperKernelMatchesFloat64Reference) {
  using namespace gpu_attention_emulated;
  const EmulatedCase stages = {{b, 1, 2, 200, 300, 64},
                               &run_kernel<64, true, false, false, kHopper>};
  const EmulatedCase causal = {{h, 1, 1, 260, 260, 128, none, false, true},
                               &run_kernel<128, false, false, false, kHopper>};
  const EmulatedCase cases[] = {
      {{b, 2, 1, 70, 129, 64, MaskKind::Full, true, false},
       &run_kernel<64, true, true, true, kHopper>},
      {{h, 1, 2, 70, 140, 128, none, false, false, Layout::HeadsOfRows},
       &run_kernel<128, false, false, false, kHopper>},
      {{b, 2, 2, 33, 90, 64, none, false, true, Layout::Contiguous, 1},
       &run_kernel<64, true, false, false, kHopper>},
      {{b, 3, 2, 20, 128, 128, MaskKind::Padding}, &run_kernel<128, true, true, false, kHopper>},
      {{b, 1, 2, 40, 40, 64, none, false, false, Layout::Contiguous, 0, true},
       &run_kernel<64, true, false, false, kHopper>},
  };
  check(stages, 3910, kernel_emulator::Copies::eager);
  check(stages, 3920, kernel_emulator::Copies::lazy, kernel_emulator::Copies::lazy);
  check(causal, 3930, kernel_emulator::Copies::eager);
  std::uint64_t seed = 3950;
  for (const EmulatedCase& e : cases) check(e, seed += 10, kernel_emulator::Copies::eager);
}

// The Hopper kernels' backward pass: statistics, dq, dk and dv against float64 loops; blocks and
// tiles cut by the ends and the causal diagonal (warpgroups that skip a tile), a mask and a bias,
// one key/value head for every query head, rows with every key masked.
TEST(GpuAttentionEmulated, HopperBackwardKernelsMatchFloat64Reference) {
  using namespace gpu_attention_emulated;
  const BackwardCase cases[] = {
      {{b, 1, 2, 200, 230, 64, none, false, true}, &check_backward<64, true, false, false, true>},
      {{h, 2, 1, 70, 90, 128, MaskKind::Full, true, false},
       &check_backward<128, false, true, true, true>},
      {{b, 2, 2, 33, 150, 64, none, false, true, Layout::Contiguous, 1},
       &check_backward<64, true, false, false, true>},
      {{b, 3, 1, 20, 70, 128, MaskKind::Padding}, &check_backward<128, true, true, false, true>},
      // L kept by the forward pass (the plain and the pipelined one), D from ka_attention_delta.
      {{b, 1, 2, 200, 230, 64, none, false, true},
       &check_backward<64, true, false, false, true, kFromForward>},
      {{h, 2, 1, 70, 90, 128, MaskKind::Full, true, false},
       &check_backward<128, false, true, true, true, kFromPipelined>},
      // dq added by the dk/dv kernel (kQuery): two key blocks over the causal diagonal (a
      // warpgroup that skips a tile), keys and queries past the ends, a mask and a bias, one
      // key/value head for two query heads, head dim 64 (one warpgroup's product).
      {{b, 1, 2, 200, 230, 128, none, false, true},
       &check_backward<128, true, false, false, true, kFromForward, true>},
      {{h, 2, 1, 70, 150, 64, MaskKind::Full, true, false},
       &check_backward<64, false, true, true, true, kFromForward, true>},
      {{b, 2, 2, 33, 150, 64, none, false, true, Layout::Contiguous, 1},
       &check_backward<64, true, false, false, true, kStatsPass, true>},
  };
  run_backward_cases(cases, 4900);
  // The merged kernel with its copies landing at their waits: a stage of q or dO read before its
  // group is waited for, or refilled while another warp reads it, shows.
  kernel_emulator::g_copies = kernel_emulator::Copies::lazy;
  const BackwardCase lazy[] = {
      {{b, 1, 2, 200, 230, 128, none, false, true},
       &check_backward<128, true, false, false, true, kFromForward, true>},
  };
  run_backward_cases(lazy, 5900);
  kernel_emulator::g_copies = kernel_emulator::Copies::eager;
}

// The pipelined Hopper forward pass (tile j + 1's scores and softmax beside tile j's sum): with
// products completing at their waits, a score read before its wait or the values rescaled before
// their sum completes shows; with copies landing at their waits, a k or v tile read before its
// group is waited for shows. Stages reused (five key tiles), the causal diagonal, a mask and a
// bias.
TEST(GpuAttentionEmulated, PipelinedHopperKernelMatchesFloat64Reference) {
  using namespace gpu_attention_emulated;
  using kernel_emulator::Copies;
  const EmulatedCase stages = {{b, 1, 1, 130, 600, 64},
                               &run_kernel<64, true, false, false, kPipelined>};
  const EmulatedCase causal = {{h, 1, 1, 260, 260, 128, none, false, true},
                               &run_kernel<128, false, false, false, kPipelined>};
  const EmulatedCase masked = {{b, 2, 1, 70, 300, 64, MaskKind::Full, true, false},
                               &run_kernel<64, true, true, true, kPipelined>};
  check(stages, 5910, Copies::eager);
  check(stages, 5920, Copies::lazy, Copies::lazy);
  check(causal, 5930, Copies::lazy, Copies::lazy);
  check(masked, 5940, Copies::eager, Copies::lazy);
}
