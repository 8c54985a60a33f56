// Value types for op attributes: slices, indexing update modes and module op options.
// Each is plain data with equality, so caches, IR and the wire format can treat them generically.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kiln {

// A range [start, end) along one dimension: negative start/end count from the end, end
// nullopt = to the end, out-of-range bounds are clamped. step != 0 takes every step-th element;
// a negative step walks the same range backwards from its last element (as in burn), so
// Slice(0, std::nullopt, -1) reverses a dim.
struct Slice {
  std::int64_t start = 0;
  std::optional<std::int64_t> end;
  std::int64_t step = 1;

  Slice() = default;
  Slice(std::int64_t start_, std::optional<std::int64_t> end_, std::int64_t step_ = 1)
      : start(start_), end(end_), step(step_) {}
  Slice(std::int64_t start_, std::int64_t end_) : start(start_), end(end_) {}
  static Slice all() { return {}; }
  // Index i alone ([i, i + 1)); the end saturates so that i = INT64_MAX is an empty slice.
  static Slice index(std::int64_t i) {
    if (i == -1) return {i, std::nullopt};
    return {i, i == INT64_MAX ? i : i + 1};
  }
  bool operator==(const Slice&) const = default;
};

// A slice after resolving negative and open bounds against a dimension of known size.
struct ResolvedSlice {
  std::int64_t start = 0;   // first index visited
  std::int64_t length = 0;  // number of indices visited
  std::int64_t step = 1;
  bool operator==(const ResolvedSlice&) const = default;
};

// How scatter / select_assign combine a value with what is there.
enum class IndexingUpdate : std::uint8_t { Assign, Add, Mul, Min, Max };

// Convolution over N spatial dims (N = rank - 2 of the input, layout N, C, spatial...).
// Vectors hold one entry per spatial dim; empty ones take their defaults. Members carry `{}`
// initialisers so designated initialisers ({.padding = {1, 1}}) compile cleanly with -Wextra.
struct ConvOptions {
  std::vector<std::int64_t> stride{};   // one per spatial dim
  std::vector<std::int64_t> padding{};  // symmetric zero padding
  std::vector<std::int64_t> dilation{};
  std::int64_t groups = 1;
  bool operator==(const ConvOptions&) const = default;
};

struct ConvTransposeOptions {
  std::vector<std::int64_t> stride{};
  std::vector<std::int64_t> padding{};
  std::vector<std::int64_t> padding_out{};
  std::vector<std::int64_t> dilation{};
  std::int64_t groups = 1;
  bool operator==(const ConvTransposeOptions&) const = default;
};

struct PoolOptions {
  std::vector<std::int64_t> kernel_size{};
  std::vector<std::int64_t> stride{};
  std::vector<std::int64_t> padding{};
  std::vector<std::int64_t> dilation{};  // max pooling only
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only
  bool operator==(const PoolOptions&) const = default;
};

// im2col / col2im over 2 spatial dims.
struct UnfoldOptions {
  std::vector<std::int64_t> kernel_size{};
  std::vector<std::int64_t> stride{};
  std::vector<std::int64_t> padding{};
  std::vector<std::int64_t> dilation{};
  bool operator==(const UnfoldOptions&) const = default;
};

enum class InterpolateMode : std::uint8_t { Nearest, Bilinear, Bicubic };

struct InterpolateOptions {
  InterpolateMode mode = InterpolateMode::Nearest;
  bool align_corners = false;
  bool operator==(const InterpolateOptions&) const = default;
};

// Scaled dot-product attention on [batch, heads, seq, dim]; a true mask entry is excluded.
struct AttentionOptions {
  std::optional<double> scale;  // default 1/sqrt(dim)
  bool is_causal = false;
  // Dropout on the attention weights (PyTorch's dropout_p), in [0, 1]: each weight is zeroed
  // with this probability and the kept ones are scaled by 1 / (1 - dropout). Each call draws a
  // fresh mask from the device's random stream (Device::seed reproduces it), which the
  // backward pass remakes rather than stores. The fused kernels apply it in place; 0: none.
  double dropout = 0.0;
  bool operator==(const AttentionOptions&) const = default;
};

// How a collective reduction (kiln/distributed.h) combines the ranks' values element by element:
// their sum, their mean (the sum divided by the group's size; integers rounded down, as
// div_scalar rounds them), their maximum or their minimum.
enum class ReduceOperation : std::uint8_t { Sum, Mean, Max, Min };

// How a QFloat tensor stores its values: the block layout, which travels with the tensor.
// GGUF's block types, byte for byte as llama.cpp's ggml lays them out (32 values per block for
// Q4_0..Q8_0, 256 for the k-quants Q2_K..Q8_K), and kiln's own symmetric int8 schemes: one f32
// scale followed by its int8 values, either per block of block_size values along the last dim
// (Int8Block) or per row of the last dim (Int8Channel, block_size 0). Make one with
// quant_scheme(kind) or int8_block_scheme(n) from <kiln/quant.h>, which document the layouts.
struct QuantScheme {
  enum class Kind : std::uint8_t {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    Int8Block,
    Int8Channel,
  };
  Kind kind = Kind::Q8_0;
  std::int64_t block_size = 32;  // values per block; fixed by a GGUF kind, 0 for Int8Channel
  bool operator==(const QuantScheme&) const = default;
};

}  // namespace kiln
