// scatter, pooling and interpolation on the GPU (generated kernels, formerly host fallbacks)
// against the CPU backend on the same random data: every dtype each op claims, every update
// mode and interpolation mode, both scatter strategies (a thread per line; atomics / compare-
// and-swap with heavy duplicates), strided views (permuted, flipped, sliced operands) and empty
// shapes. Backend methods are called directly, with fully filled options.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"
#include "kiln/detail/tensor_ops.h"
#include "runtime/registry.h"

using namespace kiln;

namespace {

using test::expect_near_all;
using test::expect_same;
using test::on;

void expect_same_pair(const Device& gpu, const std::function<PrimitivePair(Device)>& build,
                      double tolerance, const std::string& what) {
  const PrimitivePair got = build(gpu);
  const PrimitivePair want = build(Device::cpu());
  expect_near_all(detail::into_data(got.first), detail::into_data(want.first), tolerance,
                  what + " values");
  expect_near_all(detail::into_data(got.second), detail::into_data(want.second), 0,
                  what + " indices");
}

using test::host_random;
using test::tolerance_of;

const DType kFloatTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
const DType kAllTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64,
                           DType::I32, DType::I16, DType::I8,  DType::U64,  DType::U32,
                           DType::U16, DType::U8,  DType::Bool};

}  // namespace

TEST(GpuScatter, EveryDtypeModeAndStrategy) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 500;
  for (DType dtype : kAllTypes) {
    const bool fl = is_float(dtype);
    for (IndexingUpdate u : {IndexingUpdate::Assign, IndexingUpdate::Add, IndexingUpdate::Mul,
                             IndexingUpdate::Min, IndexingUpdate::Max}) {
      const std::string name =
          std::string(dtype_name(dtype)) + " mode " + std::to_string(static_cast<int>(u));
      // Positive values for add/mul keep float sums free of cancellation; integers wrap.
      const bool positive = u == IndexingUpdate::Add || u == IndexingUpdate::Mul;
      auto values = [&](const Shape& s) {
        if (dtype == DType::Bool) return host_random(s, dtype, seed++, 0, 1, true);
        if (fl) return host_random(s, dtype, seed++, positive ? 0.5 : -2, positive ? 1.5 : 2);
        return host_random(s, dtype, seed++, is_unsigned_int(dtype) ? 0 : -100, 100, true);
      };
      // Float add/mul through atomics may round differently per update order.
      const bool reordered = fl && (u == IndexingUpdate::Add || u == IndexingUpdate::Mul);
      const double tol = reordered ? tolerance_of(dtype) * 30 : tolerance_of(dtype);
      // The atomic path: few lines, long, with duplicates; the output a permuted view.
      {
        Primitive x = values({6, 7, 5});
        Primitive idx = host_random({6, 9, 7}, DType::I64, seed++, 0, 4, true);
        Primitive v = values({6, 9, 7});
        expect_same(
            device,
            [&](Device d) {
              Primitive xv = detail::permute(on(x, d), {0, 2, 1});  // [6, 5, 7], strided
              return backend_for(d).scatter(1, xv, on(idx, d), on(v, d), u);
            },
            tol, name + " atomic permuted");
      }
      // 1-D with heavy contention: 2000 updates into 40 elements (CAS loops on sub-words).
      {
        Primitive x = values({40});
        Primitive idx = host_random({2000}, DType::I32, seed++, 0, 39, true);
        Primitive v = values({2000});
        expect_same(
            device,
            [&](Device d) { return backend_for(d).scatter(0, on(x, d), on(idx, d), on(v, d), u); },
            tol, name + " contended");
      }
      // The line path: many lines (a thread each), duplicates along dim, flipped indices and a
      // sliced values view.
      {
        Primitive x = values({40000, 6});
        Primitive idx = host_random({40000, 6}, DType::U8, seed++, 0, 5, true);
        Primitive v = values({40000, 12});
        expect_same(
            device,
            [&](Device d) {
              Primitive iv = detail::flip(on(idx, d), {0});
              Primitive vv = detail::slice(on(v, d), {Slice::all(), Slice(0, std::nullopt, 2)});
              return backend_for(d).scatter(1, on(x, d), iv, vv, u);
            },
            tolerance_of(dtype), name + " lines");
      }
      // Short lines (always the line path) along dim 0, and empty indices.
      {
        Primitive x = values({5, 8});
        Primitive idx = host_random({3, 8}, DType::I16, seed++, 0, 4, true);
        Primitive v = values({3, 8});
        expect_same(
            device,
            [&](Device d) { return backend_for(d).scatter(0, on(x, d), on(idx, d), on(v, d), u); },
            tolerance_of(dtype), name + " short lines");
        Primitive empty_idx = host_random({0, 8}, DType::I64, seed++, 0, 4, true);
        Primitive empty_v = values({0, 8});
        expect_same(
            device,
            [&](Device d) {
              return backend_for(d).scatter(0, on(x, d), on(empty_idx, d), on(empty_v, d), u);
            },
            0, name + " empty");
      }
    }
  }
}

TEST(GpuScatter, BadIndexIsAnError) {
  KILN_REQUIRE_GPU();
  Primitive x = host_random({4, 3}, DType::F32, 1, -1, 1);
  Primitive idx = detail::from_data(
      TensorData::from_vec(std::vector<double>{0, 7, 1}, Shape{1, 3}).convert(DType::I64),
      Device::cpu(), Kind::Int, 2);
  Primitive v = host_random({1, 3}, DType::F32, 2, -1, 1);
  EXPECT_ANY_THROW({
    Primitive out = backend_for(device).scatter(0, on(x, device), on(idx, device), on(v, device),
                                                IndexingUpdate::Add);
    (void)detail::into_data(out);
  });
}

TEST(GpuPool, AvgAndMaxPoolingWithGradients) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 900;
  struct Case {
    Shape shape;
    PoolOptions options;
  };
  const std::vector<Case> cases = {
      {Shape{2, 3, 17}, {{3}, {2}, {1}, {1}, false, true}},
      {Shape{2, 3, 17}, {{4}, {3}, {2}, {2}, true, false}},
      {Shape{2, 3, 9, 11}, {{3, 2}, {2, 1}, {1, 0}, {1, 1}, false, false}},
      {Shape{1, 2, 10, 9}, {{3, 3}, {2, 2}, {1, 1}, {2, 1}, true, true}},
      {Shape{2, 2, 5, 6, 7}, {{2, 3, 2}, {2, 2, 1}, {1, 1, 0}, {1, 1, 2}, true, false}},
      {Shape{0, 3, 8, 8}, {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true}},
  };
  for (DType dtype : kFloatTypes) {
    const double tol = tolerance_of(dtype);
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const Case& k = cases[c];
      const std::string name = std::string(dtype_name(dtype)) + " case " + std::to_string(c);
      PoolOptions avg = k.options;
      avg.dilation.assign(avg.dilation.size(), 1);  // average pooling has no dilation
      Primitive x = host_random(k.shape, dtype, seed++, -3, 3);
      // x as a flipped view along the last dim: every kernel reads through strides.
      auto view = [&](Device d) {
        return detail::flip(on(x, d), {static_cast<std::int64_t>(k.shape.rank()) - 1});
      };
      expect_same(
          device, [&](Device d) { return backend_for(d).avg_pool(view(d), avg); }, tol,
          name + " avg_pool");
      const Shape avg_out = backend_for(Device::cpu()).avg_pool(x, avg)->shape();
      Primitive g = host_random(avg_out, dtype, seed++, -1, 1);
      expect_same(
          device,
          [&](Device d) { return backend_for(d).avg_pool_backward(on(x, d), on(g, d), avg); }, tol,
          name + " avg_pool_backward");
      for (DType index : {DType::I64, DType::I32, DType::I16}) {
        expect_same_pair(
            device,
            [&](Device d) {
              return backend_for(d).max_pool_with_indices(view(d), k.options, index);
            },
            tol, name + " max_pool_with_indices " + std::string(dtype_name(index)));
      }
      const PrimitivePair pooled =
          backend_for(Device::cpu()).max_pool_with_indices(x, k.options, DType::I64);
      Primitive mg = host_random(pooled.first->shape(), dtype, seed++, -1, 1);
      expect_same(
          device,
          [&](Device d) {
            return backend_for(d).max_pool_with_indices_backward(on(x, d), on(mg, d),
                                                                 on(pooled.second, d), k.options);
          },
          tol, name + " max_pool_with_indices_backward");
    }
  }
}

TEST(GpuPool, AdaptiveAveragePoolingWithGradient) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 1300;
  struct Case {
    Shape shape;
    std::vector<std::int64_t> out;
  };
  const std::vector<Case> cases = {
      {Shape{2, 3, 13}, {5}},
      {Shape{2, 3, 4}, {7}},
      {Shape{2, 2, 7, 9}, {3, 4}},
      {Shape{1, 3, 5, 6}, {8, 6}},
      {Shape{1, 2, 4, 5, 6}, {3, 2, 4}},
      {Shape{0, 2, 6, 6}, {2, 2}},
  };
  for (DType dtype : kFloatTypes) {
    const double tol = tolerance_of(dtype);
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const Case& k = cases[c];
      const std::string name = std::string(dtype_name(dtype)) + " case " + std::to_string(c);
      Primitive x = host_random(k.shape, dtype, seed++, -3, 3);
      expect_same(
          device,
          [&](Device d) {
            Primitive xv = detail::flip(on(x, d), {1});
            return backend_for(d).adaptive_avg_pool(xv, k.out);
          },
          tol, name + " adaptive_avg_pool");
      const Shape out_shape = backend_for(Device::cpu()).adaptive_avg_pool(x, k.out)->shape();
      Primitive g = host_random(out_shape, dtype, seed++, -1, 1);
      expect_same(
          device,
          [&](Device d) { return backend_for(d).adaptive_avg_pool_backward(on(x, d), on(g, d)); },
          tol, name + " adaptive_avg_pool_backward");
    }
  }
}

TEST(GpuInterpolate, EveryModeWithGradient) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 1700;
  const std::vector<std::pair<Shape, std::vector<std::int64_t>>> cases = {
      {Shape{2, 3, 5, 7}, {11, 4}},
      {Shape{1, 2, 8, 6}, {3, 13}},
      {Shape{1, 1, 1, 4}, {3, 1}},
      {Shape{0, 2, 4, 4}, {8, 8}},
  };
  for (DType dtype : kFloatTypes) {
    const double tol = tolerance_of(dtype);
    for (InterpolateMode mode :
         {InterpolateMode::Nearest, InterpolateMode::Bilinear, InterpolateMode::Bicubic}) {
      for (bool align : {false, true}) {
        const InterpolateOptions options{mode, align};
        for (std::size_t c = 0; c < cases.size(); ++c) {
          const auto& [shape, size] = cases[c];
          const std::string name = std::string(dtype_name(dtype)) + " mode " +
                                   std::to_string(static_cast<int>(mode)) +
                                   (align ? " aligned" : "") + " case " + std::to_string(c);
          Primitive x = host_random(shape, dtype, seed++, -3, 3);
          expect_same(
              device,
              [&](Device d) {
                Primitive xv =
                    detail::permute(detail::permute(on(x, d), {0, 1, 3, 2}), {0, 1, 3, 2});
                xv = detail::flip(xv, {2});
                return backend_for(d).interpolate(xv, size, options);
              },
              tol * 2, name + " interpolate");
          Primitive g =
              host_random(Shape{shape[0], shape[1], size[0], size[1]}, dtype, seed++, -1, 1);
          expect_same(
              device,
              [&](Device d) {
                Primitive gv = detail::flip(on(g, d), {3});
                return backend_for(d).interpolate_backward(on(x, d), gv, size, options);
              },
              tol * 4, name + " interpolate_backward");
        }
      }
    }
  }
}
