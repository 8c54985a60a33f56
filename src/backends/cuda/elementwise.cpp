#include "backends/cuda/elementwise.h"

#include <array>

#include "backends/cuda/kernel_source.h"

namespace kiln::cuda {

namespace {

// Mirrors struct P of the generated source (elementwise_source.cpp): same members, same order.
struct Params {
  std::int64_t n;
  std::int32_t rank;
  std::int32_t contiguous;
  std::int64_t sizes[kMaxDims];
  std::int64_t strides[kMaxOperands][kMaxDims];
  std::uint64_t pointers[kMaxOperands];
  std::uint64_t scalars[4];
  std::uint64_t error_word;
  std::uint32_t error_token;
};

// The kernel's cache key, built in a per-thread buffer (no allocation once it has grown).
const std::string& key_of(const ElementwiseOp& op) {
  thread_local std::string key;
  key.assign("ew:").append(op.name).append(":").append(std::to_string(op.gathered_input));
  key.append(":").append(short_name(op.output)).append(":").append(short_name(op.value_dtype));
  for (DType d : op.inputs) key.append(":").append(short_name(d));
  key.append("|");
  for (DType d : op.scalars) key.append(short_name(d)).append(",");
  return key.append("|").append(op.expression);
}

// Merges dims that every operand walks contiguously together and drops size-1 dims: fewer
// divisions per element, and most views become rank 1 or 2. Writes straight into the launch
// parameters; returns the merged rank.
int collapse(const Shape& shape, const std::array<Strides, kMaxOperands>& strides,
             std::size_t count, std::int64_t* sizes, std::int64_t (*out)[kMaxDims]) {
  int rank = 0;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    if (rank > 0) {
      bool mergeable = true;
      for (std::size_t k = 0; k < count; ++k) {
        if (out[k][rank - 1] != strides[k][d] * shape[d]) mergeable = false;
      }
      if (mergeable) {
        sizes[rank - 1] *= shape[d];
        for (std::size_t k = 0; k < count; ++k) out[k][rank - 1] = strides[k][d];
        continue;
      }
    }
    if (rank == static_cast<int>(kMaxDims)) {
      detail::fail<InvalidArgument>("cuda", "a view of shape ", shape.to_string(),
                                    " has more than ", kMaxDims,
                                    " dims that cannot be merged; at most ", kMaxDims,
                                    " are supported on cuda");
    }
    sizes[rank] = shape[d];
    for (std::size_t k = 0; k < count; ++k) out[k][rank] = strides[k][d];
    ++rank;
  }
  return rank;
}

}  // namespace

void launch_elementwise(Runtime& runtime, const ElementwiseOp& op, const CudaTensor& out,
                        std::span<const CudaTensor* const> inputs,
                        std::span<const std::uint64_t> scalar_bits) {
  const Shape& shape = out.shape();
  const std::int64_t n = shape.num_elements();
  if (n == 0) return;
  Params params{};
  params.n = n;
  std::array<Strides, kMaxOperands> strides;
  strides[0] = out.strides();
  params.pointers[0] = out.data();
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    strides[k + 1] = broadcast_strides(*inputs[k], shape);
    params.pointers[k + 1] = inputs[k]->data();
  }
  const std::size_t count = inputs.size() + 1;
  params.rank = collapse(shape, strides, count, params.sizes, params.strides);
  bool contiguous = params.rank <= 1;
  for (std::size_t k = 0; k < count && params.rank == 1; ++k) {
    if (params.strides[k][0] != 1) contiguous = false;
  }
  params.contiguous = contiguous ? 1 : 0;
  for (std::size_t k = 0; k < scalar_bits.size() && k < 4; ++k) params.scalars[k] = scalar_bits[k];
  params.error_word = runtime.context.error_word();
  if (op.failure != nullptr) params.error_token = runtime.context.error_token(op.name, op.failure);
  CUfunction function = runtime.compiler.function(key_of(op), "kiln_elementwise",
                                                  [&] { return elementwise_source(op); });
  runtime.launch(op.name, function, runtime.blocks_for(n, 256), 256, &params);
}

}  // namespace kiln::cuda
