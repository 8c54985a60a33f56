// The ops wired to kiln_cuda_lib (matmul through cuBLASLt or the integer kernel, CUB sorts) and the
// generated scans on layouts the conformance table does not reach: batch dims that cannot be merged
// (host loop around strided-batched calls), permuted and flipped operands, the folded shared-rhs
// batch, sorts along a non-last dim of permuted views, index dtypes other than i32/i64, long scan
// rows. Each result is compared with the CPU backend on the same data. The integer matmul kernel's
// source also compiles with NVRTC here without a GPU.

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/int_matmul_source.h"
#include "gpu/gpu_test_support.h"
#include "gpu/nvrtc_compile.h"
#include "kiln/detail/tensor_ops.h"
#include "runtime/registry.h"

using namespace kiln;

namespace {

using test::Build;
using test::expect_near_all;
using test::expect_same;
using test::host_random;
using test::tolerance_of;

const DType kIntTypes[] = {DType::I64, DType::I32, DType::I16, DType::I8,
                           DType::U64, DType::U32, DType::U16, DType::U8};

}  // namespace

TEST(GpuCodegen, IntMatmulKernelCompiles) {
  for (DType dtype : kIntTypes) {
    const std::string log = kiln::test::nvrtc_errors(cuda::int_matmul_source(dtype));
    EXPECT_TRUE(log.empty()) << dtype_name(dtype) << ":\n" << log.substr(0, 4000);
  }
}

TEST(GpuLibOps, MatmulLayouts) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 100;
  for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8, DType::I32,
                      DType::I64, DType::U8, DType::U16}) {
    const double tol = tolerance_of(dtype);
    const bool fl = is_float(dtype);
    const double lo = fl ? -2 : -100, hi = fl ? 2 : 100;
    auto rnd = [&](const Shape& s) {
      return host_random(s, dtype, seed++, is_unsigned_int(dtype) ? 0 : lo, hi, !fl);
    };
    const std::string name(dtype_name(dtype));
    // Broadcast batch dims with transposed matrices: batch [2, 3] walks A and B apart (A's
    // stride 0 where B's is not and back), so the host loops over one dim.
    {
      Primitive x = rnd({2, 1, 7, 5}), y = rnd({3, 4, 7});
      expect_same(
          device,
          [&](Device d) {
            return detail::matmul(detail::swap_dims(detail::to_device(x, d), 2, 3),
                                  detail::swap_dims(detail::to_device(y, d), 1, 2));
          },
          tol, name + " broadcast transposed");
    }
    // Attention's heads: q and k viewed [B, H, S, D] out of [B, S, H, D], whose batch dims do
    // not merge. Past a few host loops the operands are copied so that one call takes them all.
    {
      Primitive q = rnd({6, 9, 3, 4}), k = rnd({6, 9, 3, 4});
      expect_same(
          device,
          [&](Device d) {
            return detail::matmul(detail::swap_dims(detail::to_device(q, d), 1, 2),
                                  detail::permute(detail::to_device(k, d), {0, 2, 3, 1}));
          },
          tol, name + " heads");
    }
    // Permuted batch dims with a shared rhs.
    {
      Primitive x = rnd({3, 4, 6, 5}), w = rnd({5, 8});
      expect_same(
          device,
          [&](Device d) {
            return detail::matmul(detail::permute(detail::to_device(x, d), {1, 0, 2, 3}),
                                  detail::to_device(w, d));
          },
          tol, name + " permuted batch");
    }
    // Shared rhs folded into the rows, and a row slice where it cannot be.
    {
      Primitive x = rnd({4, 6, 5}), w = rnd({5, 8});
      expect_same(
          device,
          [&](Device d) {
            return detail::matmul(detail::to_device(x, d), detail::to_device(w, d));
          },
          tol, name + " folded");
      expect_same(
          device,
          [&](Device d) {
            return detail::matmul(
                detail::narrow(detail::to_device(x, d), 1, 1, 4),
                detail::swap_dims(detail::swap_dims(detail::to_device(w, d), 0, 1), 0, 1));
          },
          tol, name + " row slice");
    }
    // Layouts cuBLASLt does not take: flipped rows, a broadcast row, every other column.
    {
      Primitive x = rnd({6, 5}), y = rnd({5, 10}), v = rnd({1, 6});
      expect_same(
          device,
          [&](Device d) {
            return detail::matmul(
                detail::flip(detail::to_device(x, d), {0}),
                detail::slice(detail::to_device(y, d), {Slice::all(), Slice(0, std::nullopt, 2)}));
          },
          tol, name + " flipped @ strided");
      expect_same(
          device,
          [&](Device d) {
            return detail::matmul(detail::expand(detail::to_device(v, d), Shape{5, 6}),
                                  detail::flip(detail::to_device(x, d), {0, 1}));
          },
          tol, name + " expanded @ flipped");
    }
    // Vectors: m = 1 and n = 1 over a batch; a deep product (integers wrap).
    {
      Primitive x = rnd({3, 1, 5}), y = rnd({5, 1}), a = rnd({4, 300}), b = rnd({300, 3});
      expect_same(
          device,
          [&](Device d) {
            return detail::matmul(detail::to_device(x, d), detail::to_device(y, d));
          },
          tol, name + " vectors");
      expect_same(
          device,
          [&](Device d) {
            return detail::matmul(detail::to_device(a, d), detail::to_device(b, d));
          },
          fl ? tol * 40 : 0, name + " deep");
    }
  }
}

TEST(GpuLibOps, SortsAlongAnyDimOfViews) {
  KILN_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::uint64_t seed = 200;
  for (DType dtype : {DType::F32, DType::F16, DType::F64, DType::I16, DType::U8, DType::I64}) {
    const bool fl = is_float(dtype);
    Primitive x = host_random({5, 6, 7}, dtype, seed++, is_unsigned_int(dtype) ? 0 : -3, 3, true);
    if (fl) {
      // NaNs among ties: last ascending, first descending, in input order.
      auto values = detail::into_data(x).to_f64_vec();
      values[3] = values[40] = values[41] = values[200] = nan;
      x = detail::from_data(TensorData::from_vec(values, Shape{5, 6, 7}).convert(dtype),
                            Device::cpu(), Kind::Float, 3);
    }
    const std::string name(dtype_name(dtype));
    // A permuted view [7, 5, 6]; every dim, both orders.
    auto view = [&](Device d) { return detail::permute(detail::to_device(x, d), {2, 0, 1}); };
    for (std::int64_t dim = 0; dim < 3; ++dim) {
      for (bool descending : {false, true}) {
        const std::string what =
            name + " dim " + std::to_string(dim) + (descending ? " desc" : " asc");
        expect_same(
            device, [&](Device d) { return detail::sort(view(d), dim, descending); }, 0,
            "sort " + what);
        expect_same(
            device,
            [&](Device d) { return detail::sort_with_indices(view(d), dim, descending).first; }, 0,
            "sort_with_indices values " + what);
        expect_same(
            device,
            [&](Device d) { return detail::sort_with_indices(view(d), dim, descending).second; }, 0,
            "sort_with_indices indices " + what);
        expect_same(
            device, [&](Device d) { return detail::argsort(view(d), dim, descending); }, 0,
            "argsort " + what);
        for (std::int64_t k : {0, 1, 3}) {
          expect_same(
              device,
              [&](Device d) {
                return detail::topk_with_indices(view(d), k, dim, descending).first;
              },
              0, "topk values k " + std::to_string(k) + " " + what);
          expect_same(
              device,
              [&](Device d) {
                return detail::topk_with_indices(view(d), k, dim, descending).second;
              },
              0, "topk indices k " + std::to_string(k) + " " + what);
        }
        // Index dtypes the library does not write itself (cast from i32), and i32 directly.
        for (DType index : {DType::I16, DType::U8, DType::I32, DType::U64}) {
          const std::string ctx = what + " index " + std::string(dtype_name(index));
          expect_same(
              device,
              [&](Device d) { return backend_for(d).argsort(view(d), dim, descending, index); }, 0,
              "argsort " + ctx);
          expect_same(
              device,
              [&](Device d) {
                return backend_for(d).topk_with_indices(view(d), 2, dim, descending, index).second;
              },
              0, "topk " + ctx);
        }
      }
    }
  }
  // Empty rows and no rows.
  for (const Shape& shape : {Shape{0, 4}, Shape{4, 0}}) {
    Primitive x = host_random(shape, DType::F32, seed++, -1, 1);
    for (std::int64_t dim = 0; dim < 2; ++dim) {
      expect_same(
          device,
          [&](Device d) {
            return detail::sort_with_indices(detail::to_device(x, d), dim, true).second;
          },
          0, "empty sort " + shape.to_string());
      expect_same(
          device,
          [&](Device d) {
            return detail::topk_with_indices(detail::to_device(x, d), 0, dim, true).first;
          },
          0, "empty topk " + shape.to_string());
    }
  }
  // Long rows along a non-last dim (CUB's per-row and segmented strategies).
  Primitive big = host_random({3, 150000}, DType::F32, seed++, -1000, 1000, true);
  expect_same(
      device,
      [&](Device d) {
        return detail::sort_with_indices(detail::swap_dims(detail::to_device(big, d), 0, 1), 0,
                                         false)
            .second;
      },
      0, "long rows indices");
  expect_same(
      device,
      [&](Device d) {
        return detail::topk_with_indices(detail::swap_dims(detail::to_device(big, d), 0, 1), 5, 0,
                                         true)
            .first;
      },
      0, "long rows topk");
}

TEST(GpuLibOps, ScansAlongAnyDimOfViews) {
  KILN_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::uint64_t seed = 300;
  for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8, DType::I32,
                      DType::U16, DType::I64}) {
    const bool fl = is_float(dtype);
    Primitive x = host_random({6, 3000}, dtype, seed++,
                              fl ? 0.5 : (is_unsigned_int(dtype) ? 0 : -100), fl ? 1.5 : 100, !fl);
    if (fl) {
      auto values = detail::into_data(x).to_f64_vec();
      values[7] = values[3000 * 2 + 100] = nan;
      x = detail::from_data(TensorData::from_vec(values, Shape{6, 3000}).convert(dtype),
                            Device::cpu(), Kind::Float, 2);
    }
    const std::string name(dtype_name(dtype));
    // The transposed view [3000, 6]: dim 0 is a long strided line (copied contiguous, scanned
    // in place), dim 1 a short one.
    auto view = [&](Device d) { return detail::swap_dims(detail::to_device(x, d), 0, 1); };
    // Float sums in double: the association order differs from the CPU's loop.
    const double tol = fl ? tolerance_of(dtype) : 0;
    for (std::int64_t dim = 0; dim < 2; ++dim) {
      const std::string what = name + " dim " + std::to_string(dim);
      expect_same(
          device, [&](Device d) { return detail::cumsum(view(d), dim); }, tol, "cumsum " + what);
      expect_same(
          device, [&](Device d) { return detail::cummax(view(d), dim); }, 0, "cummax " + what);
      expect_same(
          device, [&](Device d) { return detail::cummin(view(d), dim); }, 0, "cummin " + what);
      expect_same(
          device, [&](Device d) { return detail::cumprod(detail::narrow(view(d), 0, 0, 40), dim); },
          tol, "cumprod " + what);
    }
    // A contiguous input that must stay untouched (the scan writes a fresh tensor).
    Primitive g = detail::to_device(x, device);
    const TensorData before = detail::into_data(g);
    (void)detail::into_data(detail::cumsum(g, 1));
    expect_near_all(detail::into_data(g), before, 0, "input kept " + name);
  }
  Primitive empty = host_random({0, 5}, DType::F32, seed++, -1, 1);
  expect_same(
      device, [&](Device d) { return detail::cumsum(detail::to_device(empty, d), 0); }, 0,
      "empty cumsum");
}
