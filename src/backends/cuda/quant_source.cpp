// Sources of the quantized kernels (quant.h): the prelude, the block readings and the kernel
// bodies (quant_blocks.h, quant_kernels.h, embedded by CMake) and an extern "C" entry that
// instantiates one body's template for the kind and shape at hand.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "backends/cuda/kernel_source.h"
#include "backends/cuda/quant.h"
#include "backends/cuda/quant_blocks_source.h"
#include "backends/cuda/quant_kernels_source.h"
#include "backends/cuda/tensor_core_source.h"
#include "quant/blocks.h"

namespace kiln::cuda {

using namespace fmt::literals;
using Kind = QuantScheme::Kind;

namespace {

// The struct of quant_blocks.h that reads kind.
const char* kind_struct(Kind kind) {
  switch (kind) {
    case Kind::Q4_0:
      return "KqQ4_0";
    case Kind::Q4_1:
      return "KqQ4_1";
    case Kind::Q5_0:
      return "KqQ5_0";
    case Kind::Q5_1:
      return "KqQ5_1";
    case Kind::Q8_0:
      return "KqQ8_0";
    case Kind::Q2_K:
      return "KqQ2_K";
    case Kind::Q3_K:
      return "KqQ3_K";
    case Kind::Q4_K:
      return "KqQ4_K";
    case Kind::Q5_K:
      return "KqQ5_K";
    case Kind::Q6_K:
      return "KqQ6_K";
    case Kind::Q8_K:
      return "KqQ8_K";
    case Kind::Int8Block:
    case Kind::Int8Channel:
      return "KqInt8";
  }
  return "KqQ8_0";
}

bool is_int8(Kind kind) { return kind == Kind::Int8Block || kind == Kind::Int8Channel; }

// Shared memory per weight row and stage: the tile's bytes at any of 16 starting offsets and 8
// bytes after them for the whole words the readers take (quant_blocks.h's KqStaged), a multiple
// of 16 bytes; an odd multiple of 16 so the 8 rows a warp reads at once start in different banks.
int row_stride_for(std::int64_t tile_bytes) {
  std::int64_t stride = (tile_bytes + 15 + 8 + 15) / 16 * 16;
  if (stride % 32 == 0) stride += 16;
  return static_cast<int>(stride);
}

// Blocks of kiln_quant_matvec an SM should hold (its registers are bounded to allow them):
// kQuantMatvecMinBlocks, or KILN_QUANT_MV_BLOCKS (1 to 4) for measuring.
int matvec_min_blocks() {
  static const int blocks = quant_knob("KILN_QUANT_MV_BLOCKS", 1, 4, kQuantMatvecMinBlocks);
  return blocks;
}

// Shared memory of a kiln_quant_matvec block: an SM's 228 KiB shared by min_blocks blocks, 1 KiB
// of each reserved, at most 100 KiB.
std::int64_t matvec_shared_budget(int min_blocks) {
  return std::min<std::int64_t>(100, 227 / min_blocks - 1) * 1024;
}

// Pieces of a matrix-vector split for one row of x: kQuantMatvecMaxPieces, or
// KILN_QUANT_MV_PIECES (1, 2 or 4) for measuring.
int matvec_max_pieces() {
  static const int pieces = [] {
    const int value = quant_knob("KILN_QUANT_MV_PIECES", 1, 4, kQuantMatvecMaxPieces);
    return value == 3 ? kQuantMatvecMaxPieces : value;
  }();
  return pieces;
}

// Rows of x up to which the tiled product rounds x to int8: kQuantIntRows, or KILN_QUANT_INT_ROWS
// (0 to 256) for measuring.
int quant_int_rows() {
  static const int rows = quant_knob("KILN_QUANT_INT_ROWS", 0, 256, kQuantIntRows);
  return rows;
}

// Whether KILN_QUANT_INT_ALL=1 asks the integer path of every GGUF kind, for measuring it where
// quant_int_path keeps x in 16 bits.
bool int_path_for_all() {
  static const bool all = quant_knob("KILN_QUANT_INT_ALL", 0, 1, 0) == 1;
  return all;
}

// Stages of kiln_quant_product's pipeline: kQuantStages, or KILN_QUANT_STAGES (2 to 4) for
// measuring.
int tile_stages() {
  static const int stages = quant_knob("KILN_QUANT_STAGES", 2, 4, kQuantStages);
  return stages;
}

// The shared texts every quantized module starts with.
std::string quant_module() {
  return kernel_prelude() + kTensorCoreSource + kQuantBlocksSource + kQuantKernelsSource +
         "\nusing namespace kiln::cuda::quant_blocks;\n";
}

}  // namespace

int quant_knob(const char* name, int lo, int hi, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  const long value = std::strtol(text, nullptr, 10);
  return value >= lo && value <= hi ? static_cast<int>(value) : fallback;
}

std::string quant_decode_source(Kind kind, bool indexed) {
  const std::string body = is_int8(kind)
                               ? fmt::format("kq_decode_int8<{}>(p);", indexed)
                               : fmt::format("kq_decode<{}, {}>(p);", kind_struct(kind), indexed);
  return quant_module() + fmt::format(
                              "extern \"C\" __global__ void __launch_bounds__(256) "
                              "kiln_quant_decode(const KqDecodeParams p) {{ {} }}\n",
                              body);
}

QuantProductKernel plan_quant_product(const QuantScheme& scheme, std::int64_t k, DType x,
                                      std::int64_t rows) {
  QuantProductKernel plan;
  plan.kind = scheme.kind;
  if (k <= 0 || k % 16 != 0) return plan;
  if (is_int8(scheme.kind)) {
    const std::int64_t block = scheme.kind == Kind::Int8Channel ? k : scheme.block_size;
    if (block <= 0 || block % 16 != 0) return plan;
    if (block <= kQuantTileValues && kQuantTileValues % block == 0) {
      plan.int8_form = 1;
      plan.tile_bytes = kQuantTileValues / block * (block + 4);
    } else if (block % kQuantTileValues == 0 || scheme.kind == Kind::Int8Channel) {
      // A channel's one block is the row: a tile lies inside it for any k (the last one short).
      plan.int8_form = 2;
      plan.tile_bytes = kQuantTileValues;
    } else {
      return plan;
    }
    plan.int8_block = block;
  } else {
    const quant::BlockSize block = quant::block_size(scheme, k);
    if (block.values == 0 || k % block.values != 0) return plan;
    plan.tile_bytes = kQuantTileValues / block.values * block.bytes;
  }
  plan.row_stride = row_stride_for(plan.tile_bytes);
  if (!is_int8(scheme.kind) && rows <= kQuantMatvecMaxRows) {
    plan.matvec = true;
    plan.matvec_rows = rows <= 1 ? 1 : (rows <= 2 ? 2 : kQuantMatvecMaxRows);
    // As many pieces as k fills, at most kQuantMatvecMaxPieces / rows (the registers of x).
    plan.pieces = 1;
    while (plan.pieces * plan.matvec_rows < matvec_max_pieces() &&
           plan.pieces * kQuantMatvecPiece < k)
      plan.pieces *= 2;
    // quant_kernels.h's kq_mv_stage_bytes and kq_mv_x_bytes: as many stages (2 to 8) as the
    // shared memory of one of the min_blocks blocks an SM holds.
    plan.min_blocks = matvec_min_blocks();
    plan.stage_bytes =
        (plan.pieces * kQuantMatvecPiece / kQuantTileValues * plan.tile_bytes + 38) / 16 * 16;
    const std::int64_t x_bytes =
        std::int64_t{plan.matvec_rows} * plan.pieces * (kQuantMatvecPiece + 32 * 4 + 64 * 4);
    const std::int64_t warps = kQuantMatvecThreads / 32;
    plan.stages = static_cast<int>(
        std::clamp((matvec_shared_budget(plan.min_blocks) - x_bytes) / (warps * plan.stage_bytes),
                   std::int64_t{2}, std::int64_t{8}));
  }
  if (!plan.matvec) plan.stages = tile_stages();
  plan.bf16 = x != DType::F16;
  plan.terms = x == DType::F32 ? 3 : 1;
  plan.x_type = x == DType::F32 ? 0 : (x == DType::BF16 ? 1 : 2);
  const bool int_path =
      quant_int_path(scheme.kind, x) || (!is_int8(scheme.kind) && int_path_for_all());
  if (int_path && rows <= quant_int_rows()) plan.terms = 0;
  const std::int64_t tiles = (rows + 7) / 8;
  plan.column_tiles = tiles >= 4 ? 4 : (tiles >= 2 ? 2 : 1);
  plan.applies = true;
  return plan;
}

std::string QuantProductKernel::key() const {
  const std::string output =
      fmt::format("{}:{}", short_name(out), bias == DType::Bool ? "-" : short_name(bias));
  if (matvec) {
    return fmt::format("quant_matvec:{}:{}:{}:{}:{}:{}:{}", kind_struct(kind), matvec_rows, pieces,
                       stages, min_blocks, x_type, output);
  }
  return fmt::format("quant_product:{}:{}:{}:{}:{}:{}:{}:{}", kind_struct(kind), int8_form,
                     bf16 ? "bf16" : "f16", terms, column_tiles, row_stride, stages, output);
}

std::size_t QuantProductKernel::shared_bytes() const {
  if (matvec) {
    return static_cast<std::size_t>((kQuantMatvecThreads / 32) * stages * stage_bytes +
                                    matvec_rows * pieces * (kQuantMatvecPiece + 32 * 4 + 64 * 4));
  }
  // quant_kernels.h's kq_stage_bytes: W's rows, and x's tile where it is staged: rounded to int8
  // (its codes at 288 bytes a row, its blocks' scales at 144) or in one 16-bit part (544 a row).
  const int x_bytes = terms == 0   ? column_tiles * 8 * (kQuantTileValues + 32 + 144)
                      : terms == 1 ? column_tiles * 8 * (2 * kQuantTileValues + 32)
                                   : 0;
  return static_cast<std::size_t>(stages) * (kQuantTileRows * row_stride + x_bytes);
}

std::string quant_product_source(const QuantProductKernel& kernel) {
  // Out::store: the sum of output `at` (weight row `row`) plus the bias, in the output's dtype.
  const std::string add_bias =
      kernel.bias == DType::Bool
          ? std::string()
          : fmt::format("s += (float)({});\n",
                        load_expression(kernel.bias, fmt::format("(({}*)p.bias)[row]",
                                                                 storage_type(kernel.bias))));
  return quant_module() +
         fmt::format(
             "struct KqOut {{\n"
             "  static __device__ __forceinline__ void store(const KqProductParams& p, i64 at, "
             "i64 row, float s) {{\n"
             "    {add_bias}"
             "    (({out_t}*)p.out)[at] = {store};\n"
             "  }}\n"
             "}};\n"
             "extern \"C\" __global__ void __launch_bounds__({threads}) "
             "{name}(const KqProductParams p) {{\n"
             "  extern __shared__ __align__(16) unsigned char smem[];\n"
             "  {body}\n"
             "}}\n",
             "add_bias"_a = add_bias, "out_t"_a = storage_type(kernel.out),
             "store"_a = store_expression(kernel.out, "s"),
             "threads"_a = kernel.matvec
                               ? fmt::format("{}, {}", kQuantMatvecThreads, kernel.min_blocks)
                               : std::to_string(kQuantThreads),
             "name"_a = kernel.matvec ? "kiln_quant_matvec" : "kiln_quant_product",
             "body"_a = kernel.matvec
                            ? fmt::format("kq_matvec<{}, {}, {}, {}, {}, KqOut>(p, smem);",
                                          kind_struct(kernel.kind), kernel.matvec_rows,
                                          kernel.pieces, kernel.stages, kernel.x_type)
                            : fmt::format("kq_product<{}, {}, {}, {}, {}, {}, {}, KqOut>(p, smem);",
                                          kind_struct(kernel.kind), kernel.bf16, kernel.terms,
                                          kernel.column_tiles, kernel.int8_form, kernel.row_stride,
                                          kernel.stages));
}

std::string quant_round_source(int x_type) {
  return quant_module() + fmt::format(
                              "extern \"C\" __global__ void __launch_bounds__(256) "
                              "kiln_quant_round(const KqRoundParams p) {{ kq_round_x<{}>(p); }}\n",
                              x_type);
}

std::string quant_split_source() {
  return quant_module() +
         "extern \"C\" __global__ void __launch_bounds__(256) "
         "kiln_quant_split(const KqSplitParams p) { kq_split(p); }\n";
}

}  // namespace kiln::cuda
