// attention (a DEFAULT op) as one flash-attention kernel (attention.h) for bf16 and f16 inputs
// whose head dims are equal multiples of 16 up to 128 (for f32 ones whose head dims are multiples
// of 4 up to 64, a kernel on the float units: attention_simt.h), and its gradients
// (attention_query_backward, attention_key_value_backward) as two more after each query row's
// statistics: L as the forward pass kept it with its output, D from the output and its gradient, or
// both recomputed where the output is not the forward's own (or q, k, the mask or bias are not the
// forward's); other dtypes and shapes run the default's composition (scores, softmax, product).
#include <cmath>
#include <memory>
#include <optional>

#include "backends/cuda/attention.h"
#include "backends/cuda/check.h"
#include "backends/cuda/elementwise_ops.h"
#include "backends/cuda/grid_math.h"
#include "backends/cuda/kernel_source.h"
#include "contract/attention_dropout.h"
#include "contract/defaults/compose.h"

namespace kiln::cuda {

namespace {

// An operand as L depends on it: its storage (compared as owners, so that a storage freed and
// another made at its address differ), its address, shape and strides. Values written into the
// same storage between the passes (Tensor::assign) are not seen, as autodiff's saved inputs.
struct OperandIdentity {
  std::weak_ptr<Storage> storage;
  CUdeviceptr address = 0;
  Shape shape;
  Strides strides;

  explicit OperandIdentity(const CudaTensor& t)
      : storage(t.storage()), address(t.data()), shape(t.shape()), strides(t.strides()) {}
  bool operator==(const OperandIdentity& o) const {
    return !storage.owner_before(o.storage) && !o.storage.owner_before(storage) &&
           address == o.address && shape == o.shape && strides == o.strides;
  }
};

std::optional<OperandIdentity> identity_of(const OptionalPrimitive& t) {
  if (!t) return std::nullopt;
  return OperandIdentity(as_cuda(*t));
}

}  // namespace

// What the forward pass keeps with its output (CudaTensor::attention_saved): the statistics
// with each query row's L written (D is the backward pass's to fill), and what L depends on.
// On Hopper attention_key_value_backward computes dq too (kiln_attention_wg_dqkv) and leaves it
// here for attention_query_backward of the same output gradient and v, which autodiff calls next.
struct AttentionSaved {
  TensorPtr stats;
  OperandIdentity q, k;
  std::optional<OperandIdentity> mask, bias;
  float scale;
  int causal;
  struct QueryGrad {
    OperandIdentity output_grad, v;
    Primitive dq;
  };
  std::optional<QueryGrad> query_grad;
};

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

// The shape of attention's output: the broadcast batch and head dims of q, k and v, q's rows, v's
// head dim.
Shape output_shape(const Primitive& q, const Primitive& k, const Primitive& v) {
  return Shape{std::max({q->shape()[0], k->shape()[0], v->shape()[0]}),
               std::max({q->shape()[1], k->shape()[1], v->shape()[1]}), q->shape()[2],
               v->shape()[3]};
}

// What the kernels share for one attention: its operands made readable and the parameters that
// describe them, and the key of its kernels' sources.
struct AttentionCall {
  Primitive q, k, v;
  OptionalPrimitive mask, bias, dropout_seed;
  AttentionParams p{};
  DType dtype;
  std::int64_t depth;
  // q, k, the mask and the bias as given, before any copy made them readable.
  OperandIdentity q_identity, k_identity;
  std::optional<OperandIdentity> mask_identity, bias_identity;
  std::string key;
  // The kernels: on Hopper's warpgroup products where they apply.
  AttentionKernel forward = AttentionKernel::Forward, statistics = AttentionKernel::Stats,
                  query_grad = AttentionKernel::Query, key_value_grad = AttentionKernel::KeyValue;

  // Whether the kernels take it: bf16/f16, equal head dims a multiple of 16 up to 128, rows on
  // both sides, and grids the launch takes.
  static bool applies(const Primitive& query, const Primitive& key, const Primitive& value) {
    const Shape out = output_shape(query, key, value);
    const std::int64_t rows = std::max(query->shape()[2], key->shape()[2]);
    return attention_kernel_applies(query->dtype(), query->shape()[3]) &&
           value->shape()[3] == query->shape()[3] && query->shape()[2] > 0 && key->shape()[2] > 0 &&
           out[0] * out[1] * ceil_div(rows, kAttentionKeys) <= 0x7fffffff;
  }

  // Whether the f32 kernel takes it (attention_simt.h): f32, equal head dims a multiple of 4 up
  // to 64, rows on both sides, and a grid the launch takes.
  static bool applies_simt(const Primitive& query, const Primitive& key, const Primitive& value) {
    const Shape out = output_shape(query, key, value);
    return attention_simt_applies(query->dtype(), query->shape()[3]) &&
           value->shape()[3] == query->shape()[3] && query->shape()[2] > 0 && key->shape()[2] > 0 &&
           out[0] * out[1] *
                   ceil_div(query->shape()[2], attention_simt_kernel(query->shape()[3]).rows) <=
               0x7fffffff;
  }

  // Whether the backward kernels take it: as applies(), with the forward's output and its
  // gradient of the inputs' dtype and of the output's shape.
  static bool applies_backward(const Primitive& query, const Primitive& key, const Primitive& value,
                               const Primitive& output, const Primitive& output_grad) {
    const Shape out = output_shape(query, key, value);
    return applies(query, key, value) && output->dtype() == query->dtype() &&
           output_grad->dtype() == query->dtype() && output->shape() == out &&
           output_grad->shape() == out;
  }

  AttentionCall(CudaBackend& backend, Primitive query, Primitive key_, Primitive value,
                OptionalPrimitive mask_, OptionalPrimitive bias_, OptionalPrimitive seed,
                const AttentionOptions& options, const char* op)
      : q(std::move(query)),
        k(std::move(key_)),
        v(std::move(value)),
        mask(std::move(mask_)),
        bias(std::move(bias_)),
        dropout_seed(std::move(seed)),
        dtype(q->dtype()),
        depth(q->shape()[3]),
        q_identity(as_cuda(q)),
        k_identity(as_cuda(k)),
        mask_identity(identity_of(mask)),
        bias_identity(identity_of(bias)) {
    auto readable = [&](Primitive& x) {
      if (!rows_aligned(as_cuda(x))) x = backend.contiguous(x, op);
    };
    readable(q);
    readable(k);
    readable(v);
    const Shape out = output_shape(q, k, v);
    p.batch = out[0];
    p.heads = out[1];
    p.queries = q->shape()[2];
    p.keys = k->shape()[2];
    p.q = as_cuda(q).data();
    p.k = as_cuda(k).data();
    p.v = as_cuda(v).data();
    broadcast_strides(as_cuda(q), p.q_strides);
    broadcast_strides(as_cuda(k), p.k_strides);
    broadcast_strides(as_cuda(v), p.v_strides);
    if (mask) {
      p.mask = as_cuda(*mask).data();
      broadcast_strides(as_cuda(*mask), p.mask_strides);
    }
    if (bias) {
      p.bias = as_cuda(*bias).data();
      broadcast_strides(as_cuda(*bias), p.bias_strides);
    }
    const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(depth)));
    p.scale = static_cast<float>(scale);
    p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
    p.causal = options.is_causal ? 1 : 0;
    key = std::string(short_name(dtype)) + ":" + std::to_string(depth) + (mask ? ":mask" : "") +
          (bias ? ":bias" : "");
    if (dropout_seed) {
      const AttentionDropout dropout(options.dropout);
      p.dropout_seed = as_cuda(*dropout_seed).data();
      p.dropout_threshold = dropout.threshold;
      p.dropout_scale = dropout.scale;
    }
    const Context& context = backend.runtime().context;
    if (attention_hopper_applies(context.major(), context.minor(), depth)) {
      // The pipelined forward pass has no dropout.
      forward = attention_hopper_pipelined() && !dropout_seed ? AttentionKernel::HopperPipelined
                                                              : AttentionKernel::HopperForward;
      statistics = AttentionKernel::HopperStats;
      query_grad = AttentionKernel::HopperQuery;
      key_value_grad = AttentionKernel::HopperKeyValue;
    }
  }

  std::int64_t heads_total() const { return p.batch * p.heads; }

  // Runs `kernel` over `blocks` blocks of every (batch, head).
  void launch(Runtime& runtime, AttentionKernel kernel, std::int64_t blocks, const char* op) {
    const char* name = attention_kernel_name(kernel);
    const bool dropout = dropout_seed.has_value() && attention_kernel_drops(kernel);
    const std::string source_key = std::string(name) + ":" + key + (dropout ? ":dropout" : "");
    CUfunction function = runtime.compiler.function(source_key, name, [&] {
      return attention_kernel_source(kernel, dtype, depth, mask.has_value(), bias.has_value(),
                                     dropout);
    });
    const unsigned shared = attention_shared_bytes(kernel, depth);
    Runtime::allow_shared(function, shared, op);
    runtime.launch(op, function, static_cast<unsigned>(heads_total() * blocks),
                   static_cast<unsigned>(attention_kernel_threads(kernel)), p, shared);
  }

  // The statistics workspace of every query row ({L, D}: ka_store_stats), for the forward pass
  // to write L into and the backward kernels to read.
  TensorPtr make_stats(CudaBackend& backend, const char* op) {
    TensorPtr stats = backend.make_tensor(
        DType::F32, Shape{attention_kernels::ka_stats_floats(heads_total() * p.queries)}, op);
    p.stats = stats->data();
    return stats;
  }

  // The forward pass's record for its output: the statistics its kernel wrote L into.
  std::shared_ptr<AttentionSaved> saved(TensorPtr stats) const {
    return std::make_shared<AttentionSaved>(AttentionSaved{std::move(stats), q_identity, k_identity,
                                                           mask_identity, bias_identity, p.scale,
                                                           p.causal, std::nullopt});
  }

  // The forward pass's record on output if it was made from this call's q, k, mask, bias and
  // options; null otherwise.
  AttentionSaved* saved_by_forward(const Primitive& output) const {
    AttentionSaved* s = as_cuda(output).attention_saved().get();
    if (s == nullptr || !(s->q == q_identity) || !(s->k == k_identity) ||
        s->mask != mask_identity || s->bias != bias_identity || s->scale != p.scale ||
        s->causal != p.causal) {
      return nullptr;
    }
    return s;
  }

  // The backward pass's statistics of every query row (ka_store_stats) for the forward's output
  // and its gradient, both made contiguous: the workspace the backward kernels read. L as the
  // forward pass kept it with output where it did (D written into the same workspace, which
  // only the backward ops of this output use, one after the other on the stream), recomputed
  // otherwise.
  TensorPtr stats(CudaBackend& backend, const AttentionSaved* kept, Primitive& output,
                  Primitive& output_grad, const char* op) {
    output = backend.contiguous(output, op);
    output_grad = backend.contiguous(output_grad, op);
    p.out = as_cuda(output).data();
    p.grad = as_cuda(output_grad).data();
    if (kept != nullptr) {
      p.stats = kept->stats->data();
      p.query_blocks = ceil_div(p.queries, attention_kernel_rows(AttentionKernel::Delta));
      launch(backend.runtime(), AttentionKernel::Delta, p.query_blocks, op);
      return kept->stats;
    }
    TensorPtr stats = make_stats(backend, op);
    p.query_blocks = ceil_div(p.queries, attention_kernel_rows(statistics));
    launch(backend.runtime(), statistics, p.query_blocks, op);
    return stats;
  }

  // A gradient the kernels wrote as f32 [B, H, rows, depth], summed over the dims its operand
  // broadcasts and cast to the input type.
  Primitive gradient(CudaBackend& backend, TensorPtr full, const Shape& shape) {
    Primitive g = defaults::reduce_to(backend, std::move(full), shape);
    return backend.cast(std::move(g), dtype);
  }
};

}  // namespace

Primitive CudaBackend::attention(Primitive query, Primitive key, Primitive value,
                                 OptionalPrimitive mask, OptionalPrimitive bias,
                                 OptionalPrimitive dropout_seed, AttentionOptions options) {
  const char* op = "attention";
  const bool simt = AttentionCall::applies_simt(query, key, value);
  if (!simt && !AttentionCall::applies(query, key, value)) {
    return Backend::attention(std::move(query), std::move(key), std::move(value), std::move(mask),
                              std::move(bias), std::move(dropout_seed), options);
  }
  // The tensor layer has checked the shapes and promoted q, k, v and the bias to one dtype.
  AttentionCall call(*this, std::move(query), std::move(key), std::move(value), std::move(mask),
                     std::move(bias), std::move(dropout_seed), options, op);
  if (simt) {
    // Written as [B, Sq, H, D] and returned as its [B, H, Sq, D] view: merging the heads back
    // ([B, Sq, H * D]) is then a view too. The backward ops take f32 through the default's
    // composition, which needs nothing kept.
    const std::int64_t batch = call.p.batch, heads = call.p.heads, rows = call.p.queries;
    const std::int64_t depth = call.depth;
    TensorPtr memory = make_tensor(DType::F32, Shape{batch, rows, heads, depth}, op);
    call.p.out = memory->data();
    const SimtKernel kernel = attention_simt_kernel(depth);
    call.p.query_blocks = ceil_div(rows, kernel.rows);
    const bool has_mask = call.mask.has_value(), has_bias = call.bias.has_value();
    const bool dropout = call.dropout_seed.has_value();
    std::string source_key = kAttentionSimtName;
    source_key += ':';
    source_key += call.key;
    source_key += kernel.tiled ? ":tiled" : ":keys" + std::to_string(kernel.keys);
    if (dropout) source_key += ":dropout";
    CUfunction function = runtime_.compiler.function(source_key, kAttentionSimtName, [&] {
      return attention_simt_source(kernel, depth, has_mask, has_bias, dropout);
    });
    Runtime::allow_shared(function, kernel.shared_bytes, op);
    runtime_.launch(op, function, static_cast<unsigned>(call.heads_total() * call.p.query_blocks),
                    static_cast<unsigned>(kernel.threads), call.p, kernel.shared_bytes);
    return make_view(*memory, Shape{batch, heads, rows, depth},
                     Strides{rows * heads * depth, depth, heads * depth, 1}, 0);
  }
  TensorPtr out =
      make_tensor(call.dtype, Shape{call.p.batch, call.p.heads, call.p.queries, call.depth}, op);
  call.p.out = out->data();
  // Each row's L beside the output (8 bytes a row where the output has 2 x depth): the backward
  // pass's statistics then need no scores.
  TensorPtr stats = call.make_stats(*this, op);
  call.p.query_blocks = ceil_div(call.p.queries, attention_kernel_rows(call.forward));
  call.launch(runtime_, call.forward, call.p.query_blocks, op);
  out->keep_attention_saved(call.saved(std::move(stats)));
  return out;
}

Primitive CudaBackend::attention_query_backward(Primitive query, Primitive key, Primitive value,
                                                Primitive output, Primitive output_grad,
                                                OptionalPrimitive mask, OptionalPrimitive bias,
                                                OptionalPrimitive dropout_seed,
                                                AttentionOptions options) {
  const char* op = "attention_query_backward";
  if (!AttentionCall::applies_backward(query, key, value, output, output_grad)) {
    return Backend::attention_query_backward(
        std::move(query), std::move(key), std::move(value), std::move(output),
        std::move(output_grad), std::move(mask), std::move(bias), std::move(dropout_seed), options);
  }
  const Shape shape = query->shape();
  const OperandIdentity grad_identity(as_cuda(output_grad)), v_identity(as_cuda(value));
  AttentionCall call(*this, std::move(query), std::move(key), std::move(value), std::move(mask),
                     std::move(bias), std::move(dropout_seed), options, op);
  AttentionSaved* kept = call.saved_by_forward(output);
  // dq as attention_key_value_backward left it for this output gradient and v.
  if (kept != nullptr && kept->query_grad && kept->query_grad->output_grad == grad_identity &&
      kept->query_grad->v == v_identity) {
    Primitive dq = std::move(kept->query_grad->dq);
    kept->query_grad.reset();
    return dq;
  }
  const TensorPtr stats = call.stats(*this, kept, output, output_grad, op);
  TensorPtr dq =
      make_tensor(DType::F32, Shape{call.p.batch, call.p.heads, call.p.queries, call.depth}, op);
  call.p.dq = dq->data();
  call.p.query_blocks = ceil_div(call.p.queries, attention_kernel_rows(call.query_grad));
  call.launch(runtime_, call.query_grad, call.p.query_blocks, op);
  return call.gradient(*this, std::move(dq), shape);
}

PrimitivePair CudaBackend::attention_key_value_backward(
    Primitive query, Primitive key, Primitive value, Primitive output, Primitive output_grad,
    OptionalPrimitive mask, OptionalPrimitive bias, OptionalPrimitive dropout_seed,
    AttentionOptions options) {
  const char* op = "attention_key_value_backward";
  if (!AttentionCall::applies_backward(query, key, value, output, output_grad)) {
    return Backend::attention_key_value_backward(
        std::move(query), std::move(key), std::move(value), std::move(output),
        std::move(output_grad), std::move(mask), std::move(bias), std::move(dropout_seed), options);
  }
  const Shape q_shape = query->shape(), k_shape = key->shape(), v_shape = value->shape();
  const OperandIdentity grad_identity(as_cuda(output_grad)), v_identity(as_cuda(value));
  AttentionCall call(*this, std::move(query), std::move(key), std::move(value), std::move(mask),
                     std::move(bias), std::move(dropout_seed), options, op);
  AttentionSaved* kept = call.saved_by_forward(output);
  const TensorPtr stats = call.stats(*this, kept, output, output_grad, op);
  const Shape full{call.p.batch, call.p.heads, call.p.keys, call.depth};
  TensorPtr dk = make_tensor(DType::F32, full, op);
  TensorPtr dv = make_tensor(DType::F32, full, op);
  call.p.dk = dk->data();
  call.p.dv = dv->data();
  // On Hopper, where the forward's record can carry it to attention_query_backward, dq too: the
  // dk/dv kernel has dS of every pair of rows already, so dq costs one product a tile there
  // instead of a kernel that recomputes S and dP.
  AttentionKernel kernel = call.key_value_grad;
  TensorPtr dq;
  if (kept != nullptr && kernel == AttentionKernel::HopperKeyValue && attention_query_merged()) {
    kernel = AttentionKernel::HopperQueryKeyValue;
    dq = make_tensor(DType::F32, Shape{call.p.batch, call.p.heads, call.p.queries, call.depth}, op);
    KILN_CUDA_CHECK(
        op, cuMemsetD32Async(dq->data(), 0, static_cast<std::size_t>(dq->shape().num_elements()),
                             runtime_.context.stream()));
    call.p.dq = dq->data();
  }
  call.launch(runtime_, kernel, ceil_div(call.p.keys, attention_kernel_rows(kernel)), op);
  if (dq) {
    kept->query_grad = AttentionSaved::QueryGrad{grad_identity, v_identity,
                                                 call.gradient(*this, std::move(dq), q_shape)};
  }
  return {call.gradient(*this, std::move(dk), k_shape),
          call.gradient(*this, std::move(dv), v_shape)};
}

}  // namespace kiln::cuda
