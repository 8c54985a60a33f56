// matmul and linear whose weight is a QFloat matrix, and embedding from a QFloat table: the
// product reads the blocks in kiln_quant_product (quant.h), never decoding the weight whole; the
// lookup decodes only the rows it reads. A weight the kernel does not take (in its stored order
// as the right operand, a kind or int8 block size it does not read, a GPU before sm_80) is decoded
// and multiplied in f32, as the CPU computes every quantized product.
#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_quant_tensor.h"
#include "backends/cuda/grid_math.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/lib_call.h"
#include "backends/cuda/quant.h"

namespace kiln::cuda {

namespace {

// Rows of x per launch: the partial sums of a launch take splits x rows x n floats.
constexpr std::int64_t kRowsPerLaunch = 256;

// x [..., k] as [rows, k] of f32 decoded weight values, in f32: the CPU's way.
Primitive float_product(CudaBackend& backend, Primitive x, const Primitive& weight,
                        OptionalPrimitive bias) {
  const DType dtype = x->dtype();
  Primitive values = backend.dequantize(weight, DType::F32);
  Primitive xf = backend.cast(std::move(x), DType::F32);
  if (bias) bias = backend.cast(std::move(*bias), DType::F32);
  Primitive y = backend.linear(std::move(xf), std::move(values), std::move(bias));
  return backend.cast(std::move(y), dtype);
}

// The dtype of x the quantized kernels read: f16 or bf16 as it is, any other float as f32.
DType kernel_x_dtype(DType x) { return x == DType::F16 || x == DType::BF16 ? x : DType::F32; }

// x contiguous in kernel_x_dtype.
TensorPtr kernel_x(CudaBackend& backend, Primitive x, const char* op) {
  const DType dtype = kernel_x_dtype(x->dtype());
  return backend.contiguous(dtype == x->dtype() ? std::move(x) : backend.cast(x, dtype), op);
}

// Refuses a grid of more blocks than a launch takes.
void check_grid(const char* op, std::int64_t n, std::int64_t blocks) {
  if (blocks > 0x7fffffff) {
    detail::fail<InvalidArgument>(op, "a weight of ", n, " rows needs ", blocks,
                                  " blocks of threads, more than a grid holds");
  }
}

// The partial sums of `splits` splits of k (none for one): splits floats per output.
std::size_t partial_bytes(std::int64_t splits, std::int64_t rows, std::int64_t n) {
  return splits > 1 ? static_cast<std::size_t>(splits * rows * n) * sizeof(float) : 0;
}

// What both product kernels are told of W, x (its first row at address x), the output (at out),
// the partial sums of the splits of k (splits floats of each output, or none), the bias and the
// split-k counters.
QuantProductParams product_params(Runtime& runtime, const CudaQuantTensor& w, std::int64_t n,
                                  std::int64_t k, std::int64_t rows, CUdeviceptr x,
                                  const Workspace& partial, CUdeviceptr out, const TensorPtr& b) {
  QuantProductParams p{};
  p.weight = w.blocks();
  p.x = x;
  p.partial = reinterpret_cast<std::uintptr_t>(partial.get());
  p.out = out;
  p.bias = b ? b->data() : 0;
  p.counters = runtime.context.split_counters();
  p.n = n;
  p.k = k;
  p.rows = rows;
  p.row_bytes = w.row_bytes();
  return p;
}

// Blocks of kernel (threads threads, shared bytes of shared memory) an SM holds at once, asked
// of the driver once per kernel (a stale answer, for a handle the driver gave again after its
// module was unloaded, would only shape the grid worse). The shared memory is allowed first.
int resident_blocks(CUfunction kernel, int threads, unsigned shared, const char* op) {
  Runtime::allow_shared(kernel, shared, op);
  static std::mutex mutex;
  static std::unordered_map<CUfunction, int> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find(kernel); it != known.end()) return it->second;
  int blocks = 0;
  KILN_CUDA_CHECK(op,
                  cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared));
  blocks = std::max(blocks, 1);
  known.emplace(kernel, blocks);
  return blocks;
}

// How the products' kernels launch: one product's kernels, and consecutive products, overlap
// (one's weight starts streaming in while the launch before it finishes: kiln_quant_matvec and
// kiln_quant_product read nothing else before their griddepcontrol.wait, kiln_quant_round nothing
// at all, and none of them writes a weight).
constexpr LaunchOrder kProductOrder = LaunchOrder::OverlappingWeightReader;

// The rows of W a warp of kiln_quant_matvec takes: the fewest that make a grid of at most one
// wave (every block resident from the start, each taking the same share of the weight, so no SM
// waits on a tail). KILN_QUANT_MV_WAVES (1 to 8) allows that many waves, for measuring.
std::int64_t matvec_warp_rows(std::int64_t n, std::int64_t splits, std::int64_t resident) {
  static const std::int64_t waves = quant_knob("KILN_QUANT_MV_WAVES", 1, 8, 1);
  const std::int64_t warps = kQuantMatvecThreads / 32;
  const std::int64_t warp_tasks = ceil_div(n, warps) * splits;
  return std::max<std::int64_t>(1, ceil_div(warp_tasks, waves * resident));
}

// out = x · Wᵀ (+ b) for at most kQuantMatvecMaxRows rows of x through kiln_quant_matvec: x as it
// is (f32, f16 or bf16; f64 as f32), k split in chunks of plan.pieces × kQuantMatvecPiece values,
// a block per 8 × warp_rows rows of W and split.
void matvec(CudaBackend& backend, const QuantProductKernel& plan, Primitive x,
            const CudaQuantTensor& w, std::int64_t n, std::int64_t k, std::int64_t rows,
            const TensorPtr& b, const TensorPtr& out, const char* op) {
  Runtime& runtime = backend.runtime();
  TensorPtr values = kernel_x(backend, std::move(x), op);
  CUfunction kernel = runtime.compiler.function(plan.key(), "kiln_quant_matvec",
                                                [&] { return quant_product_source(plan); });
  const auto shared = static_cast<unsigned>(plan.shared_bytes());
  const std::int64_t chunk = std::int64_t{plan.pieces} * kQuantMatvecPiece;
  const std::int64_t splits = ceil_div(k, chunk);
  const std::int64_t resident =
      std::int64_t{resident_blocks(kernel, kQuantMatvecThreads, shared, op)} *
      runtime.context.sm_count();
  const std::int64_t warp_rows = matvec_warp_rows(n, splits, resident);
  const std::int64_t row_tiles = ceil_div(n, warp_rows * (kQuantMatvecThreads / 32));
  const std::int64_t blocks = row_tiles * splits;
  check_grid(op, n, blocks);
  Workspace partial(runtime, partial_bytes(splits, rows, n), op);
  QuantProductParams p =
      product_params(runtime, w, n, k, rows, values->data(), partial, out->data(), b);
  p.row_tiles = static_cast<std::int32_t>(row_tiles);
  p.column_groups = 1;
  p.splits = static_cast<std::int32_t>(splits);
  p.tiles_per_split = static_cast<std::int32_t>(chunk / 32);  // blocks of 32 values
  p.warp_rows = static_cast<std::int32_t>(warp_rows);
  runtime.launch(op, kernel, static_cast<unsigned>(blocks), kQuantMatvecThreads, p, shared, nullptr,
                 kProductOrder);
}

}  // namespace

Primitive quantized_product(CudaBackend& backend, Primitive x, const Primitive& weight,
                            OptionalPrimitive bias) {
  const char* op = bias ? "linear" : "matmul";
  Runtime& runtime = backend.runtime();
  const CudaQuantTensor& w = as_quantized(weight);
  const DType dtype = x->dtype();
  const std::int64_t k = weight->shape()[0], n = weight->shape()[1];
  detail::DimVector dims(x->shape().vector());
  dims.back() = n;
  const Shape out_shape(std::move(dims));
  if (out_shape.num_elements() == 0) return backend.make_tensor(dtype, out_shape, op);
  const std::int64_t rows = out_shape.num_elements() / n;
  QuantProductKernel plan;
  if (w.is_transposed_matrix() && runtime.context.major() >= 8) {
    plan = plan_quant_product(w.scheme(), k, kernel_x_dtype(dtype), std::min(rows, kRowsPerLaunch));
  }
  if (!plan.applies) return float_product(backend, std::move(x), weight, std::move(bias));
  TensorPtr b = bias ? backend.contiguous(*bias, op) : nullptr;
  TensorPtr out = backend.make_tensor(dtype, out_shape, op);
  plan.out = dtype;
  plan.bias = b ? b->dtype() : DType::Bool;
  // The matrix-vector kernel sums its splits of k with a counter per block of rows of W (8 rows
  // or more): a weight of more rows than the counters cover (131,072) and more than one split
  // takes the tiled one.
  if (plan.matvec && (k <= std::int64_t{plan.pieces} * kQuantMatvecPiece ||
                      ceil_div(n, 8) <= std::int64_t{Context::kSplitCounters})) {
    matvec(backend, plan, std::move(x), w, n, k, rows, b, out, op);
    return out;
  }
  plan.matvec = false;

  // x's rows, k 16-bit values each, 16-byte aligned (plane after plane for f32's three parts);
  // or x rounded to int8 blocks: k codes a row and a float4 of scales a block.
  TensorPtr planes, values = kernel_x(backend, std::move(x), op);
  const bool int8_x = plan.terms == 0;
  Workspace codes(runtime, int8_x ? static_cast<std::size_t>(rows * k) : 0, op);
  Workspace scales(runtime, int8_x ? static_cast<std::size_t>(rows * (k / 32) * 16) : 0, op);
  const std::int64_t x_row_bytes = int8_x ? k : 2 * k;
  if (int8_x) {
    QuantRoundParams p{values->data(), reinterpret_cast<std::uintptr_t>(codes.get()),
                       reinterpret_cast<std::uintptr_t>(scales.get()), rows, k};
    CUfunction round =
        runtime.compiler.function(fmt::format("quant_round:{}", plan.x_type), "kiln_quant_round",
                                  [&] { return quant_round_source(plan.x_type); });
    runtime.launch(op, round, runtime.blocks_for(rows * k / 4, 256), 256, p, 0, nullptr,
                   kProductOrder);
  } else if (values->dtype() == DType::F32) {
    planes = backend.make_tensor(DType::BF16, Shape{3, rows, k}, op);
    QuantSplitParams p{values->data(), planes->data(), rows * k};
    CUfunction split = runtime.compiler.function("quant_split", "kiln_quant_split",
                                                 [] { return quant_split_source(); });
    runtime.launch(op, split, runtime.blocks_for(rows * k, 256), 256, p);
  } else {
    planes = std::move(values);
    if (planes->data() % 16 != 0) {
      TensorPtr aligned = backend.make_tensor(planes->dtype(), planes->shape(), op);
      backend.copy_into(*aligned, *planes, op);
      planes = std::move(aligned);
    }
  }

  CUfunction product = runtime.compiler.function(plan.key(), "kiln_quant_product",
                                                 [&] { return quant_product_source(plan); });
  const std::int64_t row_tiles = ceil_div(n, kQuantTileRows);
  const std::int64_t tiles = ceil_div(k, kQuantTileValues);
  const std::int64_t columns = static_cast<std::int64_t>(plan.column_tiles) * 8;
  const auto shared = static_cast<unsigned>(plan.shared_bytes());
  const std::int64_t resident = std::int64_t{resident_blocks(product, kQuantThreads, shared, op)} *
                                runtime.context.sm_count();
  for (std::int64_t first = 0; first < rows; first += kRowsPerLaunch) {
    const std::int64_t count = std::min(kRowsPerLaunch, rows - first);
    const std::int64_t groups = ceil_div(count, columns);
    // Split k where the tiles of W's and x's rows alone are fewer than the blocks the GPU holds at
    // once: as many splits as keep the grid one wave of resident blocks (a second, partial wave
    // would leave SMs idle at the end); a tile of the output per split-k counter.
    std::int64_t wanted = std::clamp(resident / (row_tiles * groups), std::int64_t{1}, tiles);
    if (row_tiles * groups > static_cast<std::int64_t>(Context::kSplitCounters)) wanted = 1;
    const std::int64_t tiles_per_split = ceil_div(tiles, wanted);
    const std::int64_t splits = ceil_div(tiles, tiles_per_split);
    const std::int64_t blocks = row_tiles * groups * splits;
    check_grid(op, n, blocks);
    Workspace partial(runtime, partial_bytes(splits, count, n), op);
    const CUdeviceptr x_first =
        (int8_x ? reinterpret_cast<std::uintptr_t>(codes.get()) : planes->data()) +
        static_cast<CUdeviceptr>(first * x_row_bytes);
    QuantProductParams p = product_params(
        runtime, w, n, k, count, x_first, partial,
        out->data() +
            static_cast<CUdeviceptr>(first * n * static_cast<std::int64_t>(dtype_size(dtype))),
        b);
    p.plane = rows * k;
    p.int8_block = plan.int8_block;
    if (int8_x) {
      p.x_scales = reinterpret_cast<std::uintptr_t>(scales.get()) +
                   static_cast<CUdeviceptr>(first * (k / 32) * 16);
    }
    p.row_tiles = static_cast<std::int32_t>(row_tiles);
    p.column_groups = static_cast<std::int32_t>(groups);
    p.splits = static_cast<std::int32_t>(splits);
    p.tiles_per_split = static_cast<std::int32_t>(tiles_per_split);
    runtime.launch(op, product, static_cast<unsigned>(blocks), kQuantThreads, p, shared, nullptr,
                   kProductOrder);
  }
  return out;
}

Primitive CudaBackend::embedding(Primitive weights, Primitive indices) {
  if (weights->dtype() == DType::QFloat) [[unlikely]] {
    const CudaQuantTensor& table = as_quantized(weights);
    if (table.in_stored_order()) return quantized_rows(*this, table, indices);
    weights = dequantize(std::move(weights), DType::F32);
  }
  return Backend::embedding(std::move(weights), std::move(indices));
}

}  // namespace kiln::cuda
