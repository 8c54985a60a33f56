// The elementwise kernel family. An op is described by a value (ElementwiseOp): the C
// expression of one element in terms of the operands' compute values (a, b, c), the scalars
// (s0..s3), the flat index (i) and an error flag (err); the generator wraps it in a module of
// two kernels: one that walks any shapes and strides (broadcast, transposed, sliced, flipped
// views), and a flat one for when every operand is contiguous and of the output's shape, whose
// parameter block is a tenth of the size (less for the driver to copy per launch). One module
// is generated, compiled and cached per distinct description.
//
// Describing an op allocates nothing (inline dtype lists, a string literal expression is
// referenced): the description is built per op, and a small op's host cost is what it is about.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/runtime.h"

namespace kiln::cuda {

inline constexpr std::size_t kMaxOperands = 4;  // the output and up to three inputs
inline constexpr std::size_t kMaxDims = 12;     // after merging dims that are contiguous together
inline constexpr std::size_t kMaxScalars = 4;

// How the wide-load kernel (kiln_elementwise_vec) is launched: threads per block, vectors per
// thread and loop step (their loads are all in flight together), and a cap on blocks per
// multiprocessor (0: no cap, one loop step per thread). The defaults were measured on the H200
// (docs/cuda-backend-notes.md); KILN_CUDA_VECTOR_SHAPE="threads,unroll,cap" overrides them for
// tuning sweeps.
struct VectorShape {
  unsigned threads = 0;
  int unroll = 0;
  int blocks_per_sm = 0;
};
const VectorShape& vector_shape();

// Up to four dtypes, stored inline.
class DTypeList {
 public:
  DTypeList() = default;
  DTypeList(std::initializer_list<DType> dtypes) { assign(dtypes.begin(), dtypes.size()); }
  DTypeList(const std::vector<DType>& dtypes) { assign(dtypes.data(), dtypes.size()); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  DType operator[](std::size_t i) const noexcept { return dtypes_[i]; }
  const DType* begin() const noexcept { return dtypes_.data(); }
  const DType* end() const noexcept { return dtypes_.data() + size_; }
  void push_back(DType dtype) {
    if (size_ == dtypes_.size()) too_many(size_ + 1u);
    dtypes_[size_++] = dtype;
  }

 private:
  void assign(const DType* dtypes, std::size_t count) {
    if (count > dtypes_.size()) too_many(count);
    for (std::size_t i = 0; i < count; ++i) dtypes_[i] = dtypes[i];
    size_ = static_cast<std::uint8_t>(count);
  }
  [[noreturn]] static void too_many(std::size_t count);
  std::array<DType, 4> dtypes_{};
  std::uint8_t size_ = 0;
};

// The expression of one element. A string literal (const char*) is referenced, not copied: pass
// a pointer only to text that outlives the op. A std::string is owned.
class Expression {
 public:
  Expression(const char* literal) : literal_(literal) {}
  Expression(std::string text) : literal_(nullptr), owned_(std::move(text)) {}
  std::string_view view() const noexcept {
    return literal_ != nullptr ? std::string_view(literal_) : std::string_view(owned_);
  }
  operator std::string_view() const noexcept { return view(); }

 private:
  const char* literal_;
  std::string owned_;
};

struct ElementwiseOp {
  const char* name = "";           // the kiln op, for error messages
  Expression expression = "";      // e.g. "k_add(a, b)"
  DTypeList inputs;                // dtype of each tensor operand
  DType value_dtype = DType::F32;  // dtype whose compute type the expression yields
  DType output = DType::F32;       // converted to this with kiln's cast semantics
  DTypeList scalars;               // compute type of s0, s1, ... (raw 64-bit words at launch)
  const char* failure = nullptr;   // what err means, when the expression can set it
  // An input that is not loaded before the expression: the expression reads it with
  // GATHER(extra), at the loop's position plus extra elements (gather, select).
  int gathered_input = -1;
};

// Elements per vector of op's wide-load kernel: 16 bytes of its widest operand, at least 4.
std::int64_t vector_width(const ElementwiseOp& op) noexcept;

// The kernel a launch takes, each compiled as a module of its own when first launched: a program
// whose tensors are contiguous never waits for the strided kernel's compile (NVRTC's time grows
// with the kernels of a module, and a first launch waits for all of them).
enum class KernelLayout : char {
  Strided = 's',  // any strides: kiln_elementwise
  Flat = 'f',     // every operand contiguous and of the output's shape: kiln_elementwise_flat
  Wide = 'w',     // flat and aligned, 16-byte loads: kiln_elementwise_vec (no gathered input)
  // Any strides whose innermost merged dim is contiguous in every operand, a whole number of
  // vectors long, with the other strides and every pointer on whole vectors: a permuted copy of
  // [B, S, H, D] to [B, H, S, D], a strided slice of rows. kiln_elementwise_strided_vec walks
  // vectors: one split of the index into coordinates and one 16-byte load or store per operand
  // for each vector, not each element (no gathered input).
  StridedWide = 'v',
};

// Generated source of op's kernel for layout (exposed for tests that compile every kernel
// without a GPU).
std::string elementwise_source(const ElementwiseOp& op, KernelLayout layout);

// Runs op writing out (any strides; its shape is the iteration shape); inputs broadcast to it.
void launch_elementwise(Runtime& runtime, const ElementwiseOp& op, const CudaTensor& out,
                        std::span<const CudaTensor* const> inputs,
                        std::span<const std::uint64_t> scalar_bits = {});

// Merges dims that every operand walks contiguously together and drops size-1 dims: fewer
// divisions per element, and most views become rank 1 or 2. Operand k's merged strides go to
// merged[k * row + d]. Returns the merged rank, or -1 when more than max_dims remain.
int merge_dims(const Shape& shape, std::span<const Strides> strides, std::int64_t* sizes,
               std::int64_t* merged, std::size_t row, std::size_t max_dims);

// A scalar in the raw 64-bit form launch_elementwise takes, as the compute type of dtype.
std::uint64_t scalar_bits(double value, DType dtype);
std::uint64_t scalar_bits_int(std::int64_t value);

}  // namespace kiln::cuda
