#include "backends/cuda/elementwise.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "backends/cuda/env_switch.h"
#include "backends/cuda/kernel_capture.h"
#include "backends/cuda/kernel_source.h"

namespace kiln::cuda {

namespace {

constexpr unsigned kThreads = 256;

// Mirrors struct P of the generated source (elementwise_source.cpp): same members, same order.
struct Params {
  std::int64_t n;
  std::int32_t rank;
  std::int64_t sizes[kMaxDims];
  std::int64_t strides[kMaxOperands][kMaxDims];
  std::uint64_t pointers[kMaxOperands];
  std::uint64_t scalars[kMaxScalars];
  std::uint64_t error_word;
  std::uint32_t error_token;
};

// Mirrors struct PF of the generated source: the flat kernel's parameters.
struct FlatParams {
  std::int64_t n;
  std::uint64_t pointers[kMaxOperands];
  std::uint64_t scalars[kMaxScalars];
  std::uint64_t error_word;
  std::uint32_t error_token;
  std::uint32_t reverse;  // the wide-load kernel walks its vectors from the last
};

// The module's cache key: what the generated source depends on (dtypes as letters, the gathered
// input, the expression), built in a stack buffer; a heap string only for long expressions.
class ModuleKey {
 public:
  ModuleKey(const ElementwiseOp& op, KernelLayout layout) {
    const std::string_view expression = op.expression.view();
    char header[kHeader];
    std::size_t h = 0;
    header[h++] = 'e';
    header[h++] = static_cast<char>(layout);
    header[h++] = static_cast<char>('0' + op.gathered_input + 1);
    header[h++] = letter(op.value_dtype);
    header[h++] = letter(op.output);
    for (DType d : op.inputs) header[h++] = letter(d);
    header[h++] = '|';
    for (DType d : op.scalars) header[h++] = letter(d);
    header[h++] = '|';
    const std::size_t size = h + expression.size();
    char* text = buffer_;
    if (size > sizeof buffer_) {
      heap_.resize(size);
      text = heap_.data();
    }
    std::memcpy(text, header, h);
    std::memcpy(text + h, expression.data(), expression.size());
    view_ = std::string_view(text, size);
  }
  ModuleKey(const ModuleKey&) = delete;
  ModuleKey& operator=(const ModuleKey&) = delete;
  std::string_view view() const noexcept { return view_; }

 private:
  static constexpr std::size_t kHeader = 5 + 2 * 4 + 2;
  static char letter(DType d) noexcept { return static_cast<char>('A' + static_cast<int>(d)); }
  char buffer_[160];
  std::string heap_;
  std::string_view view_;
};

// Successive wide-load launches walk their vectors in alternating directions. An eager chain's
// op then starts on the end of its input that the op before wrote last, and those lines are
// still in L2 (a 4096^2 f32 tensor is 64 MiB, the H200's L2 60 MB). Elementwise results do not
// depend on the order. KILN_CUDA_ALTERNATE=0 keeps every launch forward (for comparisons).
std::uint32_t next_direction() {
  static const bool alternate = on_unless_zero("KILN_CUDA_ALTERNATE");
  static std::atomic<std::uint32_t> launches{0};
  return alternate ? launches.fetch_add(1, std::memory_order_relaxed) & 1u : 0u;
}

// Whether the strided-vector kernel can take params (merged dims, pointers set): its innermost
// dim contiguous in every operand and a whole number of vectors long, every other stride and
// every pointer on whole vectors, so each vector of the iteration is one aligned run in every
// operand. KILN_CUDA_STRIDED_VECTORS=0 keeps such views on the element-wise strided kernel.
bool strided_vectors_fit(const ElementwiseOp& op, const Params& params, std::size_t count) {
  static const bool enabled = on_unless_zero("KILN_CUDA_STRIDED_VECTORS");
  const int rank = params.rank;
  if (!enabled || op.gathered_input >= 0 || rank < 2) return false;
  const std::int64_t width = vector_width(op);
  if (params.sizes[rank - 1] % width != 0) return false;
  for (std::size_t k = 0; k < count; ++k) {
    if (params.strides[k][rank - 1] != 1) return false;
    for (int d = 0; d + 1 < rank; ++d) {
      if (params.strides[k][d] % width != 0) return false;
    }
    const DType dtype = k == 0 ? op.output : op.inputs[k - 1];
    const std::uint64_t bytes =
        std::min<std::uint64_t>(16, static_cast<std::uint64_t>(width) * dtype_size(dtype));
    if (params.pointers[k] % bytes != 0) return false;
  }
  return true;
}

}  // namespace

int merge_dims(const Shape& shape, std::span<const Strides> strides, std::int64_t* sizes,
               std::int64_t* merged, std::size_t row, std::size_t max_dims) {
  const std::size_t count = strides.size();
  int rank = 0;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    if (rank > 0) {
      bool mergeable = true;
      for (std::size_t k = 0; k < count; ++k) {
        if (merged[k * row + rank - 1] != strides[k][d] * shape[d]) mergeable = false;
      }
      if (mergeable) {
        sizes[rank - 1] *= shape[d];
        for (std::size_t k = 0; k < count; ++k) merged[k * row + rank - 1] = strides[k][d];
        continue;
      }
    }
    if (rank == static_cast<int>(max_dims)) return -1;
    sizes[rank] = shape[d];
    for (std::size_t k = 0; k < count; ++k) merged[k * row + rank] = strides[k][d];
    ++rank;
  }
  return rank;
}

void launch_elementwise(Runtime& runtime, const ElementwiseOp& op, const CudaTensor& out,
                        std::span<const CudaTensor* const> inputs,
                        std::span<const std::uint64_t> scalar_bits) {
  if (KernelCapture* capture = KernelCapture::active()) {
    capture->record(op, out, inputs, scalar_bits);
    return;
  }
  const Shape& shape = out.shape();
  const std::int64_t n = shape.num_elements();
  if (n == 0) return;
  if (inputs.size() + 1 > kMaxOperands || inputs.size() != op.inputs.size() ||
      scalar_bits.size() > kMaxScalars) {
    detail::fail<InvalidArgument>(op.name, "an elementwise kernel takes at most ", kMaxOperands - 1,
                                  " inputs and ", kMaxScalars,
                                  " scalars, one per declared dtype; got ", inputs.size(),
                                  " inputs and ", scalar_bits.size(), " scalars");
  }
  // The module of one kernel layout, compiled on its first launch.
  auto function = [&](KernelLayout layout, const char* name) {
    const ModuleKey key(op, layout);
    return runtime.compiler.function(key.view(), name,
                                     [&] { return elementwise_source(op, layout); });
  };
  const std::uint64_t error_word = runtime.context.error_word();
  const std::uint32_t error_token =
      op.failure != nullptr ? runtime.context.error_token(op.name, op.failure) : 0;
  const unsigned blocks = runtime.blocks_for(n, kThreads);
  const std::size_t count = inputs.size() + 1;

  bool flat = out.is_contiguous();
  for (std::size_t k = 0; k < inputs.size() && flat; ++k) {
    flat = inputs[k]->is_contiguous() && inputs[k]->shape() == shape;
  }
  Params params;
  if (!flat) {
    std::memset(&params, 0, sizeof params);
    params.n = n;
    std::array<Strides, kMaxOperands> strides;
    strides[0] = out.strides();
    for (std::size_t k = 0; k < inputs.size(); ++k)
      strides[k + 1] = broadcast_strides(*inputs[k], shape);
    params.rank = merge_dims(shape, std::span<const Strides>(strides.data(), count), params.sizes,
                             &params.strides[0][0], kMaxDims, kMaxDims);
    if (params.rank < 0) {
      detail::fail<InvalidArgument>(
          "cuda", "a view of shape ", shape.to_string(), " has more than ", kMaxDims,
          " dims that cannot be merged; at most ", kMaxDims, " are supported on cuda");
    }
    // Views that merge into one contiguous run (size-1 dims, broadcast rank) are flat too.
    flat = params.rank <= 1;
    for (std::size_t k = 0; k < count && params.rank == 1; ++k) {
      if (params.strides[k][0] != 1) flat = false;
    }
  }
  if (flat) {
    FlatParams p;
    p.n = n;
    p.pointers[0] = out.data();
    for (std::size_t k = 0; k < inputs.size(); ++k) p.pointers[k + 1] = inputs[k]->data();
    for (std::size_t k = count; k < kMaxOperands; ++k) p.pointers[k] = 0;
    for (std::size_t k = 0; k < kMaxScalars; ++k)
      p.scalars[k] = k < scalar_bits.size() ? scalar_bits[k] : 0;
    p.error_word = error_word;
    p.error_token = error_token;
    p.reverse = 0;
    // Every pointer on a whole vector: the wide-load kernel over n / width vectors.
    const std::int64_t width = vector_width(op);
    bool aligned = op.gathered_input < 0 && n >= width;
    for (std::size_t k = 0; k < count && aligned; ++k) {
      const DType d = k == 0 ? op.output : op.inputs[k - 1];
      const std::uint64_t bytes =
          std::min<std::uint64_t>(16, static_cast<std::uint64_t>(width) * dtype_size(d));
      aligned = p.pointers[k] % bytes == 0;
    }
    if (aligned) {
      const VectorShape& vector = vector_shape();
      const std::int64_t per_block = std::int64_t(vector.threads) * vector.unroll;
      std::int64_t wanted = (n / width + per_block - 1) / per_block;
      if (vector.blocks_per_sm > 0) {
        wanted = std::min(wanted, std::int64_t(runtime.context.sm_count()) * vector.blocks_per_sm);
      }
      const auto vector_blocks =
          static_cast<unsigned>(std::clamp<std::int64_t>(wanted, 1, std::int64_t{1} << 30));
      CUfunction wide = function(KernelLayout::Wide, "kiln_elementwise_vec");
      p.reverse = next_direction();
      runtime.launch(op.name, wide, vector_blocks, vector.threads, p, 0, nullptr,
                     LaunchOrder::Overlapping);
      return;
    }
    runtime.launch(op.name, function(KernelLayout::Flat, "kiln_elementwise_flat"), blocks, kThreads,
                   p, 0, nullptr, LaunchOrder::Overlapping);
    return;
  }
  params.pointers[0] = out.data();
  for (std::size_t k = 0; k < inputs.size(); ++k) params.pointers[k + 1] = inputs[k]->data();
  for (std::size_t k = count; k < kMaxOperands; ++k) params.pointers[k] = 0;
  for (std::size_t k = 0; k < kMaxScalars; ++k)
    params.scalars[k] = k < scalar_bits.size() ? scalar_bits[k] : 0;
  params.error_word = error_word;
  params.error_token = error_token;
  if (strided_vectors_fit(op, params, count)) {
    const std::int64_t vectors = n / vector_width(op);
    runtime.launch(op.name, function(KernelLayout::StridedWide, "kiln_elementwise_strided_vec"),
                   runtime.blocks_for(vectors, kThreads), kThreads, params, 0, nullptr,
                   LaunchOrder::Overlapping);
    return;
  }
  runtime.launch(op.name, function(KernelLayout::Strided, "kiln_elementwise"), blocks, kThreads,
                 params, 0, nullptr, LaunchOrder::Overlapping);
}

}  // namespace kiln::cuda
