// attention (a DEFAULT op) as one flash-attention kernel (attention.h) for bf16 and f16 inputs
// whose head dims are equal multiples of 16 up to 128; other dtypes and shapes run the default's
// composition (scores, softmax, product). Its gradient stays autodiff's rule, which recomputes
// the weights a block of query rows at a time.
#include <cmath>

#include "backends/cuda/attention.h"
#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/kernel_source.h"

namespace kiln::cuda {

namespace {

// An operand whose rows the kernel reads with 16-byte copies: the last dim contiguous, the row,
// head and batch strides and the address multiples of 16 bytes.
bool rows_aligned(const CudaTensor& t) {
  const Strides& s = t.strides();
  if (t.shape()[3] != 1 && s[3] != 1) return false;
  for (std::size_t d = 0; d < 3; ++d) {
    if (t.shape()[d] != 1 && s[d] % 8 != 0) return false;
  }
  return t.data() % 16 == 0;
}

// The strides of t's first `dims` dims, 0 along a broadcast dim: (batch, head, row) of q, k and
// v, (batch, head, query, key) of a mask or bias.
template <std::size_t dims>
void broadcast_strides(const CudaTensor& t, long long (&out)[dims]) {
  for (std::size_t d = 0; d < dims; ++d) out[d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
}

}  // namespace

Primitive CudaBackend::attention(Primitive query, Primitive key, Primitive value,
                                 OptionalPrimitive mask, OptionalPrimitive bias,
                                 AttentionOptions options) {
  const char* op = "attention";
  const DType dtype = query->dtype();
  const std::int64_t depth = query->shape()[3];
  // The tensor layer has checked the shapes and promoted q, k, v and the bias to one dtype.
  const std::int64_t batch = std::max({query->shape()[0], key->shape()[0], value->shape()[0]});
  const std::int64_t heads = std::max({query->shape()[1], key->shape()[1], value->shape()[1]});
  const std::int64_t blocks =
      batch * heads * ((query->shape()[2] + kAttentionRows - 1) / kAttentionRows);
  const bool kernel = attention_kernel_applies(dtype, depth) && value->shape()[3] == depth &&
                      query->shape()[2] > 0 && key->shape()[2] > 0 && blocks > 0 &&
                      blocks <= 0x7fffffff;
  if (!kernel) {
    return Backend::attention(std::move(query), std::move(key), std::move(value), std::move(mask),
                              std::move(bias), options);
  }
  auto readable = [&](Primitive& x) {
    if (!rows_aligned(as_cuda(x))) x = contiguous(x, op);
  };
  readable(query);
  readable(key);
  readable(value);
  const CudaTensor& q = as_cuda(query);
  const CudaTensor& k = as_cuda(key);
  const CudaTensor& v = as_cuda(value);
  AttentionParams p{};
  p.batch = batch;
  p.heads = heads;
  p.queries = q.shape()[2];
  p.keys = k.shape()[2];
  p.query_blocks = (p.queries + kAttentionRows - 1) / kAttentionRows;
  TensorPtr out = make_tensor(dtype, Shape{p.batch, p.heads, p.queries, depth}, op);
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.out = out->data();
  broadcast_strides(q, p.q_strides);
  broadcast_strides(k, p.k_strides);
  broadcast_strides(v, p.v_strides);
  if (mask) {
    p.mask = as_cuda(*mask).data();
    broadcast_strides(as_cuda(*mask), p.mask_strides);
  }
  if (bias) {
    p.bias = as_cuda(*bias).data();
    broadcast_strides(as_cuda(*bias), p.bias_strides);
  }
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(depth)));
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  p.causal = options.is_causal ? 1 : 0;
  const std::string key_text = std::string("attention:") + short_name(dtype) + ":" +
                               std::to_string(depth) + (mask ? ":mask" : "") +
                               (bias ? ":bias" : "");
  CUfunction function = runtime_.compiler.function(key_text, "kiln_attention", [&] {
    return attention_kernel_source(dtype, depth, mask.has_value(), bias.has_value());
  });
  const unsigned shared = attention_shared_bytes(depth);
  Runtime::allow_shared(function, shared, op);
  runtime_.launch(op, function, static_cast<unsigned>(blocks), kAttentionThreads, p, shared);
  return out;
}

}  // namespace kiln::cuda
