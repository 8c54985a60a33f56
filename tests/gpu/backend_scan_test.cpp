// cumsum, cumprod, cummin and cummax on the GPU (the generated row scans of
// src/backends/cuda/scan.h) against the CPU backend on the same data: every numeric dtype and op
// on rows of 1, of each kernel's boundaries (16 elements, a sub-tile and a tile +-1, several
// chunks per row), one row of a million elements and more, many long rows; NaN, +-0 and +-inf in
// cummin/cummax (exact: the earlier of equal values, NaN kept); integers of any bits (wrapping,
// exact); float sums and products within the bound of double accumulation in another order, and
// sums of -0.0 giving +0.0 as on the CPU; in place (a strided input is copied and scanned in
// place), permuted, flipped and sliced views along every dim, empty shapes. The GpuScanHost
// tests check the plans, the kernel keys and the errors without a GPU.
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/scan.h"
#include "gpu/gpu_exact.h"
#include "gpu/gpu_test_support.h"
#include "kiln/error.h"

using namespace kiln;
using kiln::cuda::ScanOp;

namespace {

constexpr ScanOp kScanOps[] = {ScanOp::Sum, ScanOp::Prod, ScanOp::Min, ScanOp::Max};

Primitive scan_along(ScanOp op, Primitive x, std::int64_t dim) {
  switch (op) {
    case ScanOp::Sum:
      return detail::cumsum(std::move(x), dim);
    case ScanOp::Prod:
      return detail::cumprod(std::move(x), dim);
    case ScanOp::Min:
      return detail::cummin(std::move(x), dim);
    case ScanOp::Max:
      return detail::cummax(std::move(x), dim);
  }
  return x;
}

// Data suited to op. Integers: any bits of their width (sums and products wrap). Floats: sums
// in [-2, 2]; products near +-1 (closer for long rows, which would leave the dtype's range);
// extrema in [-2, 2] with +-0, +-inf and +-1 ties, and a NaN about every 2 x `row` elements, so
// that many rows meet one part of the way along.
TensorData scan_input(const Shape& shape, DType dtype, ScanOp op, std::int64_t row,
                      std::uint64_t seed) {
  if (is_int(dtype)) return test::random_data(shape, dtype, seed, test::Fill::Wide);
  std::mt19937_64 gen(seed);
  const double width = row > 20000 ? 0.001 : 0.05;
  std::vector<double> values(static_cast<std::size_t>(shape.num_elements()));
  for (double& v : values) {
    if (op == ScanOp::Prod) {
      v = std::uniform_real_distribution<double>(1 - width, 1 + width)(gen);
      if (gen() % 2) v = -v;
      continue;
    }
    v = std::uniform_real_distribution<double>(-2, 2)(gen);
    if (op == ScanOp::Sum) continue;
    if (gen() % 20 == 0) {
      const double ties[] = {0.0, -0.0, 1.0, -1.0, INFINITY, -INFINITY};
      v = ties[gen() % 6];
    }
    if (gen() % static_cast<std::uint64_t>(2 * row + 1) == 0) {
      v = gen() % 2 ? std::numeric_limits<double>::quiet_NaN()
                    : -std::numeric_limits<double>::quiet_NaN();
    }
  }
  return TensorData::from_vec(values, shape).convert(dtype);
}

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::F16:
      return 0x1p-11;
    case DType::BF16:
      return 0x1p-8;
    case DType::F32:
      return 0x1p-24;
    default:
      return 0x1p-53;
  }
}

double smallest_subnormal(DType dtype) {
  switch (dtype) {
    case DType::F16:
      return 0x1p-24;
    case DType::BF16:
      return 0x1p-133;
    case DType::F32:
      return 0x1p-149;
    default:
      return 0x1p-1074;
  }
}

// op of view(data) along dim on the GPU and on the CPU. Integers and extrema must be equal
// exactly; a float sum or product accumulates in double on both, in another order, so each
// result may differ by the double error bound (terms x roundoff x the sum of magnitudes; for
// products, x the result's) and then by one rounding of the dtype.
void expect_scan_like_cpu(const Device& gpu, ScanOp op, const TensorData& data,
                          const std::function<Primitive(Primitive)>& view, std::int64_t dim,
                          const std::string& what) {
  const Primitive x = test::on_cpu(data);
  const TensorData got = detail::into_data(scan_along(op, view(detail::to_device(x, gpu)), dim));
  const TensorData want = detail::into_data(scan_along(op, view(x), dim));
  const DType dtype = data.dtype();
  if (!is_float(dtype) || op == ScanOp::Min || op == ScanOp::Max) {
    test::expect_exact(got, want, what);
    return;
  }
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const Primitive input = view(x);
  const auto terms = static_cast<double>(input->shape()[static_cast<std::size_t>(dim)]);
  const Primitive magnitude =
      op == ScanOp::Sum ? detail::cumsum(detail::abs(detail::cast(input, DType::F64)), dim)
                        : detail::abs(detail::cast(scan_along(op, input, dim), DType::F64));
  const std::vector<double> g = got.to_f64_vec(), w = want.to_f64_vec(),
                            m = detail::into_data(magnitude).to_f64_vec();
  int reported = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double bound = 2 * terms * 0x1p-53 * m[i] + 2 * unit_roundoff(dtype) * std::fabs(w[i]) +
                         smallest_subnormal(dtype);
    const bool ok =
        (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] || std::fabs(g[i] - w[i]) <= bound;
    if (!ok && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", want " << w[i]
                    << " (bound " << bound << ")";
    }
  }
}

Primitive as_is(Primitive x) { return x; }

std::string describe(ScanOp op, DType dtype, const Shape& shape) {
  return std::string(cuda::scan_op_name(op)) + " " + std::string(dtype_name(dtype)) + " " +
         shape.to_string();
}

}  // namespace

TEST(GpuScan, EveryDTypeAndOpAcrossTheKernelBoundaries) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 1;
  for (DType dtype : test::kNumericDTypes) {
    const std::int64_t sub_tile = 32 * cuda::scan_items_per_thread(dtype);
    const std::int64_t tile = 8 * sub_tile;
    // A thread per row (1, 16), a warp (17 .. 4 sub-tiles), a block per chunk beyond: one chunk
    // per row of a tile or less, several from a tile + 1 on.
    const std::int64_t lengths[] = {1,        16,           17,           sub_tile - 1,
                                    sub_tile, sub_tile + 1, 4 * sub_tile, 4 * sub_tile + 1,
                                    tile - 1, tile,         tile + 1,     3 * tile + 7};
    for (std::int64_t n : lengths) {
      const Shape shape{3, n};
      for (ScanOp op : kScanOps) {
        const TensorData x = scan_input(shape, dtype, op, n, seed++);
        expect_scan_like_cpu(device, op, x, as_is, 1, describe(op, dtype, shape));
      }
    }
  }
}

TEST(GpuScan, LongRowsAndManyRows) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 100;
  // One row of over a million elements: hundreds of chunks, each from the totals before it.
  for (DType dtype :
       {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8}) {
    const Shape shape{1, (std::int64_t{1} << 20) + 3};
    for (ScanOp op : kScanOps) {
      const TensorData x = scan_input(shape, dtype, op, shape[1], seed++);
      expect_scan_like_cpu(device, op, x, as_is, 1, describe(op, dtype, shape));
    }
  }
  struct Case {
    Shape shape;
    DType dtype;
    ScanOp op;
  };
  const Case cases[] = {
      {Shape{1, 3000007}, DType::F32, ScanOp::Sum},   // chunks of two tiles
      {Shape{1, 3000007}, DType::F64, ScanOp::Max},   // chunks of three tiles
      {Shape{5000, 5000}, DType::F32, ScanOp::Max},   // a warp per long row
      {Shape{3000, 9000}, DType::BF16, ScanOp::Sum},  // a block per row
      {Shape{700, 10000}, DType::U8, ScanOp::Prod},   // two chunks of two tiles per row
      {Shape{100000, 40}, DType::I16, ScanOp::Sum},   // a warp per short row
      {Shape{1000000, 5}, DType::F16, ScanOp::Min},   // a thread per row
  };
  for (const Case& c : cases) {
    const TensorData x = scan_input(c.shape, c.dtype, c.op, c.shape[1], seed++);
    expect_scan_like_cpu(device, c.op, x, as_is, 1, describe(c.op, c.dtype, c.shape));
  }
}

TEST(GpuScan, InPlaceOnCopiesAndInputsKept) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 200;
  // Along dim 0 the rows are strided: the backend copies them contiguous and scans the copy in
  // place (two rows of 2.5M, 3000 rows of 10, 50 of 300, 7 of 5000: every kernel).
  const Shape shapes[] = {Shape{2500001, 2}, Shape{10, 3000}, Shape{300, 50}, Shape{5000, 7}};
  for (const Shape& shape : shapes) {
    for (DType dtype : {DType::I32, DType::F32, DType::F16}) {
      for (ScanOp op : kScanOps) {
        const TensorData x = scan_input(shape, dtype, op, shape[0], seed++);
        expect_scan_like_cpu(device, op, x, as_is, 0, describe(op, dtype, shape) + " dim 0");
      }
    }
  }
  // A contiguous input is left as it was: the scan writes a fresh tensor.
  const TensorData data = scan_input(Shape{4, 5000}, DType::F32, ScanOp::Sum, 5000, seed++);
  const Primitive g = detail::to_device(test::on_cpu(data), device);
  for (ScanOp op : kScanOps) (void)detail::into_data(scan_along(op, g, 1));
  test::expect_exact(detail::into_data(g), data, "input kept");
}

TEST(GpuScan, AnyDimOfPermutedFlippedAndSlicedViews) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 300;
  // [20, 6, 9]: dim 1 of x [6, 40, 9] moved first, reversed, every other entry.
  auto view = [](Primitive p) {
    p = detail::permute(std::move(p), {1, 0, 2});
    p = detail::flip(std::move(p), {0});
    return detail::slice(std::move(p), {Slice{0, 40, 2}});
  };
  for (DType dtype : test::kNumericDTypes) {
    for (ScanOp op : kScanOps) {
      const TensorData x = scan_input(Shape{6, 40, 9}, dtype, op, 20, seed++);
      for (std::int64_t dim = 0; dim < 3; ++dim) {
        expect_scan_like_cpu(
            device, op, x, view, dim,
            describe(op, dtype, Shape{20, 6, 9}) + " view dim " + std::to_string(dim));
      }
    }
  }
}

TEST(GpuScan, SpecialValuesAndSignedZeros) {
  KILN_REQUIRE_GPU();
  std::uint64_t seed = 400;
  // Ties of +-0, +-inf and NaN of both signs everywhere: cummin/cummax keep the earlier of equal
  // values (the sign of a zero) and the first NaN, bit for bit as the CPU.
  for (DType dtype : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    for (const Shape& shape : {Shape{5, 9}, Shape{5, 300}, Shape{2, 20011}}) {
      const TensorData x = test::random_data(shape, dtype, seed++, test::Fill::Special);
      for (ScanOp op : kScanOps) {
        expect_scan_like_cpu(device, op, x, as_is, 1, describe(op, dtype, shape) + " special");
      }
    }
    // Sums of -0.0 are +0.0 (the CPU starts from 0), on every path.
    for (const Shape& shape : {Shape{4, 9}, Shape{4, 900}, Shape{1, 100000}}) {
      const std::vector<double> zeros(static_cast<std::size_t>(shape.num_elements()), -0.0);
      const TensorData x = TensorData::from_vec(zeros, shape).convert(dtype);
      const Primitive sums = detail::cumsum(detail::to_device(test::on_cpu(x), device), 1);
      const std::vector<double> plus(zeros.size(), 0.0);
      test::expect_exact(detail::into_data(sums), TensorData::from_vec(plus, shape).convert(dtype),
                         describe(ScanOp::Sum, dtype, shape) + " of -0.0");
    }
  }
}

TEST(GpuScan, EmptyShapes) {
  KILN_REQUIRE_GPU();
  for (const Shape& shape : {Shape{0, 5}, Shape{3, 0}, Shape{0}}) {
    for (std::int64_t dim = 0; dim < static_cast<std::int64_t>(shape.rank()); ++dim) {
      for (ScanOp op : kScanOps) {
        const TensorData x = scan_input(shape, DType::F32, op, 1, 1);
        expect_scan_like_cpu(device, op, x, as_is, dim, describe(op, DType::F32, shape));
      }
    }
  }
}

// ---- without a GPU: plans, keys, errors ----

TEST(GpuScanHost, PlansPickTheKernelByShape) {
  using namespace kiln::cuda;
  auto plan = [](std::int64_t rows, std::int64_t n, DType dtype = DType::F32,
                 ScanOp op = ScanOp::Sum) {
    return plan_scan(ScanDesc{dtype, rows, n, op});
  };
  auto only = [](const ScanPlan& p) {
    EXPECT_EQ(p.launches.size(), 1u);
    EXPECT_EQ(p.workspace_bytes, 0u);
    return p.launches.empty() ? ScanKernel::ChunkTotals : p.launches[0].kernel;
  };
  // f32: 8 items per thread, sub-tiles of 256, tiles of 2048.
  EXPECT_EQ(scan_items_per_thread(DType::F32), 8);
  EXPECT_EQ(scan_items_per_thread(DType::U8), 16);
  EXPECT_EQ(scan_items_per_thread(DType::F64), 4);
  EXPECT_EQ(only(plan(1000, 16)), ScanKernel::RowsThread);
  EXPECT_EQ(plan(1000, 16).launches[0].blocks, 4u);
  EXPECT_EQ(only(plan(3, 17)), ScanKernel::RowsWarp);
  EXPECT_EQ(only(plan(3, 1024)), ScanKernel::RowsWarp);
  EXPECT_EQ(plan(3, 1024).launches[0].blocks, 1u);
  EXPECT_EQ(only(plan(3, 1025)), ScanKernel::Chunks);  // one tile: one chunk
  EXPECT_EQ(only(plan(5000, 100000)), ScanKernel::RowsWarp);
  EXPECT_EQ(only(plan(2000, 100000)), ScanKernel::Chunks);  // a block per row

  // One row of 2^20: 512 tiles, a chunk each, their totals first.
  const ScanPlan row = plan(1, 1 << 20);
  ASSERT_EQ(row.launches.size(), 2u);
  EXPECT_EQ(row.launches[0].kernel, ScanKernel::ChunkTotals);
  EXPECT_EQ(row.launches[1].kernel, ScanKernel::Chunks);
  EXPECT_EQ(row.launches[1].blocks, 512u);
  EXPECT_EQ(row.params.chunks, 512);
  EXPECT_EQ(row.params.tiles_per_chunk, 1);
  EXPECT_EQ(row.workspace_bytes, 512u * 8u);
  // Longer rows: about kScanTargetBlocks chunks of whole tiles covering the row.
  for (const auto& [rows, n, dtype] :
       {std::tuple{1, 3000007, DType::F64}, std::tuple{700, 10000, DType::U8},
        std::tuple{3, 50000000, DType::F16}}) {
    const ScanPlan p = plan(rows, n, dtype, ScanOp::Max);
    const std::int64_t tile = 256 * scan_items_per_thread(dtype);
    const std::int64_t tiles = (n + tile - 1) / tile;
    EXPECT_GT(p.params.tiles_per_chunk, 1) << n;
    EXPECT_GE(p.params.chunks * p.params.tiles_per_chunk, tiles) << n;
    EXPECT_LT((p.params.chunks - 1) * p.params.tiles_per_chunk, tiles) << n;
    EXPECT_LE(rows * p.params.chunks, 2 * kScanTargetBlocks) << n;
    EXPECT_EQ(p.workspace_bytes % 256, 0u);
    EXPECT_GE(p.workspace_bytes, static_cast<std::size_t>(rows * p.params.chunks) *
                                     scan_accumulator_bytes(ScanOp::Max, dtype));
  }
  // Nothing to scan: no launch. Grids beyond the limit loop inside the kernels.
  EXPECT_TRUE(plan(0, 5).launches.empty());
  EXPECT_TRUE(plan(5, 0).launches.empty());
  EXPECT_EQ(plan(std::int64_t{1} << 40, 3).launches[0].blocks,
            static_cast<unsigned>(kScanMaxBlocks));
}

TEST(GpuScanHost, IntegerSumsAndProductsShareAModulePerWidth) {
  using namespace kiln::cuda;
  EXPECT_EQ(scan_kernel_key(ScanKernel::Chunks, ScanOp::Sum, DType::I32), "scan:chunks:cumsum:u32");
  EXPECT_EQ(scan_kernel_key(ScanKernel::RowsWarp, ScanOp::Prod, DType::I8),
            "scan:rows_warp:cumprod:u8");
  EXPECT_EQ(scan_kernel_source(ScanKernel::Chunks, ScanOp::Sum, DType::I16),
            scan_kernel_source(ScanKernel::Chunks, ScanOp::Sum, DType::U16));
  // Extrema depend on the sign; floats keep their dtype.
  EXPECT_EQ(scan_kernel_key(ScanKernel::ChunkTotals, ScanOp::Max, DType::I32),
            "scan:chunk_totals:cummax:i32");
  EXPECT_EQ(scan_kernel_key(ScanKernel::RowsThread, ScanOp::Sum, DType::BF16),
            "scan:rows_thread:cumsum:bf16");
  EXPECT_EQ(scan_accumulator_bytes(ScanOp::Sum, DType::F16), 8u);
  EXPECT_EQ(scan_accumulator_bytes(ScanOp::Min, DType::F16), 4u);
  EXPECT_EQ(scan_accumulator_bytes(ScanOp::Prod, DType::I8), 4u);
}

TEST(GpuScanHost, BadRequestsNameTheOpAndTheValues) {
  using namespace kiln::cuda;
  auto message = [](const ScanDesc& desc) -> std::string {
    try {
      validate(desc);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THROW(validate(ScanDesc{DType::F32, -1, 3, ScanOp::Sum}), InvalidArgument);
  EXPECT_NE(message(ScanDesc{DType::F32, -1, 3, ScanOp::Sum}).find("[cumsum] rows -1 and n 3"),
            std::string::npos);
  EXPECT_THROW(validate(ScanDesc{DType::Bool, 1, 3, ScanOp::Max}), UnsupportedDType);
  EXPECT_NE(message(ScanDesc{DType::Bool, 1, 3, ScanOp::Max}).find("[cummax]"), std::string::npos);
  const std::int64_t big = std::numeric_limits<std::int64_t>::max() / 2;
  EXPECT_THROW(validate(ScanDesc{DType::F32, big, 3, ScanOp::Prod}), InvalidArgument);
  EXPECT_NE(message(ScanDesc{DType::F32, big, 3, ScanOp::Prod}).find("overflows"),
            std::string::npos);
  EXPECT_THROW(validate(ScanDesc{DType::F32, 1, 3, static_cast<ScanOp>(9)}), InvalidArgument);
  EXPECT_THROW((void)plan_scan(ScanDesc{DType::QFloat, 1, 3, ScanOp::Min}), UnsupportedDType);
  EXPECT_THROW((void)scan_kernel_source(ScanKernel::Chunks, ScanOp::Sum, DType::Bool),
               UnsupportedDType);
}
