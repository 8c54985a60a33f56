// CPU memory behaviour: temporaries are reused in place only when nobody else can see them,
// views share storage instead of copying, and the caching allocator keeps eager loops from
// growing their footprint.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "backends/cpu/allocator.h"
#include "backends/cpu/cpu_tensor.h"
#include "runtime/registry.h"
#include "support/devices.h"

namespace kiln {
namespace {

using kiln::test::kCpu;

std::byte* data_of(const Primitive& p) { return cpu::as_cpu(p).data(); }
const cpu::CpuStorage* storage_of(const Primitive& p) { return cpu::as_cpu(p).storage().get(); }

std::vector<float> iota_values(std::int64_t n, float scale = 0.01f) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(i) * scale - 1.0f;
  return out;
}

Tensor<2> matrix(std::int64_t rows, std::int64_t cols, float scale = 0.01f) {
  return Tensor<2>::from_data(TensorData::from_vec(iota_values(rows * cols, scale), {rows, cols}),
                              kCpu);
}

// ---- in-place reuse ----

TEST(CpuInPlace, UniqueTemporaryIsReusedByUnaryOp) {
  auto a = matrix(64, 64, 1e-4f), b = matrix(64, 64, 2e-4f);
  auto t = a + b;
  std::byte* before = data_of(t.primitive());
  auto e = std::move(t).exp();
  EXPECT_EQ(data_of(e.primitive()), before) << "exp wrote into the unique temporary";
  // And the values are right.
  const auto av = a.into_data().to_vec<float>(), bv = b.into_data().to_vec<float>();
  const auto ev = e.into_data().to_vec<float>();
  for (std::size_t i = 0; i < ev.size(); ++i) {
    ASSERT_NEAR(ev[i], std::exp(av[i] + bv[i]), 1e-5 * std::exp(av[i] + bv[i]));
  }
}

TEST(CpuInPlace, ChainedTemporariesReuseOneBuffer) {
  auto a = matrix(32, 32), b = matrix(32, 32);
  auto t = a * b;
  std::byte* before = data_of(t.primitive());
  auto r = (std::move(t) + 1.0).tanh();
  EXPECT_EQ(data_of(r.primitive()), before);
  auto s = std::move(r) + a;  // binary op: the unique lhs is reused
  EXPECT_EQ(data_of(s.primitive()), before);
}

// An rvalue right operand gives its handle up (operator-(const Tensor&, Tensor&&)): the op may
// write into it, as into a unique left one. The values against float64; every operator form.
TEST(CpuInPlace, AnRvalueRightOperandIsReused) {
  const auto a = matrix(32, 32, 1e-3f), b = matrix(32, 32, 2e-3f);
  const auto av = a.into_data().to_vec<float>(), bv = b.into_data().to_vec<float>();
  auto t = a * b;
  std::byte* before = data_of(t.primitive());
  auto s = a - std::move(t);
  EXPECT_EQ(data_of(s.primitive()), before) << "a - t did not write into t";
  auto u = b + 3.0;
  before = data_of(u.primitive());
  auto r = 2.0 - std::move(u);
  EXPECT_EQ(data_of(r.primitive()), before) << "2 - u did not write into u";
  auto q = 2.0 / (b + 3.0);
  auto w = 3.0 - (a * 2.0) + (1.5 * (b + b)) * (a + 0.5);
  const auto sv = s.into_data().to_vec<float>(), qv = q.into_data().to_vec<float>();
  const auto rv = r.into_data().to_vec<float>();
  const auto wv = w.into_data().to_vec<float>();
  for (std::size_t i = 0; i < sv.size(); ++i) {
    const double x = av[i], y = bv[i];
    ASSERT_NEAR(sv[i], x - x * y, 1e-6) << i;
    ASSERT_NEAR(qv[i], 2.0 / (y + 3.0), 1e-6) << i;
    ASSERT_NEAR(rv[i], 2.0 - (y + 3.0), 1e-6) << i;
    ASSERT_NEAR(wv[i], 3.0 - 2.0 * x + 1.5 * (y + y) * (x + 0.5), 1e-5) << i;
  }
}

// The same tensor on both sides is read twice, not moved from twice.
TEST(CpuInPlace, ATensorMovedToBothSidesIsReadTwice) {
  auto x = matrix(8, 8, 0.1f);
  const auto xv = x.into_data().to_vec<float>();
  const auto d = x.sub(std::move(x));
  EXPECT_EQ(x.into_data().to_vec<float>(), xv) << "x.sub(std::move(x)) took x's handle";
  const auto two = std::move(x).add(std::move(x));
  const auto dv = d.into_data().to_vec<float>(), tv = two.into_data().to_vec<float>();
  for (std::size_t i = 0; i < xv.size(); ++i) {
    ASSERT_EQ(dv[i], 0.0f) << i;
    ASSERT_EQ(tv[i], 2 * xv[i]) << i;
  }
}

TEST(CpuInPlace, NotReusedWhenAnotherHandleExists) {
  auto a = matrix(64, 64);
  auto t = a + 1.0;
  const Tensor<2> keep = t;  // a second handle to the same primitive
  const std::vector<float> kept_values = keep.into_data().to_vec<float>();
  std::byte* before = data_of(t.primitive());
  auto e = std::move(t).exp();
  EXPECT_NE(data_of(e.primitive()), before);
  EXPECT_EQ(keep.into_data().to_vec<float>(), kept_values) << "the other handle is untouched";
}

TEST(CpuInPlace, NotReusedWhenAViewSharesTheStorage) {
  auto t = matrix(16, 16) + 1.0;
  auto view = t.transpose();
  const std::vector<float> view_values = view.into_data().to_vec<float>();
  std::byte* before = data_of(t.primitive());
  auto e = std::move(t).exp();
  EXPECT_NE(data_of(e.primitive()), before);
  EXPECT_EQ(view.into_data().to_vec<float>(), view_values);
}

TEST(CpuInPlace, InputsHeldByTheCallerAreNeverWritten) {
  auto a = matrix(16, 16);
  const auto values = a.into_data().to_vec<float>();
  std::byte* before = data_of(a.primitive());
  auto e = a.exp();  // lvalue: a keeps its handle
  EXPECT_NE(data_of(e.primitive()), before);
  auto s = a + a;
  EXPECT_NE(data_of(s.primitive()), before);
  EXPECT_EQ(a.into_data().to_vec<float>(), values);
}

// ---- views ----

TEST(CpuViews, LayoutOpsShareStorage) {
  auto x = matrix(4, 6);
  const cpu::CpuStorage* storage = storage_of(x.primitive());
  const std::int64_t in_use = kCpu.memory_stats().bytes_in_use;
  auto transposed = x.transpose();
  auto sliced = x.slice({{1, 3}, {2, 6, 2}});
  auto swapped = x.swap_dims(0, 1);
  auto permuted = x.permute({1, 0});
  auto reshaped = x.reshape<2>({3, 8});
  auto narrowed = x.narrow(1, 2, 3);
  auto row = matrix(1, 6);
  auto expanded = row.expand(Shape{5, 6});
  EXPECT_EQ(storage_of(transposed.primitive()), storage);
  EXPECT_EQ(storage_of(sliced.primitive()), storage);
  EXPECT_EQ(storage_of(swapped.primitive()), storage);
  EXPECT_EQ(storage_of(permuted.primitive()), storage);
  EXPECT_EQ(storage_of(reshaped.primitive()), storage);
  EXPECT_EQ(storage_of(narrowed.primitive()), storage);
  EXPECT_EQ(storage_of(expanded.primitive()), storage_of(row.primitive()));
  // Only the small `row` was allocated since the views were made.
  EXPECT_LE(kCpu.memory_stats().bytes_in_use - in_use, 64);

  // The views read the right elements.
  const auto v = x.into_data().to_vec<float>();
  const auto t = transposed.into_data().to_vec<float>();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 6; ++j) ASSERT_EQ(t[j * 4 + i], v[i * 6 + j]);
  }
  const auto s = sliced.into_data().to_vec<float>();
  EXPECT_EQ(sliced.shape(), (Shape{2, 2}));
  EXPECT_EQ(s, (std::vector<float>{v[1 * 6 + 2], v[1 * 6 + 4], v[2 * 6 + 2], v[2 * 6 + 4]}));
  const auto e = expanded.into_data().to_vec<float>();
  const auto r = row.into_data().to_vec<float>();
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 6; ++j) ASSERT_EQ(e[i * 6 + j], r[j]);
  }
}

TEST(CpuViews, ViewStridesAndOffset) {
  auto x = matrix(4, 6);
  const auto transposed = x.transpose();
  const auto& t = cpu::as_cpu(transposed.primitive());
  EXPECT_EQ(t.strides(), (cpu::Strides{1, 6}));
  EXPECT_FALSE(t.is_contiguous());
  const auto sliced = x.slice({{1, 3}, {2, 6}});
  EXPECT_EQ(cpu::as_cpu(sliced.primitive()).offset(), 1 * 6 + 2);
  const auto expanded = matrix(1, 6).expand(Shape{5, 6});
  EXPECT_EQ(cpu::as_cpu(expanded.primitive()).strides()[0], 0) << "expand broadcasts with stride 0";
}

// ---- caching allocator ----

TEST(CpuAllocator, FreedBlockIsHandedOutAgain) {
  auto& allocator = cpu::CachingAllocator::instance();
  std::size_t first_capacity = 0, second_capacity = 0;
  std::byte* first = allocator.allocate(1000, first_capacity);
  EXPECT_GE(first_capacity, 1000u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 64, 0u) << "64-byte aligned";
  allocator.deallocate(first, first_capacity);
  std::byte* second = allocator.allocate(1000, second_capacity);
  EXPECT_EQ(second, first);
  EXPECT_EQ(second_capacity, first_capacity);
  allocator.deallocate(second, second_capacity);
}

TEST(CpuAllocator, CapacityWastesAtMostAQuarter) {
  auto& allocator = cpu::CachingAllocator::instance();
  for (std::size_t bytes :
       {std::size_t{1}, std::size_t{65}, std::size_t{1000}, std::size_t{4097}, std::size_t{100000},
        std::size_t{1} << 20, (std::size_t{1} << 20) + 1}) {
    std::size_t capacity = 0;
    std::byte* block = allocator.allocate(bytes, capacity);
    EXPECT_GE(capacity, bytes);
    EXPECT_LE(capacity, std::max<std::size_t>(64, bytes + bytes / 4 + 64)) << bytes;
    allocator.deallocate(block, capacity);
  }
}

TEST(CpuAllocator, EagerLoopKeepsReservedBytesFlat) {
  auto x = Tensor<2>::random({1024, 1024}, Distribution::standard(), kCpu);
  auto y = Tensor<2>::random({1024, 1024}, Distribution::standard(), kCpu);
  { auto warm = x + y; }
  const MemoryStats base = kCpu.memory_stats();
  const std::int64_t result_bytes = 1024 * 1024 * 4;
  for (int i = 0; i < 100; ++i) {
    auto z = x + y;
    const MemoryStats now = kCpu.memory_stats();
    ASSERT_EQ(now.bytes_reserved, base.bytes_reserved) << "iteration " << i;
    ASSERT_GE(now.bytes_in_use - base.bytes_in_use, result_bytes);
    ASSERT_GE(now.peak_bytes_in_use, now.bytes_in_use);
  }
  const MemoryStats after = kCpu.memory_stats();
  EXPECT_EQ(after.bytes_in_use, base.bytes_in_use);
  EXPECT_EQ(after.bytes_reserved, base.bytes_reserved);
}

TEST(CpuAllocator, InUseFollowsLiveTensorsAndCleanupReleasesTheCache) {
  const MemoryStats base = kCpu.memory_stats();
  {
    auto big = Tensor<1>::zeros({1 << 20}, kCpu);  // 4 MiB
    const MemoryStats live = kCpu.memory_stats();
    EXPECT_GE(live.bytes_in_use - base.bytes_in_use, 4 << 20);
    EXPECT_GE(live.peak_bytes_in_use, live.bytes_in_use);
    EXPECT_GE(live.bytes_reserved, live.bytes_in_use);
  }
  EXPECT_EQ(kCpu.memory_stats().bytes_in_use, base.bytes_in_use);
  kCpu.memory_cleanup();
  const MemoryStats cleaned = kCpu.memory_stats();
  EXPECT_EQ(cleaned.bytes_reserved, cleaned.bytes_in_use) << "nothing cached after cleanup";
  EXPECT_EQ(cleaned.bytes_in_use, base.bytes_in_use);
}

TEST(CpuAllocator, ResetPeakStartsANewHighWaterMark) {
  { auto big = Tensor<1>::zeros({1 << 20}, kCpu); }  // a 4 MiB peak, then freed
  const std::int64_t in_use = kCpu.memory_stats().bytes_in_use;
  EXPECT_GE(kCpu.memory_stats().peak_bytes_in_use, in_use + (4 << 20));
  kCpu.reset_peak_memory();
  EXPECT_EQ(kCpu.memory_stats().peak_bytes_in_use, in_use);
  { auto small = Tensor<1>::zeros({1 << 10}, kCpu); }  // 4 KiB
  const MemoryStats after = kCpu.memory_stats();
  EXPECT_GE(after.peak_bytes_in_use, in_use + (4 << 10));
  EXPECT_LT(after.peak_bytes_in_use, in_use + (4 << 20));
  // The autodiff form of the device reports (and resets) the same hardware's memory.
  kCpu.autodiff().reset_peak_memory();
  EXPECT_EQ(kCpu.autodiff().memory_stats().peak_bytes_in_use, in_use);
}

// ---- host bytes (Backend::host_bytes: a server writes an upload straight into the tensor) ----

TEST(CpuHostBytes, AreTheFreshTensorsOwnBytes) {
  Backend& cpu = hardware_backend_for(Device::cpu());
  const Primitive fresh = cpu.empty(Shape{3, 5}, DType::F64, Device::cpu());
  const std::span<std::byte> bytes = cpu.host_bytes(fresh);
  ASSERT_EQ(bytes.size(), 15 * sizeof(double));
  EXPECT_EQ(bytes.data(), data_of(fresh));
  std::vector<double> values(15);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.25 * static_cast<double>(i) - 1;
  std::memcpy(bytes.data(), values.data(), bytes.size());
  EXPECT_EQ(cpu.into_data(fresh).get().to_vec<double>(), values);
}

TEST(CpuHostBytes, AreNoneForAViewThatIsNotContiguous) {
  Backend& cpu = hardware_backend_for(Device::cpu());
  const Tensor<2> m = matrix(4, 6).to_device(kCpu.without_fusion());
  EXPECT_EQ(cpu.host_bytes(m.primitive()).size(), 24 * sizeof(float));
  EXPECT_TRUE(cpu.host_bytes(m.transpose().primitive()).empty());
  EXPECT_EQ(cpu.host_bytes(Tensor<2>::zeros(Shape{0, 3}, kCpu).primitive()).size(), 0u);
}

}  // namespace
}  // namespace kiln
