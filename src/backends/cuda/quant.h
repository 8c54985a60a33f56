// The generated kernels that read QFloat blocks on the GPU (quant_source.cpp; the block readings
// themselves are quant_blocks.h, shared with the host tests):
//   - kiln_quant_decode: blocks to f32, every value the host decoder's bit for bit; with an index
//     it decodes only the rows it names (embedding from a quantized table).
//   - kiln_quant_product: y[rows, n] = x[rows, k] · W[n, k]ᵀ for W's blocks, decoded in registers
//     and multiplied on the tensor cores (mma.m16n8k16): the codes of a step of 16 or 32 values
//     are exact 16-bit floats (A), x is B (f16 or bf16 as it is; an f32 x as three bf16 parts
//     that add up to it exactly, kiln_quant_split), each step's sums are scaled in f32. A block of
//     4 warps takes 64 rows of W and up to 32 rows of x; the rows of W stream through shared
//     memory in tiles of 256 values (cp.async, 16-byte words, two stages). Where k is split over
//     blocks, the last block of a tile to finish sums the splits (a counter per tile); it, or the
//     only split, adds the bias and writes x's dtype. Batch 1 is one column of the product: the
//     weight is read once, in one launch. x's tile is staged beside W's (f16, bf16); an f32 x's
//     three parts are read from global memory. For 5 to kQuantIntRows rows of x and a GGUF kind
//     (quant_int_path: every kind for an f32 x, some for 16-bit x), kiln_quant_round first rounds
//     x to int8 blocks of 32 (as the matrix-vector kernel does), and the product stages x's codes
//     beside W's and multiplies them on the integer tensor cores (mma.m16n8k32 / m16n8k16 s8,
//     exact 32-bit sums scaled per block in f32).
//   - kiln_quant_matvec: the same product for up to 4 rows of x and a GGUF kind (decoding's
//     matrix-vector products): x rounded to int8 blocks of 32 and multiplied with the codes by
//     dp4a, each warp streaming its rows of W through its own stages of shared memory, the grid
//     one wave of resident blocks; the weight is read once (quant_kernels.h).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/dtype.h"
#include "kiln/options.h"

namespace kiln::cuda {

inline constexpr int kQuantTileValues = 256;  // values of a weight row per pipeline stage
inline constexpr int kQuantTileRows = 64;     // weight rows per block of threads (4 warps of 16)
inline constexpr int kQuantThreads = 128;
inline constexpr int kQuantStages = 2;
inline constexpr int kQuantMaxColumnTiles = 4;  // 8 rows of x each: 32 per block
inline constexpr int kQuantMatvecMaxRows = 4;   // rows of x kiln_quant_matvec takes
inline constexpr int kQuantMatvecThreads = 256;
inline constexpr int kQuantMatvecPiece = 1024;   // values of k per piece of a split: 32 a lane
inline constexpr int kQuantMatvecMaxPieces = 4;  // pieces of a split for one row of x
inline constexpr int kQuantMatvecMinBlocks = 2;  // blocks of kiln_quant_matvec an SM holds
// Rows of x up to which kiln_quant_product may round x to int8 blocks of 32 and multiply on the
// integer tensor cores (terms 0, quant_int_path); more rows multiply x in 16-bit floats.
inline constexpr int kQuantIntRows = 64;
// Whether kiln_quant_product takes its integer path for a weight of kind and an x of dtype x (at
// 5 to kQuantIntRows rows): for every GGUF kind when x is f32 or f64 (whose 16-bit path multiplies
// three bf16 parts of it), and with an f16 or bf16 x for the kinds where it measured faster than
// the 16-bit path (docs/quantization-gpu.md): the 8-bit codes of Q8_0 and Q8_K, whose conversion
// to 16-bit floats is the costly part, and Q4_K/Q5_K. The nibble kinds of steps of 32 and the
// K-quants of steps of 16 (whose scaling per element and step the integer path pays twice as
// often) keep x in 16 bits.
inline bool quant_int_path(QuantScheme::Kind kind, DType x) {
  using Kind = QuantScheme::Kind;
  if (kind == Kind::Int8Block || kind == Kind::Int8Channel) return false;
  if (x != DType::F16 && x != DType::BF16) return true;
  return kind == Kind::Q8_0 || kind == Kind::Q8_K || kind == Kind::Q4_K || kind == Kind::Q5_K;
}
// Whether a product of rows rows of x (dtype x) with a weight of kind rounds x to int8 blocks of
// 32: kiln_quant_matvec's up to kQuantMatvecMaxRows rows of a GGUF kind, then the integer path.
inline bool quant_rounds_x(QuantScheme::Kind kind, DType x, std::int64_t rows) {
  using Kind = QuantScheme::Kind;
  if (kind == Kind::Int8Block || kind == Kind::Int8Channel) return false;
  return rows <= kQuantMatvecMaxRows || (rows <= kQuantIntRows && quant_int_path(kind, x));
}

// A measuring knob of the quantized kernels (KILN_QUANT_MV_*): the environment variable `name`
// as an integer in [lo, hi], else `fallback` (unset, or out of range).
int quant_knob(const char* name, int lo, int hi, int fallback);

// Mirrors struct P of kiln_quant_decode: same members, same order.
struct QuantDecodeParams {
  std::uint64_t blocks;      // byte address of the table's row 0
  std::uint64_t out;         // f32 [rows, width]
  std::uint64_t index;       // i64 [rows] (indexed kernels), else 0
  std::uint64_t error_word;  // written with error_token for an index out of range
  std::int64_t rows;         // rows decoded
  std::int64_t width;        // values per row
  std::int64_t row_bytes;
  std::int64_t table_rows;  // rows the index may name
  std::int64_t int8_block;  // values per block of the int8 schemes
  std::uint32_t error_token;
  std::uint32_t pad;
};

// The module with kiln_quant_decode for kind (any kind; int8 schemes take their block size at run
// time), reading row index[i] into row i when indexed.
std::string quant_decode_source(QuantScheme::Kind kind, bool indexed);

// How kiln_quant_product reads a weight. applies is false where it cannot (a kind or int8 block
// size it does not take); the product then decodes the weight and multiplies in float.
struct QuantProductKernel {
  bool applies = false;
  QuantScheme::Kind kind = QuantScheme::Kind::Q8_0;
  // 0 for the GGUF kinds; for the int8 schemes 1 where whole blocks fill a tile (block sizes
  // 16..256 dividing 256), 2 where a tile lies inside one block (multiples of 256, and
  // int8_channel).
  int int8_form = 0;
  std::int64_t int8_block = 0;
  std::int64_t tile_bytes = 0;  // bytes of one row's full tile
  int row_stride = 0;           // bytes of shared memory per weight row and stage
  bool bf16 = true;             // the 16-bit type of the operands (f16 only for an f16 x)
  // Parts of x: 1 for f16 or bf16 x as it is, 3 for f32 (exact in three bf16); 0 for x rounded
  // to int8 blocks of 32 (kiln_quant_round) and multiplied in integers (quant_int_path, at most
  // kQuantIntRows rows of x).
  int terms = 1;
  int column_tiles = 1;      // tiles of 8 rows of x per block
  DType out = DType::F32;    // the product's dtype (x's)
  DType bias = DType::Bool;  // the bias's dtype; Bool for none
  // kiln_quant_matvec instead (a GGUF kind, at most kQuantMatvecMaxRows rows of x): its rows of
  // x per block (1, 2 or 4), the pieces of kQuantMatvecPiece values in a split of k (1, 2 or 4:
  // fewer for more rows of x, whose codes a lane holds in registers), its stages of shared memory
  // per warp, and x's dtype (0 f32, 1 bf16, 2 f16).
  bool matvec = false;
  int matvec_rows = 1;
  int pieces = 1;
  int stages = 2;  // kiln_quant_product: its pipeline's stages (kQuantStages)
  int min_blocks = kQuantMatvecMinBlocks;  // blocks an SM holds: the registers' bound
  int x_type = 0;
  std::int64_t stage_bytes = 0;  // one warp's stage: a row's split of k
  // The kernel's cache key: everything its source depends on.
  std::string key() const;
  std::size_t shared_bytes() const;
};

// The product kernel for a weight of scheme whose rows hold k values, multiplied by rows rows of
// an x of dtype x (F32, F16 or BF16).
QuantProductKernel plan_quant_product(const QuantScheme& scheme, std::int64_t k, DType x,
                                      std::int64_t rows);

// Mirrors struct P of kiln_quant_product: same members, same order.
struct QuantProductParams {
  std::uint64_t weight;    // byte address of W's row 0
  std::uint64_t x;         // [terms][plane] of 16-bit values: x's rows, k each
  std::uint64_t partial;   // f32 [splits][rows][n] where k is split
  std::uint64_t out;       // [rows][n] of kernel.out
  std::uint64_t bias;      // [n] of kernel.bias, or 0
  std::uint64_t counters;  // u32, one per (row tile, column group), 0 (Context::split_counters)
  std::int64_t n, k, rows, row_bytes, plane, int8_block;
  std::int32_t row_tiles, column_groups, splits, tiles_per_split;
  std::int32_t warp_rows;  // kiln_quant_matvec: rows of W a warp takes
  std::int32_t unused;
  std::uint64_t x_scales;  // terms 0: x's int8 blocks' scales (QuantRoundParams), x their codes
};
std::string quant_product_source(const QuantProductKernel& kernel);

// Mirrors struct P of kiln_quant_round.
struct QuantRoundParams {
  std::uint64_t x;       // [rows, k] of x_type, contiguous
  std::uint64_t codes;   // int8 [rows, k], each block of 32 as the tensor-core lanes take it
  std::uint64_t scales;  // f32 [rows, k / 32, 4]: dx, dx sum, dx sum of each half of the codes
  std::int64_t rows, k;
};
// x (0 f32, 1 bf16, 2 f16) rounded to int8 blocks of 32 for kiln_quant_product's terms 0.
std::string quant_round_source(int x_type);
// Mirrors struct P of kiln_quant_split.
struct QuantSplitParams {
  std::uint64_t x, out;
  std::int64_t total;
};
// f32 x as three bf16 planes hi, mid, lo with hi + mid + lo == x exactly (each the leading bits
// of what the ones before leave; NaN and infinity in hi alone).
std::string quant_split_source();

}  // namespace kiln::cuda
