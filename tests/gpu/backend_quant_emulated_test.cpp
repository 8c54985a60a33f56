// The quantized kernels' bodies (src/backends/cuda/quant_kernels.h, the templates NVRTC
// instantiates) run on the host, without a GPU: an emulated grid (kernel_emulator.h) runs a fiber
// per CUDA thread, __syncthreads is a barrier of the block's threads, cp.async a copy, and
// mma.sync a barrier of the warp's 32 lanes around PTX's m16n8k16 computed from all their
// fragments. So the tile staging (weights at any alignment), the splits of k, the predicates on
// rows past the ends and every index of kiln_quant_product, kiln_quant_decode and kiln_quant_split
// are checked against float64 references and the host decoder here; the GPU run checks the CUDA
// itself.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "backends/cuda/quant.h"
#include "backends/cuda/quant_blocks.h"
#include "backends/cuda/quant_kernels.h"
#include "kernel_emulator.h"
#include "quant/block_reference.h"
#include "support/int8_rounded_x.h"

namespace gpu_quant_emulated {

namespace qb = kiln::cuda::quant_blocks;

using namespace kernel_emulator;

}  // namespace gpu_quant_emulated

// The primitives quant_kernels.h declares for the host.
namespace kiln::cuda::quant_blocks {

unsigned kq_thread() { return gpu_quant_emulated::t_thread; }
unsigned kq_block() { return gpu_quant_emulated::t_block; }
unsigned kq_block_threads() { return gpu_quant_emulated::t_threads; }
unsigned kq_grid_blocks() { return gpu_quant_emulated::t_blocks; }
void kq_sync() { gpu_quant_emulated::t_shared->barrier.arrive_and_wait(); }
void kq_fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
void kq_warp_sync() {
  gpu_quant_emulated::t_shared->warps[gpu_quant_emulated::t_thread / 32].barrier.arrive_and_wait();
}
unsigned kq_shfl_xor(unsigned v, int mask) { return kernel_emulator::shfl_xor(v, mask); }
unsigned kq_ticket(unsigned* counter) { return std::atomic_ref<unsigned>(*counter).fetch_add(1); }

// PTX's integer mma.m16n8k32 (m16n8k16 with k16), A's bytes signed or unsigned, B's signed: lane
// 4g + t holds A elements (g, 4t..4t+3) in a[0], (g + 8, 4t..) in a[1], (g, 16 + 4t..) in a[2]
// and (g + 8, 16 + 4t..) in a[3]; B elements (4t..4t+3, g) in b0 and (16 + 4t.., g) in b1; C as
// the float product's. Exact 32-bit sums.
void kq_host_mma_i8(int* c, const unsigned* a, unsigned b0, unsigned b1, bool k16, bool is_signed) {
  using namespace gpu_quant_emulated;
  const unsigned lane = t_thread % 32;
  Warp& warp = share_fragments(lane, a, b0, b1);
  const int g = static_cast<int>(lane) / 4, t = static_cast<int>(lane) % 4;
  auto a_at = [&](int row, int k) {
    const int owner = 4 * (row % 8) + (k % 16) / 4;
    const int reg = (row >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0);
    const unsigned byte = (warp.a[owner][reg] >> (8 * (k % 4))) & 0xFF;
    return is_signed ? static_cast<int>(static_cast<signed char>(byte)) : static_cast<int>(byte);
  };
  auto b_at = [&](int k, int col) {
    const int owner = 4 * col + (k % 16) / 4;
    return static_cast<int>(
        static_cast<signed char>((warp.b[owner][k >= 16 ? 1 : 0] >> (8 * (k % 4))) & 0xFF));
  };
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < (k16 ? 16 : 32); ++k) c[i] += a_at(rows[i], k) * b_at(k, cols[i]);
  }
  warp.barrier.arrive_and_wait();
}

}  // namespace kiln::cuda::quant_blocks

namespace gpu_quant_emulated {

using kiln::DType;
using kiln::QuantScheme;
using kiln::Shape;
using kiln::TensorData;
using QKind = QuantScheme::Kind;

std::vector<float> normal_values(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// A [rows, cols] weight of scheme: the encoder's blocks of normal values, or random blocks of
// modest scales for the kinds kiln only decodes.
TensorData weight_of(const QuantScheme& scheme, std::int64_t rows, std::int64_t cols,
                     std::uint32_t seed) {
  if (kiln::can_quantize(scheme)) {
    return TensorData::from_vec(normal_values(rows * cols, seed), Shape{rows, cols})
        .quantize(scheme);
  }
  std::mt19937 rng(seed);
  const auto layout = kiln::quant_testing::layout(scheme.kind);
  std::vector<std::byte> bytes = kiln::quant_testing::random_blocks(
      scheme.kind, static_cast<int>(rows * cols / layout.values), rng);
  for (std::size_t b = 0; b < bytes.size() / static_cast<std::size_t>(layout.bytes); ++b) {
    for (int at : kiln::quant_testing::f16_fields(scheme.kind)) {
      const auto bits = static_cast<std::uint16_t>(0x1800 + (rng() & 0x0FFF) + ((rng() & 1) << 15));
      std::memcpy(bytes.data() + b * static_cast<std::size_t>(layout.bytes) + at, &bits, 2);
    }
    if (scheme.kind == QKind::Q8_K) {
      const float d = std::uniform_real_distribution<float>(-0.01f, 0.01f)(rng);
      std::memcpy(bytes.data() + b * static_cast<std::size_t>(layout.bytes), &d, 4);
    }
  }
  return TensorData::quantized(std::move(bytes), Shape{rows, cols}, scheme);
}

// bytes copied to a host buffer at an address that is `misalign` past a 16-byte boundary.
struct Placed {
  std::vector<unsigned char> storage;
  const unsigned char* data = nullptr;
};
Placed place(std::span<const std::byte> bytes, std::size_t misalign) {
  Placed p;
  p.storage.resize(bytes.size() + 64);
  auto* base = p.storage.data();
  base += (16 - reinterpret_cast<std::uintptr_t>(base) % 16) % 16 + misalign;
  std::memcpy(base, bytes.data(), bytes.size());
  p.data = base;
  return p;
}

std::uint64_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// The plugin's x planes: 16-bit values of x, or f32 x in three bf16 parts through
// kiln_quant_split's body.
std::vector<unsigned short> planes_of(const std::vector<float>& x, DType dtype) {
  std::vector<unsigned short> planes;
  if (dtype == DType::F32) {
    planes.resize(3 * x.size());
    qb::KqSplitParams p{address(x.data()), address(planes.data()),
                        static_cast<long long>(x.size())};
    launch(2, 64, 0, [&](unsigned char*) { qb::kq_split(p); });
  } else {
    for (float v : x) {
      planes.push_back(static_cast<unsigned short>(qb::kq_float_to_elem(v, dtype == DType::BF16)));
    }
  }
  return planes;
}

// x [rows, k] rounded to int8 blocks through kiln_quant_round's body (kTerms 0): the codes and
// their blocks' scales.
struct Int8X {
  std::vector<unsigned char> codes;
  std::vector<float> scales;
};
Int8X int8_x_of(const std::vector<float>& x, std::int64_t rows, std::int64_t k) {
  Int8X out{std::vector<unsigned char>(x.size(), 0xA5), std::vector<float>(x.size() / 8, NAN)};
  const qb::KqRoundParams p{address(x.data()), address(out.codes.data()),
                            address(out.scales.data()), rows, k};
  launch(2, 64, 0, [&](unsigned char*) { qb::kq_round_x<0>(p); });
  return out;
}

// What a product kernel writes, set in p (whose n, rows, splits, row_tiles and column_groups
// are set): NaN-filled output and partial sums, split-k counters at 0, the bias if any. take()
// checks that the launch left the counters at 0 and gives the output.
struct Outputs {
  Outputs(qb::KqProductParams& p, const std::vector<float>& bias)
      : partial(static_cast<std::size_t>(p.splits * p.rows * p.n), NAN),
        out(static_cast<std::size_t>(p.rows * p.n), NAN),
        counters(static_cast<std::size_t>(p.row_tiles * p.column_groups), 0) {
    p.partial = p.splits > 1 ? address(partial.data()) : 0;
    p.out = address(out.data());
    p.bias = bias.empty() ? 0 : address(bias.data());
    p.counters = address(counters.data());
  }
  std::vector<float> take() {
    for (std::size_t i = 0; i < counters.size(); ++i) {
      EXPECT_EQ(counters[i], 0u) << "split-k counter " << i << " after the launch";
    }
    return std::move(out);
  }
  std::vector<float> partial, out;
  std::vector<unsigned> counters;
};

// The generated kernel's KqOut on the host: f32 out, plus an f32 bias where there is one.
struct HostOut {
  static void store(const qb::KqProductParams& p, long long at, long long row, float s) {
    if (p.bias != 0) s += reinterpret_cast<const float*>(p.bias)[row];
    reinterpret_cast<float*>(p.out)[at] = s;
  }
};

// x [rows, k] times the weight's transpose (plus bias, where it is not empty) through
// kq_product's body on the emulated grid, in `splits` splits of k, the last split of each output
// tile summing them; the split-k counters must be 0 again after.
template <class K, bool kBf16, int kTerms, int kNt, int kInt8, int kStride>
std::vector<float> emulate_product(const TensorData& w, std::size_t misalign, const void* x,
                                   const float* x_scales, std::int64_t rows, int splits,
                                   const std::vector<float>& bias) {
  const std::int64_t n = w.shape()[0], k = w.shape()[1];
  const Placed weight = place(w.bytes(), misalign);
  const QuantScheme& scheme = w.scheme();
  const std::int64_t tiles = (k + 255) / 256;
  qb::KqProductParams p{};
  p.weight = address(weight.data);
  p.x = address(x);
  p.x_scales = address(x_scales);
  p.n = n;
  p.k = k;
  p.rows = rows;
  p.row_bytes = static_cast<long long>(w.bytes().size()) / n;
  p.plane = rows * k;
  p.int8_block = scheme.kind == QKind::Int8Channel ? k : scheme.block_size;
  p.row_tiles = static_cast<int>((n + 63) / 64);
  p.column_groups = static_cast<int>((rows + kNt * 8 - 1) / (kNt * 8));
  p.tiles_per_split = static_cast<int>((tiles + splits - 1) / splits);
  p.splits = static_cast<int>((tiles + p.tiles_per_split - 1) / p.tiles_per_split);
  Outputs outputs(p, bias);
  const auto blocks = static_cast<unsigned>(p.row_tiles * p.column_groups * p.splits);
  const std::size_t shared = kiln::cuda::kQuantStages * qb::kq_stage_bytes<kTerms, kNt, kStride>();
  launch(blocks, kiln::cuda::kQuantThreads, shared, [&](unsigned char* smem) {
    qb::kq_product<K, kBf16, kTerms, kNt, kInt8, kStride, kiln::cuda::kQuantStages, HostOut>(p,
                                                                                             smem);
  });
  return outputs.take();
}

// got [rows, n] against float64 sums of x times the decoded weight, within f32 sums of the
// magnitudes; row nan_row of x holds a NaN, so its outputs must be NaN.
void expect_product(const std::vector<float>& got, const std::vector<double>& x,
                    const TensorData& w, const std::vector<float>& bias, std::int64_t rows,
                    const std::string& what, std::int64_t nan_row = -1) {
  const std::int64_t n = w.shape()[0], k = w.shape()[1];
  const TensorData decoded = w.dequantize();
  const auto dense = decoded.as_span<float>();
  int reported = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < n; ++j) {
      const double g = got[static_cast<std::size_t>(r * n + j)];
      if (r == nan_row) {
        if (!std::isnan(g) && reported++ < 5) ADD_FAILURE() << what << " row " << r << ": " << g;
        continue;
      }
      double want = bias.empty() ? 0.0 : bias[static_cast<std::size_t>(j)];
      double magnitude = std::fabs(want);
      for (std::int64_t i = 0; i < k; ++i) {
        const double v =
            x[static_cast<std::size_t>(r * k + i)] * dense[static_cast<std::size_t>(j * k + i)];
        want += v;
        magnitude += std::fabs(v);
      }
      if (!(std::fabs(g - want) <= 2e-6 * magnitude + 1e-30) && reported++ < 5) {
        ADD_FAILURE() << what << " row " << r << " output " << j << ": " << g << " vs " << want;
      }
    }
  }
}

// One configuration end to end: the plan the plugin makes must be the template instance run.
// kTerms 0 (an f32 x rounded to int8 blocks) may have a NaN in row nan_row of x.
template <class K, bool kBf16, int kTerms, int kNt, int kInt8, int kStride>
void check(const QuantScheme& scheme, std::int64_t n, std::int64_t k, std::int64_t rows, int splits,
           std::size_t misalign, std::uint32_t seed, std::int64_t nan_row = -1) {
  const DType dtype = kTerms == 3 || kTerms == 0 ? DType::F32 : (kBf16 ? DType::BF16 : DType::F16);
  const auto plan = kiln::cuda::plan_quant_product(scheme, k, dtype, rows);
  const std::string what = plan.key() + " n " + std::to_string(n) + " k " + std::to_string(k) +
                           " rows " + std::to_string(rows) + " splits " + std::to_string(splits) +
                           " misaligned " + std::to_string(misalign);
  ASSERT_TRUE(plan.applies) << what;
  ASSERT_EQ(plan.row_stride, kStride) << what;
  ASSERT_EQ(plan.column_tiles, kNt) << what;
  ASSERT_EQ(plan.int8_form, kInt8) << what;
  ASSERT_EQ(plan.terms, kTerms) << what;
  ASSERT_EQ(plan.bf16, kBf16) << what;
  const std::size_t stage = qb::kq_stage_bytes<kTerms, kNt, kStride>();
  ASSERT_EQ(plan.stages, kiln::cuda::kQuantStages) << what;
  ASSERT_EQ(plan.shared_bytes(), kiln::cuda::kQuantStages * stage) << what;
  const TensorData w = weight_of(scheme, n, k, seed);
  std::vector<float> x = normal_values(rows * k, seed + 1);
  if (kTerms == 1) {  // the values the 16-bit x holds
    for (float& v : x) v = qb::kq_elem_to_float(qb::kq_float_to_elem(v, kBf16), kBf16);
  }
  if (nan_row >= 0) x[static_cast<std::size_t>(nan_row * k + 37)] = NAN;
  // A bias on odd seeds: added once, by the only split or by the last.
  const std::vector<float> bias = seed % 2 == 1 ? normal_values(n, seed + 2) : std::vector<float>{};
  if constexpr (kTerms == 0) {
    const Int8X xq = int8_x_of(x, rows, k);
    const std::vector<float> got = emulate_product<K, kBf16, kTerms, kNt, kInt8, kStride>(
        w, misalign, xq.codes.data(), xq.scales.data(), rows, splits, bias);
    expect_product(got, kiln::test::int8_rounded_x({x.begin(), x.end()}, k), w, bias, rows, what,
                   nan_row);
  } else {
    const std::vector<unsigned short> planes = planes_of(x, dtype);
    const std::vector<float> got = emulate_product<K, kBf16, kTerms, kNt, kInt8, kStride>(
        w, misalign, planes.data(), nullptr, rows, splits, bias);
    expect_product(got, {x.begin(), x.end()}, w, bias, rows, what);
  }
}

TEST(GpuQuantEmulated, ProductOfEveryKind) {
  // n = 80: a second block of weight rows, 16 of them real; k: tiles of 256 with a short last one
  // where the kind allows (544 = 2 x 256 + 32); rows 5: one column tile, three lanes' columns past
  // the end. Weights at an address 6 bytes past a 16-byte boundary and rows of sizes that are no
  // multiple of 16: every row's tile starts at its own offset in its smem slot. The GGUF kinds at
  // 5 rows of x round it to int8 (kTerms 0); the int8 schemes multiply it in bf16.
  check<qb::KqQ4_0, true, 0, 1, 0, 176>(kiln::quant_scheme(QKind::Q4_0), 80, 544, 5, 2, 6, 4001);
  check<qb::KqQ4_1, true, 0, 1, 0, 208>(kiln::quant_scheme(QKind::Q4_1), 80, 544, 5, 1, 2, 4002);
  check<qb::KqQ5_0, true, 0, 1, 0, 208>(kiln::quant_scheme(QKind::Q5_0), 80, 544, 5, 3, 10, 4003);
  check<qb::KqQ5_1, true, 0, 1, 0, 240>(kiln::quant_scheme(QKind::Q5_1), 80, 544, 5, 2, 0, 4004);
  check<qb::KqQ8_0, true, 0, 1, 0, 304>(kiln::quant_scheme(QKind::Q8_0), 80, 544, 5, 2, 14, 4005);
  check<qb::KqQ2_K, true, 0, 1, 0, 112>(kiln::quant_scheme(QKind::Q2_K), 80, 768, 5, 2, 4, 4006);
  check<qb::KqQ3_K, true, 0, 1, 0, 144>(kiln::quant_scheme(QKind::Q3_K), 80, 768, 5, 3, 6, 4007);
  check<qb::KqQ4_K, true, 0, 1, 0, 176>(kiln::quant_scheme(QKind::Q4_K), 80, 768, 5, 2, 8, 4008);
  check<qb::KqQ5_K, true, 0, 1, 0, 208>(kiln::quant_scheme(QKind::Q5_K), 80, 768, 5, 1, 2, 4009);
  check<qb::KqQ6_K, true, 0, 1, 0, 240>(kiln::quant_scheme(QKind::Q6_K), 80, 768, 5, 2, 6, 4010);
  check<qb::KqQ8_K, true, 0, 1, 0, 336>(kiln::quant_scheme(QKind::Q8_K), 80, 768, 5, 2, 12, 4011);
  check<qb::KqInt8, true, 1, 1, 1, 336>(kiln::int8_block_scheme(32), 80, 544, 5, 2, 2, 4012);
  check<qb::KqInt8, true, 1, 1, 1, 368>(kiln::int8_block_scheme(16), 80, 544, 5, 2, 6, 4013);
  check<qb::KqInt8, true, 1, 1, 2, 304>(kiln::int8_block_scheme(512), 80, 1024, 5, 2, 8, 4014);
  check<qb::KqInt8, true, 1, 1, 2, 304>(kiln::int8_channel_scheme(), 80, 1040, 5, 3, 6, 4015);
}

TEST(GpuQuantEmulated, IntegerProductColumnTilesAndNaN) {
  // 33 rows: four column tiles and a second group of them with one real row; 12 and 16 rows: two
  // tiles, for kinds of steps of 32 and of 16 values; a NaN in one row of x makes that row's
  // outputs NaN and no other's.
  check<qb::KqQ4_0, true, 0, 4, 0, 176>(kiln::quant_scheme(QKind::Q4_0), 70, 288, 33, 2, 2, 4016,
                                        32);
  check<qb::KqQ4_K, true, 0, 4, 0, 176>(kiln::quant_scheme(QKind::Q4_K), 64, 512, 33, 1, 0, 4017);
  check<qb::KqQ8_0, true, 0, 2, 0, 304>(kiln::quant_scheme(QKind::Q8_0), 72, 544, 12, 2, 4, 4018,
                                        5);
  check<qb::KqQ6_K, true, 0, 2, 0, 240>(kiln::quant_scheme(QKind::Q6_K), 72, 512, 16, 2, 6, 4019,
                                        9);
  check<qb::KqQ2_K, true, 0, 2, 0, 112>(kiln::quant_scheme(QKind::Q2_K), 40, 512, 9, 1, 2, 4028);
}

TEST(GpuQuantEmulated, ProductColumnTilesHalfTypesAndF32Parts) {
  // Past kQuantIntRows rows of x the GGUF kinds multiply x in 16-bit floats: four column tiles a
  // group, the last group short; f16; f32 x in three bf16 parts. Below it the kinds that keep a
  // 16-bit x in 16 bits (Q4_0 and Q6_K here), one and two tiles. The int8 schemes at any rows: two
  // tiles, and f32 parts.
  static_assert(kiln::cuda::kQuantIntRows == 64);
  check<qb::KqQ4_0, true, 1, 1, 0, 176>(kiln::quant_scheme(QKind::Q4_0), 80, 544, 5, 2, 6, 4029);
  check<qb::KqQ6_K, false, 1, 2, 0, 240>(kiln::quant_scheme(QKind::Q6_K), 72, 512, 12, 2, 6, 4030);
  check<qb::KqQ4_0, true, 1, 4, 0, 176>(kiln::quant_scheme(QKind::Q4_0), 70, 288, 70, 2, 2, 4020);
  check<qb::KqQ4_K, true, 1, 4, 0, 176>(kiln::quant_scheme(QKind::Q4_K), 64, 512, 65, 1, 0, 4021);
  check<qb::KqQ8_0, false, 1, 4, 0, 304>(kiln::quant_scheme(QKind::Q8_0), 72, 544, 66, 2, 4, 4022);
  check<qb::KqQ6_K, false, 1, 4, 0, 240>(kiln::quant_scheme(QKind::Q6_K), 72, 512, 70, 2, 6, 4023);
  check<qb::KqQ4_1, false, 1, 4, 0, 208>(kiln::quant_scheme(QKind::Q4_1), 24, 544, 67, 3, 2, 4024);
  check<qb::KqQ4_0, true, 3, 4, 0, 176>(kiln::quant_scheme(QKind::Q4_0), 40, 544, 65, 2, 6, 4025);
  check<qb::KqInt8, true, 1, 2, 1, 336>(kiln::int8_block_scheme(32), 40, 544, 12, 2, 2, 4026);
  check<qb::KqInt8, true, 3, 1, 2, 304>(kiln::int8_channel_scheme(), 40, 528, 4, 2, 6, 4027);
}

// kq_decode's and kq_decode_int8's bodies on the emulated grid: every kind the host decoder's
// values bit for bit, rows by index with one out of range (its token written, zeros decoded).
template <class K, bool kIndexed>
void check_decode(QKind kind, std::uint32_t seed) {
  const QuantScheme scheme = kind == QKind::Int8Block     ? kiln::int8_block_scheme(48)
                             : kind == QKind::Int8Channel ? kiln::int8_channel_scheme()
                                                          : kiln::quant_scheme(kind);
  const std::int64_t cols =
      scheme.kind == QKind::Int8Block ? 96 : (scheme.block_size == 256 ? 512 : 96);
  const TensorData w = weight_of(scheme, 7, cols, seed);
  const TensorData decoded = w.dequantize();
  const auto want = decoded.as_span<float>();
  const Placed blocks = place(w.bytes(), 6);
  const std::vector<long long> index = {6, 0, 3, 9, 3};
  const std::int64_t rows = kIndexed ? static_cast<std::int64_t>(index.size()) : 7;
  std::vector<float> out(static_cast<std::size_t>(rows * cols) + 8, NAN);
  float* aligned = out.data() + (32 - reinterpret_cast<std::uintptr_t>(out.data()) % 32) % 32 / 4;
  unsigned error_word = 0;
  qb::KqDecodeParams p{};
  p.blocks = address(blocks.data);
  p.out = address(aligned);
  p.index = kIndexed ? address(index.data()) : 0;
  p.error_word = address(&error_word);
  p.rows = rows;
  p.width = cols;
  p.row_bytes = static_cast<long long>(w.bytes().size()) / 7;
  p.table_rows = 7;
  p.int8_block = scheme.kind == QKind::Int8Channel ? cols : scheme.block_size;
  p.error_token = 77;
  launch(3, 64, 0, [&](unsigned char*) {
    if constexpr (std::is_same_v<K, qb::KqInt8>) {
      qb::kq_decode_int8<kIndexed>(p);
    } else {
      qb::kq_decode<K, kIndexed>(p);
    }
  });
  for (std::int64_t r = 0; r < rows; ++r) {
    const long long source = kIndexed ? index[static_cast<std::size_t>(r)] : r;
    for (std::int64_t c = 0; c < cols; ++c) {
      const float got = aligned[r * cols + c];
      const float expected = source < 7 ? want[static_cast<std::size_t>(source * cols + c)] : 0.0f;
      ASSERT_TRUE((std::isnan(got) && std::isnan(expected)) ||
                  std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(expected))
          << kiln::quant_kind_name(kind) << " row " << r << " value " << c << ": " << got << " vs "
          << expected;
    }
  }
  EXPECT_EQ(error_word, kIndexed ? 77u : 0u) << kiln::quant_kind_name(kind);
}

TEST(GpuQuantEmulated, DecodeOfEveryKind) {
  check_decode<qb::KqQ4_0, false>(QKind::Q4_0, 4030);
  check_decode<qb::KqQ4_1, true>(QKind::Q4_1, 4031);
  check_decode<qb::KqQ5_0, false>(QKind::Q5_0, 4032);
  check_decode<qb::KqQ5_1, true>(QKind::Q5_1, 4033);
  check_decode<qb::KqQ8_0, true>(QKind::Q8_0, 4034);
  check_decode<qb::KqQ2_K, false>(QKind::Q2_K, 4035);
  check_decode<qb::KqQ3_K, true>(QKind::Q3_K, 4036);
  check_decode<qb::KqQ4_K, false>(QKind::Q4_K, 4037);
  check_decode<qb::KqQ5_K, true>(QKind::Q5_K, 4038);
  check_decode<qb::KqQ6_K, false>(QKind::Q6_K, 4039);
  check_decode<qb::KqQ8_K, true>(QKind::Q8_K, 4040);
  check_decode<qb::KqInt8, false>(QKind::Int8Block, 4041);
  check_decode<qb::KqInt8, true>(QKind::Int8Channel, 4042);
}

// x [rows, k] (f32 values; bf16's or f16's where x_type says so) times the weight's transpose
// (plus bias) through kq_matvec's body on the emulated grid, as the plan for these shapes
// launches it with warp_rows rows of W a warp: blocks of 8 warp_rows rows of W by splits of
// plan.pieces × 1024 values of k.
template <class K, int kCols, int kPieces, int kStages, int kX>
std::vector<float> emulate_matvec(const kiln::cuda::QuantProductKernel& plan, const TensorData& w,
                                  std::size_t misalign, const void* x, std::int64_t rows,
                                  const std::vector<float>& bias, int warp_rows) {
  const std::int64_t n = w.shape()[0], k = w.shape()[1];
  const Placed weight = place(w.bytes(), misalign);
  qb::KqProductParams p{};
  p.weight = address(weight.data);
  p.x = address(x);
  p.n = n;
  p.k = k;
  p.rows = rows;
  p.row_bytes = static_cast<long long>(w.bytes().size()) / n;
  const int tile_rows = qb::kKqMvWarps * warp_rows;
  p.row_tiles = static_cast<int>((n + tile_rows - 1) / tile_rows);
  p.column_groups = 1;
  p.warp_rows = warp_rows;
  const std::int64_t chunk = std::int64_t{kPieces} * qb::kKqMvPiece;
  p.tiles_per_split = static_cast<int>(chunk / 32);
  p.splits = static_cast<int>((k + chunk - 1) / chunk);
  Outputs outputs(p, bias);
  EXPECT_EQ(plan.shared_bytes(), static_cast<std::size_t>(qb::kKqMvWarps * kStages *
                                                              qb::kq_mv_stage_bytes<K, kPieces>() +
                                                          qb::kq_mv_x_bytes<kCols, kPieces>()));
  const auto blocks = static_cast<unsigned>(p.row_tiles * p.splits);
  launch(blocks, kiln::cuda::kQuantMatvecThreads, plan.shared_bytes(), [&](unsigned char* smem) {
    qb::kq_matvec<K, kCols, kPieces, kStages, kX, HostOut>(p, smem);
  });
  return outputs.take();
}

// One matrix-vector configuration: the plan must be the template instance run; the result
// against float64 sums of the int8-rounded x times the decoded weight (plus bias), row
// `nan_row` of x holding a NaN (its outputs NaN).
template <class K, int kCols, int kPieces, int kStages, int kX>
void check_matvec(const QuantScheme& scheme, std::int64_t n, std::int64_t k, std::int64_t rows,
                  int warp_rows, std::size_t misalign, std::uint32_t seed,
                  std::int64_t nan_row = -1) {
  const DType dtype = kX == 0 ? DType::F32 : (kX == 1 ? DType::BF16 : DType::F16);
  const auto plan = kiln::cuda::plan_quant_product(scheme, k, dtype, rows);
  const std::string what = plan.key() + " n " + std::to_string(n) + " k " + std::to_string(k) +
                           " rows " + std::to_string(rows) + " warp rows " +
                           std::to_string(warp_rows) + " misaligned " + std::to_string(misalign);
  ASSERT_TRUE(plan.applies && plan.matvec) << what;
  ASSERT_EQ(plan.matvec_rows, kCols) << what;
  ASSERT_EQ(plan.pieces, kPieces) << what;
  ASSERT_EQ(plan.stages, kStages) << what;
  ASSERT_EQ(plan.x_type, kX) << what;
  const TensorData w = weight_of(scheme, n, k, seed);
  std::vector<float> x = normal_values(rows * k, seed + 1);
  std::vector<unsigned short> halves;
  if (kX != 0) {  // the values the 16-bit x holds
    for (float& v : x) {
      halves.push_back(static_cast<unsigned short>(qb::kq_float_to_elem(v, kX == 1)));
      v = qb::kq_elem_to_float(halves.back(), kX == 1);
    }
  }
  if (nan_row >= 0) {
    x[static_cast<std::size_t>(nan_row * k + 37)] = NAN;
    if (kX != 0) halves[static_cast<std::size_t>(nan_row * k + 37)] = 0x7FC0;
  }
  const std::vector<float> bias = seed % 2 == 1 ? normal_values(n, seed + 2) : std::vector<float>{};
  const std::vector<float> got = emulate_matvec<K, kCols, kPieces, kStages, kX>(
      plan, w, misalign, kX == 0 ? static_cast<const void*>(x.data()) : halves.data(), rows, bias,
      warp_rows);
  expect_product(got, kiln::test::int8_rounded_x({x.begin(), x.end()}, k), w, bias, rows, what,
                 nan_row);
}

TEST(GpuQuantEmulated, MatvecOfEveryKind) {
  // n = 40 with 3 or 8 rows a warp: blocks of 24 or 64 weight rows, the last with warps that
  // run out of rows (or have none); k = 5376 with pieces of 1024: splits of 4096 + 1280 (one row of
  // x), 2048 x 2 + 1280 (two), 1024 x 5 + 256 (three or four): lanes past the last split's values
  // idle, the last split of each tile summing them all; weights at addresses past a 16-byte
  // boundary. One row of x in bf16, three (kCols 4, one row past them) in f32 and f16, four with a
  // NaN in one.
  check_matvec<qb::KqQ4_0, 1, 4, 5, 1>(kiln::quant_scheme(QKind::Q4_0), 40, 5376, 1, 3, 6, 4101);
  check_matvec<qb::KqQ4_1, 4, 1, 8, 0>(kiln::quant_scheme(QKind::Q4_1), 40, 5376, 3, 8, 2, 4102);
  check_matvec<qb::KqQ5_0, 1, 4, 4, 2>(kiln::quant_scheme(QKind::Q5_0), 40, 5376, 1, 3, 10, 4103);
  check_matvec<qb::KqQ5_1, 2, 2, 7, 1>(kiln::quant_scheme(QKind::Q5_1), 40, 5376, 2, 8, 0, 4104);
  check_matvec<qb::KqQ8_0, 4, 1, 8, 0>(kiln::quant_scheme(QKind::Q8_0), 40, 5376, 4, 3, 14, 4105,
                                       3);
  check_matvec<qb::KqQ2_K, 1, 4, 8, 1>(kiln::quant_scheme(QKind::Q2_K), 40, 5376, 1, 8, 4, 4106);
  check_matvec<qb::KqQ3_K, 2, 2, 8, 1>(kiln::quant_scheme(QKind::Q3_K), 40, 5376, 2, 3, 6, 4107);
  check_matvec<qb::KqQ4_K, 1, 4, 5, 1>(kiln::quant_scheme(QKind::Q4_K), 40, 5376, 1, 8, 8, 4108);
  check_matvec<qb::KqQ5_K, 4, 1, 8, 2>(kiln::quant_scheme(QKind::Q5_K), 40, 5376, 3, 3, 2, 4109);
  check_matvec<qb::KqQ6_K, 1, 4, 3, 1>(kiln::quant_scheme(QKind::Q6_K), 40, 5376, 1, 8, 6, 4110);
  check_matvec<qb::KqQ8_K, 1, 4, 2, 1>(kiln::quant_scheme(QKind::Q8_K), 40, 5376, 1, 3, 12, 4111);
  // Q4_K's rows off a word (misaligned by 6): its blocks read through KqStaged, not KqAligned.
  check_matvec<qb::KqQ4_K, 1, 4, 5, 1>(kiln::quant_scheme(QKind::Q4_K), 40, 5376, 1, 3, 6, 4113);
  // One split (k = 512, one piece): the only split writes the output; one row a warp.
  check_matvec<qb::KqQ4_0, 1, 1, 8, 0>(kiln::quant_scheme(QKind::Q4_0), 70, 512, 1, 1, 2, 4112, 0);
}

TEST(GpuQuantEmulated, ParamsMirrorTheHostStructs) {
  static_assert(sizeof(qb::KqDecodeParams) == sizeof(kiln::cuda::QuantDecodeParams));
  static_assert(sizeof(qb::KqProductParams) == sizeof(kiln::cuda::QuantProductParams));
  static_assert(sizeof(qb::KqSplitParams) == sizeof(kiln::cuda::QuantSplitParams));
  static_assert(sizeof(qb::KqRoundParams) == sizeof(kiln::cuda::QuantRoundParams));
  static_assert(offsetof(qb::KqProductParams, x_scales) ==
                offsetof(kiln::cuda::QuantProductParams, x_scales));
  static_assert(offsetof(qb::KqDecodeParams, error_token) ==
                offsetof(kiln::cuda::QuantDecodeParams, error_token));
  static_assert(offsetof(qb::KqProductParams, tiles_per_split) ==
                offsetof(kiln::cuda::QuantProductParams, tiles_per_split));
  static_assert(offsetof(qb::KqProductParams, int8_block) ==
                offsetof(kiln::cuda::QuantProductParams, int8_block));
  SUCCEED();
}

}  // namespace gpu_quant_emulated
