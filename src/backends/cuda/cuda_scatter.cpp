// scatter as a generated kernel family (scatter.h): the output starts as a contiguous copy of x
// (x itself when nobody else can see it), then the line path or the atomic path runs.
#include "backends/cuda/check.h"
#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/scatter.h"
#include "core/indexing_update_name.h"

namespace kiln::cuda {

namespace {

// Enough lines for the line path to fill the GPU (a thread per line).
bool prefer_lines(std::int64_t lines, std::int64_t line, std::int64_t sms) {
  return line <= 4 || lines >= 256 * sms;
}

}  // namespace

Primitive CudaBackend::scatter(std::int64_t dim, Primitive x, Primitive indices, Primitive values,
                               IndexingUpdate update) {
  const char* op = "scatter";
  if (!is_int(indices->dtype())) {
    detail::fail<UnsupportedDType>(op, "indices must have an integer dtype, got ",
                                   dtype_name(indices->dtype()));
  }
  const DType dtype = x->dtype();
  if (update != IndexingUpdate::Assign) check_accepts(dtype, Accepts::Any, op);
  TensorPtr out;
  if (can_mut(x) && as_cuda(x).is_contiguous()) {
    out = std::static_pointer_cast<CudaTensor>(x);
  } else {
    out = make_tensor(dtype, x->shape(), op);
    copy_into(*out, as_cuda(x), op);
  }
  x.reset();
  const CudaTensor& idx = as_cuda(indices);
  const CudaTensor& val = as_cuda(values);
  const Shape& shape = idx.shape();
  const std::int64_t n = shape.num_elements();
  if (n == 0) return out;
  if (shape.rank() > static_cast<std::size_t>(kScatterMaxRank)) {
    detail::fail<InvalidArgument>(op, "at most ", kScatterMaxRank, " dims are supported on cuda");
  }
  const std::size_t d = static_cast<std::size_t>(dim);
  ScatterParams p{};
  p.line = shape[d];
  p.dim_size = out->shape()[d];
  p.out_step = out->strides()[d];
  p.index_step = idx.strides()[d];
  p.value_step = val.strides()[d];
  p.rank = static_cast<std::int32_t>(shape.rank());
  p.dim = static_cast<std::int32_t>(dim);
  for (std::size_t k = 0; k < shape.rank(); ++k) {
    p.sizes[k] = shape[k];
    p.out_strides[k] = k == d ? 0 : out->strides()[k];
    p.index_strides[k] = idx.strides()[k];
    p.value_strides[k] = val.strides()[k];
  }
  p.out = out->data();
  p.index = idx.data();
  p.values = val.data();
  p.error_word = runtime_.context.error_word();
  p.error_token = runtime_.context.error_token(op, "index out of range");
  // Assign moves raw bits: one module per element width.
  const DType kernel_dtype = update == IndexingUpdate::Assign ? raw_dtype(dtype) : dtype;
  const std::string key = std::string("scatter:") + indexing_update_name(update) + ":" +
                          short_name(kernel_dtype) + ":" + short_name(idx.dtype());
  auto source = [&] { return scatter_source(kernel_dtype, idx.dtype(), update); };
  const std::int64_t lines = n / p.line;
  if (prefer_lines(lines, p.line, runtime_.context.sm_count())) {
    p.n = lines;
    CUfunction f = runtime_.compiler.function(key, "kiln_scatter_lines", source);
    runtime_.launch(op, f, runtime_.blocks_for(lines, 256), 256, p);
    return out;
  }
  p.n = n;
  const unsigned blocks = runtime_.blocks_for(n, 256);
  if (update != IndexingUpdate::Assign) {
    CUfunction f = runtime_.compiler.function(key, "kiln_scatter_atomic", source);
    runtime_.launch(op, f, blocks, 256, p);
    return out;
  }
  // One scratch word per output element, zeroed: the winning position along dim plus one.
  const std::int64_t elements = out->shape().num_elements();
  TensorPtr winner = make_tensor(DType::U64, Shape{elements}, op);
  runtime_.context.make_current();
  KILN_CUDA_CHECK(op, cuMemsetD32Async(winner->data(), 0, static_cast<std::size_t>(elements) * 2,
                                       runtime_.context.stream()));
  runtime_.context.note_launch(op);
  p.winner = winner->data();
  CUfunction claim = runtime_.compiler.function(key, "kiln_scatter_claim", source);
  runtime_.launch(op, claim, blocks, 256, p);
  CUfunction assign = runtime_.compiler.function(key, "kiln_scatter_assign", source);
  runtime_.launch(op, assign, blocks, 256, p);
  return out;  // winner goes back to the allocator's stream-ordered cache after the launches
}

}  // namespace kiln::cuda
