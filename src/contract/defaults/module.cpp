// Defaults of module ops: pooling, embeddings, im2col/col2im by strided slices (exact for every
// value, NaN and inf included), linear, normalisations and scaled dot-product attention.
#include <cmath>

#include "contract/defaults/attention_grads.h"
#include "contract/defaults/compose.h"

namespace kiln {

using namespace defaults;

namespace {

std::int64_t option(const std::vector<std::int64_t>& values, std::size_t i, std::int64_t fallback) {
  return i < values.size() ? values[i] : fallback;
}

// The geometry of 2-D patches: kernel, stride, padding, dilation per spatial dim.
struct Patches {
  std::int64_t kernel[2], stride[2], padding[2], dilation[2];
  explicit Patches(const UnfoldOptions& o) {
    for (std::size_t i = 0; i < 2; ++i) {
      kernel[i] = option(o.kernel_size, i, 1);
      stride[i] = option(o.stride, i, 1);
      padding[i] = option(o.padding, i, 0);
      dilation[i] = option(o.dilation, i, 1);
    }
  }
  // Windows along spatial dim i of an input of size `size`.
  std::int64_t windows(std::size_t i, std::int64_t size) const {
    const std::int64_t span = size + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1;
    return span < 0 ? 0 : span / stride[i] + 1;
  }
  // The slices of the padded input that kernel offset (ki, kj) reads over all windows.
  ResolvedSlices region(const Shape& padded, std::int64_t ki, std::int64_t kj, std::int64_t rows,
                        std::int64_t columns) const {
    ResolvedSlices s = full_slices(padded);
    s[2] = {rows > 0 ? ki * dilation[0] : 0, rows, stride[0]};
    s[3] = {columns > 0 ? kj * dilation[1] : 0, columns, stride[1]};
    return s;
  }
};

// A shape [1, .., 1, n, 1, ..] of rank `rank` with n at dim.
Shape along(std::size_t rank, std::size_t dim, std::int64_t n) {
  Shape s = ones_shape(rank);
  s[dim] = n;
  return s;
}

}  // namespace

Primitive Backend::max_pool(Primitive x, PoolOptions options) {
  return max_pool_with_indices(std::move(x), std::move(options), DType::I64).first;
}

Primitive Backend::embedding(Primitive weights, Primitive indices) {
  // weights [V, E], indices [...] -> [..., E]
  const Shape index_shape = indices->shape();
  const std::int64_t width = weights->shape()[1];
  const std::int64_t n = index_shape.num_elements();
  Primitive rows = select(std::move(weights), 0, reshape(std::move(indices), Shape{n}));
  detail::DimVector dims(index_shape.vector());
  dims.push_back(width);
  return reshape(std::move(rows), Shape(std::move(dims)));
}

Primitive Backend::embedding_backward(Primitive weights, Primitive output_grad, Primitive indices) {
  // Each output row's gradient is added to the weight row it was read from.
  const Shape weight_shape = weights->shape();
  const std::int64_t n = indices->shape().num_elements();
  Primitive grad = zeros(weight_shape, output_grad->dtype(), output_grad->device());
  Primitive rows = reshape(std::move(output_grad), Shape{n, weight_shape[1]});
  return select_assign(std::move(grad), 0, reshape(std::move(indices), Shape{n}), std::move(rows),
                       IndexingUpdate::Add);
}

Primitive Backend::unfold_patches(Primitive x, UnfoldOptions options) {
  // [N, C, H, W] -> [N, C * kh * kw, L]: channel c * kh * kw + ki * kw + kj of window l is
  // the padded input at (ki * dilation + row(l) * stride, kj * dilation + column(l) * stride).
  const Patches p(options);
  const Shape shape = x->shape();
  const std::int64_t n = shape[0], c = shape[1];
  const std::int64_t rows = p.windows(0, shape[2]), columns = p.windows(1, shape[3]);
  const Shape padded_shape{n, c, shape[2] + 2 * p.padding[0], shape[3] + 2 * p.padding[1]};
  Primitive padded = std::move(x);
  if (p.padding[0] != 0 || p.padding[1] != 0) {
    ResolvedSlices inner = full_slices(padded_shape);
    inner[2] = {p.padding[0], shape[2], 1};
    inner[3] = {p.padding[1], shape[3], 1};
    Primitive frame = zeros(padded_shape, padded->dtype(), padded->device());
    padded = slice_assign(std::move(frame), std::move(inner), std::move(padded));
  }
  PrimitiveList pieces;
  for (std::int64_t ki = 0; ki < p.kernel[0]; ++ki) {
    for (std::int64_t kj = 0; kj < p.kernel[1]; ++kj) {
      Primitive piece = slice(padded, p.region(padded_shape, ki, kj, rows, columns));
      pieces.push_back(reshape(std::move(piece), Shape{n, c, 1, rows * columns}));
    }
  }
  Primitive stacked = cat(std::move(pieces), 2);
  return reshape(std::move(stacked), Shape{n, c * p.kernel[0] * p.kernel[1], rows * columns});
}

Primitive Backend::fold_patches(Primitive x, Axes output_size, UnfoldOptions options) {
  // The adjoint of unfold_patches: every patch value is added back where it was read from.
  const Patches p(options);
  const std::int64_t n = x->shape()[0];
  const std::int64_t taps = p.kernel[0] * p.kernel[1];
  const std::int64_t c = x->shape()[1] / taps;
  const std::int64_t height = output_size[0], width = output_size[1];
  const std::int64_t rows = p.windows(0, height), columns = p.windows(1, width);
  const Shape padded_shape{n, c, height + 2 * p.padding[0], width + 2 * p.padding[1]};
  Primitive columns_of = reshape(std::move(x), Shape{n, c, taps, rows, columns});
  Primitive out = zeros(padded_shape, columns_of->dtype(), columns_of->device());
  for (std::int64_t ki = 0; ki < p.kernel[0]; ++ki) {
    for (std::int64_t kj = 0; kj < p.kernel[1]; ++kj) {
      const ResolvedSlices region = p.region(padded_shape, ki, kj, rows, columns);
      Primitive piece = reshape(slice_dim(*this, columns_of, 2, ki * p.kernel[1] + kj, 1),
                                Shape{n, c, rows, columns});
      Primitive summed = add(slice(out, region), std::move(piece));
      out = slice_assign(std::move(out), region, std::move(summed));
    }
  }
  ResolvedSlices crop = full_slices(padded_shape);
  crop[2] = {height > 0 ? p.padding[0] : 0, height, 1};
  crop[3] = {width > 0 ? p.padding[1] : 0, width, 1};
  return slice(std::move(out), std::move(crop));
}

Primitive Backend::linear(Primitive x, Primitive weight, OptionalPrimitive bias) {
  // x [..., in] @ weight [in, out] (+ bias [out]) as one 2-D matmul.
  const Shape shape = x->shape();
  const std::int64_t in = weight->shape()[0], out = weight->shape()[1];
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < shape.rank(); ++d) rows *= shape[d];
  Primitive y = matmul(reshape(std::move(x), Shape{rows, in}), std::move(weight));
  if (bias) y = add(std::move(y), reshape(std::move(*bias), Shape{1, out}));
  return reshape(std::move(y), with_dim(shape, static_cast<std::int64_t>(shape.rank()) - 1, out));
}

Primitive Backend::layer_norm(Primitive x, Primitive gamma, OptionalPrimitive beta,
                              double epsilon) {
  // (x - mean) / sqrt(var + eps) * gamma + beta over the last dim, variance from the centred
  // values (two passes: no cancellation), 16-bit floats in f32.
  const DType dtype = x->dtype();
  const std::size_t rank = x->rank();
  const auto last = static_cast<std::int64_t>(rank) - 1;
  const Shape param_shape = along(rank, rank - 1, x->shape()[rank - 1]);
  x = to_compute(*this, std::move(x));
  Primitive centred = sub(x, mean_dim(x, last));
  Primitive variance = mean_dim(square(centred), last);
  Primitive y = mul(std::move(centred), rsqrt(add_scalar(std::move(variance), epsilon)));
  y = mul(std::move(y), reshape(to_compute(*this, std::move(gamma)), param_shape));
  if (beta) y = add(std::move(y), reshape(to_compute(*this, std::move(*beta)), param_shape));
  return from_compute(*this, std::move(y), dtype);
}

// With x̂ = (x - mean) * rstd over the last dim and gx = grad * gamma:
// dx = rstd (gx - mean(gx) - x̂ mean(gx x̂)), dgamma = Σ grad x̂ over the rows; x̂ recomputed.
PrimitivePair Backend::layer_norm_backward(Primitive x, Primitive gamma, Primitive grad,
                                           double epsilon) {
  const DType dtype = grad->dtype();
  const Shape shape = x->shape();
  const std::size_t rank = shape.rank();
  const auto last = static_cast<std::int64_t>(rank) - 1;
  const std::int64_t width = shape[rank - 1];
  const std::int64_t rows = shape.num_elements() / std::max<std::int64_t>(1, width);
  Primitive xc = to_compute(*this, std::move(x));
  Primitive centred = sub(xc, mean_dim(xc, last));
  Primitive rstd = rsqrt(add_scalar(mean_dim(square(centred), last), epsilon));
  Primitive normed = mul(std::move(centred), rstd);
  Primitive gc = to_compute(*this, std::move(grad));
  Primitive dgamma = from_compute(
      *this, reshape(sum_dim(reshape(mul(gc, normed), Shape{rows, width}), 0), Shape{width}),
      dtype);
  Primitive gx = mul(std::move(gc),
                     reshape(to_compute(*this, std::move(gamma)), along(rank, rank - 1, width)));
  Primitive along_normed = mul(normed, mean_dim(mul(gx, normed), last));
  Primitive inner = sub(sub(gx, mean_dim(gx, last)), std::move(along_normed));
  return {from_compute(*this, mul(std::move(inner), std::move(rstd)), dtype), std::move(dgamma)};
}

Primitive Backend::batch_norm(Primitive x, Primitive gamma, Primitive beta, Primitive mean,
                              Primitive variance, double epsilon) {
  // Inference form over dim 1 with the given statistics.
  const DType dtype = x->dtype();
  const std::size_t rank = x->rank();
  const Shape param_shape = along(rank, 1, x->shape()[1]);
  auto param = [&](Primitive p) { return reshape(to_compute(*this, std::move(p)), param_shape); };
  Primitive scale =
      mul(param(std::move(gamma)), rsqrt(add_scalar(param(std::move(variance)), epsilon)));
  Primitive y = mul(sub(to_compute(*this, std::move(x)), param(std::move(mean))), std::move(scale));
  y = add(std::move(y), param(std::move(beta)));
  return from_compute(*this, std::move(y), dtype);
}

Primitive Backend::attention(Primitive query, Primitive key, Primitive value,
                             OptionalPrimitive mask, OptionalPrimitive bias,
                             OptionalPrimitive dropout_seed, AttentionOptions options) {
  // softmax(q k^T * scale + bias, excluded -> -inf) v on [batch, heads, seq, dim]. A row whose
  // every key is excluded gets all-zero weights, so its output is zeros, not NaN (as the CPU
  // backend and PyTorch's math path since 2.5); NaN scores still propagate.
  const DType dtype = query->dtype();
  const std::int64_t depth = query->shape()[3];
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(depth)));
  Primitive q = to_compute(*this, std::move(query));
  Primitive k = to_compute(*this, std::move(key));
  Primitive v = to_compute(*this, std::move(value));
  Primitive scores = mul_scalar(matmul(std::move(q), swap_dims(std::move(k), 2, 3)), scale);
  if (bias) scores = add(std::move(scores), to_compute(*this, std::move(*bias)));
  const Shape score_shape = scores->shape();
  OptionalPrimitive excluded;
  if (mask) excluded = expand_to(*this, std::move(*mask), score_shape);
  if (options.is_causal) {
    // Query i sees keys j <= i (aligned at the top left, as PyTorch's is_causal).
    const std::int64_t queries = score_shape[2], keys = score_shape[3];
    const Device device = scores->device();
    Primitive rows = reshape(arange(0, queries, 1, DType::I64, device), Shape{1, 1, queries, 1});
    Primitive cols = reshape(arange(0, keys, 1, DType::I64, device), Shape{1, 1, 1, keys});
    Primitive future =
        expand_to(*this,
                  greater(expand_to(*this, std::move(cols), Shape{1, 1, queries, keys}),
                          expand_to(*this, std::move(rows), Shape{1, 1, queries, keys})),
                  score_shape);
    excluded = excluded ? logical_or(std::move(*excluded), std::move(future)) : std::move(future);
  }
  // The output's batch and head dims (v's count too), over which the dropout mask is indexed.
  const Shape output_scores =
      broadcast(score_shape, Shape{v->shape()[0], v->shape()[1], score_shape[2], score_shape[3]});
  if (excluded) scores = mask_fill(std::move(scores), *excluded, -kInfinity);
  Primitive weights = softmax(std::move(scores), 3);
  if (excluded) {
    Primitive empty_rows = expand_to(*this, all_dim(std::move(*excluded), 3), score_shape);
    weights = mask_fill(std::move(weights), std::move(empty_rows), 0.0);
  }
  if (dropout_seed) {
    weights = mul(std::move(weights),
                  attention_dropout_multiplier(*this, *dropout_seed, output_scores, 0,
                                               score_shape[2], options.dropout, v->dtype()));
  }
  return from_compute(*this, matmul(std::move(weights), std::move(v)), dtype);
}

Primitive Backend::attention_query_backward(Primitive query, Primitive key, Primitive value,
                                            Primitive /*output*/, Primitive output_grad,
                                            OptionalPrimitive mask, OptionalPrimitive bias,
                                            OptionalPrimitive dropout_seed,
                                            AttentionOptions options) {
  return defaults::attention_grads(*this, query, key, value, mask, bias, dropout_seed, output_grad,
                                   options, {.dq = true})
      .dq;
}

PrimitivePair Backend::attention_key_value_backward(Primitive query, Primitive key, Primitive value,
                                                    Primitive /*output*/, Primitive output_grad,
                                                    OptionalPrimitive mask, OptionalPrimitive bias,
                                                    OptionalPrimitive dropout_seed,
                                                    AttentionOptions options) {
  defaults::AttentionGrads grads =
      defaults::attention_grads(*this, query, key, value, mask, bias, dropout_seed, output_grad,
                                options, {.dk = true, .dv = true});
  return {std::move(grads.dk), std::move(grads.dv)};
}

}  // namespace kiln
