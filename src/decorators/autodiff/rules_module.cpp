// Backward rules of module ops. Most module ops are linear in the operand that carries the
// gradient, and the backend has the adjoint as an op (conv_x_backward, avg_pool_backward,
// interpolate_backward, ...): the rule calls the adjoint, and the adjoint's own rule calls the
// op again, which makes second derivatives (create_graph) come out of the same ops.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "contract/defaults/attention_grads.h"
#include "contract/spatial_shape.h"
#include "decorators/autodiff/rules.h"

namespace kiln::autodiff {

using defaults::from_compute;
using defaults::ones_shape;
using defaults::to_compute;

namespace {

// x and weight, then the optional operand when present, as a run-time input list.
Inputs<0> operands(Primitive x, Primitive weight, OptionalPrimitive extra) {
  Inputs<0> in;
  in.reserve(3);
  in.push_back(std::move(x));
  in.push_back(std::move(weight));
  if (extra) in.push_back(std::move(*extra));
  return in;
}

OptionalPrimitive optional_at(Inputs<0>& in, std::size_t i) {
  if (i >= in.size()) return std::nullopt;
  return std::move(in[i]);
}

// The spatial sizes of a channels-first shape [N, C, spatial...].
Axes spatial_of(const Shape& shape) { return Axes(shape.dims().begin() + 2, shape.dims().end()); }

// Entry i of a per-dim option vector, or fallback when the vector was left empty.
std::int64_t at(const std::vector<std::int64_t>& values, std::size_t i, std::int64_t fallback) {
  return i < values.size() ? values[i] : fallback;
}

// The convolution whose input gradient conv_transpose computes.
ConvOptions as_conv(const ConvTransposeOptions& o) {
  return ConvOptions{o.stride, o.padding, o.dilation, o.groups};
}

// A [1, n, 1, ...] shape of rank `rank`: a per-channel vector that broadcasts over dim 1.
Shape per_channel(std::size_t rank, std::int64_t n) {
  Shape s = ones_shape(rank);
  s[1] = n;
  return s;
}

}  // namespace

// ---- convolution -----------------------------------------------------------------------------

Primitive AutodiffBackend::conv(Primitive x, Primitive weight, OptionalPrimitive bias,
                                ConvOptions options) {
  return record<0>(
      "conv", Cost::Stored, operands(std::move(x), std::move(weight), std::move(bias)),
      kKeepIn0 | kKeepIn1,
      [options](Backend& b, Inputs<0> in) {
        return b.conv(std::move(in[0]), std::move(in[1]), optional_at(in, 2), options);
      },
      [options](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive dx, dw, db;
        if (r.needs(2)) db = b.conv_bias_backward(g);
        if (r.needs(0)) dx = b.conv_x_backward(r.in(0), r.in(1), g, options);
        if (r.needs(1)) dw = b.conv_weight_backward(r.in(0), r.in(1), std::move(g), options);
        return {dx, dw, db};
      });
}

// conv_transpose(x, w) is the input gradient of conv(·, w), so its own input gradient is
// conv(g, w), and its weight gradient that conv's weight gradient with x as the output
// gradient. When padding_out >= stride (allowed below dilation), conv(g, w) has positions
// past the end of x: they are cut from dx, and x is padded with zeros to meet them for dw.
Primitive AutodiffBackend::conv_transpose(Primitive x, Primitive weight, OptionalPrimitive bias,
                                          ConvTransposeOptions options) {
  const Shape x_shape = x->shape();
  const Shape w_shape = weight->shape();
  Axes extra;
  bool any_extra = false;
  for (std::size_t d = 0; d + 2 < x_shape.rank(); ++d) {
    const std::int64_t kernel = w_shape[d + 2], stride = at(options.stride, d, 1);
    const std::int64_t padding = at(options.padding, d, 0), dilation = at(options.dilation, d, 1);
    const std::int64_t out = spatial::conv_transpose_output_size(
        x_shape[d + 2], kernel, stride, padding, dilation, at(options.padding_out, d, 0));
    const std::int64_t back = spatial::conv_output_size(out, kernel, stride, padding, dilation);
    extra.push_back(back - x_shape[d + 2]);
    any_extra = any_extra || extra.back() != 0;
  }
  return record<0>(
      "conv_transpose", Cost::Stored, operands(std::move(x), std::move(weight), std::move(bias)),
      kKeepIn0 | kKeepIn1,
      [options](Backend& b, Inputs<0> in) {
        return b.conv_transpose(std::move(in[0]), std::move(in[1]), optional_at(in, 2), options);
      },
      [conv = as_conv(options), x_shape, extra, any_extra](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive dx, dw, db;
        if (r.needs(2)) db = b.conv_bias_backward(g);
        if (r.needs(0)) {
          dx = b.conv(g, r.in(1), std::nullopt, conv);
          if (any_extra) dx = b.slice(std::move(dx), defaults::full_slices(x_shape));
        }
        if (r.needs(1)) {
          Primitive target = r.in(0);
          for (std::size_t d = 0; d < extra.size(); ++d) {
            if (extra[d] == 0) continue;
            const auto dim = static_cast<std::int64_t>(d + 2);
            Primitive zeros = b.zeros(defaults::with_dim(target->shape(), dim, extra[d]),
                                      target->dtype(), target->device());
            target = b.cat({std::move(target), std::move(zeros)}, dim);
          }
          dw = b.conv_weight_backward(std::move(g), r.in(1), std::move(target), conv);
        }
        return {dx, dw, db};
      });
}

// conv_x_backward(x, w, h) is bilinear in (w, h) and reads only x's shape: d/dh = conv(g, w),
// d/dw = the weight gradient of a conv of image g by output gradient h.
Primitive AutodiffBackend::conv_x_backward(Primitive x, Primitive weight, Primitive output_grad,
                                           ConvOptions options) {
  return record<3>(
      "conv_x_backward", Cost::Stored, {std::move(x), std::move(weight), std::move(output_grad)},
      kKeepIn1 | kKeepIn2,
      [options](Backend& b, Inputs<3> in) {
        return b.conv_x_backward(std::move(in[0]), std::move(in[1]), std::move(in[2]), options);
      },
      [options](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive dw, dh;
        if (r.needs(2)) dh = b.conv(g, r.in(1), std::nullopt, options);
        if (r.needs(1)) dw = b.conv_weight_backward(std::move(g), r.in(1), r.in(2), options);
        return {nullptr, dw, dh};
      });
}

// conv_weight_backward(x, w, h) is bilinear in (x, h) and reads only w's shape.
Primitive AutodiffBackend::conv_weight_backward(Primitive x, Primitive weight,
                                                Primitive output_grad, ConvOptions options) {
  return record<3>(
      "conv_weight_backward", Cost::Stored,
      {std::move(x), std::move(weight), std::move(output_grad)}, kKeepIn0 | kKeepIn2,
      [options](Backend& b, Inputs<3> in) {
        return b.conv_weight_backward(std::move(in[0]), std::move(in[1]), std::move(in[2]),
                                      options);
      },
      [options](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive dx, dh;
        if (r.needs(2)) dh = b.conv(r.in(0), g, std::nullopt, options);
        if (r.needs(0)) dx = b.conv_x_backward(r.in(0), std::move(g), r.in(2), options);
        return {dx, nullptr, dh};
      });
}

// A sum over batch and space: every position of a channel gets that channel's gradient.
Primitive AutodiffBackend::conv_bias_backward(Primitive output_grad) {
  const Shape shape = output_grad->shape();
  return record<1>(
      "conv_bias_backward", Cost::Stored, {std::move(output_grad)}, kKeepNone,
      [](Backend& b, Inputs<1> in) { return b.conv_bias_backward(std::move(in[0])); },
      [shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        Primitive column = b.reshape(std::move(g), per_channel(shape.rank(), shape[1]));
        return {b.expand(std::move(column), shape)};
      });
}

// ---- pooling ---------------------------------------------------------------------------------

// Average pooling is linear: its gradient is avg_pool_backward, whose gradient is avg_pool.
Primitive AutodiffBackend::avg_pool(Primitive x, PoolOptions options) {
  return record<1>(
      "avg_pool", Cost::Stored, {std::move(x)}, kKeepIn0,
      [options](Backend& b, Inputs<1> in) { return b.avg_pool(std::move(in[0]), options); },
      [options](BackwardArgs& r, Primitive g) -> Grads {
        return {r.b.avg_pool_backward(r.in(0), std::move(g), options)};
      });
}

Primitive AutodiffBackend::avg_pool_backward(Primitive x, Primitive output_grad,
                                             PoolOptions options) {
  return record<2>(
      "avg_pool_backward", Cost::Stored, {std::move(x), std::move(output_grad)}, kKeepNone,
      [options](Backend& b, Inputs<2> in) {
        return b.avg_pool_backward(std::move(in[0]), std::move(in[1]), options);
      },
      [options](BackwardArgs& r, Primitive g) -> Grads {
        return {nullptr, r.needs(1) ? r.b.avg_pool(std::move(g), options) : nullptr};
      });
}

Primitive AutodiffBackend::adaptive_avg_pool(Primitive x, Axes output_size) {
  return record<1>(
      "adaptive_avg_pool", Cost::Stored, {std::move(x)}, kKeepIn0,
      [output_size](Backend& b, Inputs<1> in) {
        return b.adaptive_avg_pool(std::move(in[0]), output_size);
      },
      [](BackwardArgs& r, Primitive g) -> Grads {
        return {r.b.adaptive_avg_pool_backward(r.in(0), std::move(g))};
      });
}

Primitive AutodiffBackend::adaptive_avg_pool_backward(Primitive x, Primitive output_grad) {
  Axes size = spatial_of(output_grad->shape());
  return record<2>(
      "adaptive_avg_pool_backward", Cost::Stored, {std::move(x), std::move(output_grad)}, kKeepNone,
      [](Backend& b, Inputs<2> in) {
        return b.adaptive_avg_pool_backward(std::move(in[0]), std::move(in[1]));
      },
      [size = std::move(size)](BackwardArgs& r, Primitive g) -> Grads {
        return {nullptr, r.needs(1) ? r.b.adaptive_avg_pool(std::move(g), size) : nullptr};
      });
}

namespace {

// Records max pooling whose maxima were found at `indices` (flat positions in each plane): the
// gradient of each window goes to its maximum.
Primitive record_max_pool(AutodiffBackend& self, const char* op, Primitive x, Primitive values,
                          Primitive indices, const PoolOptions& options) {
  return self.record<1>(
      op, Cost::Stored, {std::move(x)}, kKeepIn0,
      [options](Backend& b, Inputs<1> in) { return b.max_pool(std::move(in[0]), options); },
      [options, indices = std::move(indices)](BackwardArgs& r, Primitive g) -> Grads {
        return {r.b.max_pool_with_indices_backward(r.in(0), std::move(g), indices, options)};
      },
      std::move(values));
}

}  // namespace

Primitive AutodiffBackend::max_pool(Primitive x, PoolOptions options) {
  if (!node_of(x)) return AutodiffPassthrough::max_pool(std::move(x), std::move(options));
  auto [values, indices] = inner().max_pool_with_indices(inner_of(x), options, DType::I64);
  return record_max_pool(*this, "max_pool", std::move(x), std::move(values), std::move(indices),
                         options);
}

PrimitivePair AutodiffBackend::max_pool_with_indices(Primitive x, PoolOptions options,
                                                     DType index_dtype) {
  if (!node_of(x)) {
    return AutodiffPassthrough::max_pool_with_indices(std::move(x), std::move(options),
                                                      index_dtype);
  }
  auto [values, indices] = inner().max_pool_with_indices(inner_of(x), options, index_dtype);
  Primitive out = record_max_pool(*this, "max_pool_with_indices", std::move(x), std::move(values),
                                  indices, options);
  return {std::move(out), wrap(std::move(indices))};
}

// Scatters h to the maxima: linear in h, and its gradient gathers g back from the maxima.
Primitive AutodiffBackend::max_pool_with_indices_backward(Primitive x, Primitive output_grad,
                                                          Primitive indices, PoolOptions options) {
  Primitive index = inner_of(indices);
  const Shape grad_shape = output_grad->shape();
  return record<2>(
      "max_pool_with_indices_backward", Cost::Stored, {std::move(x), std::move(output_grad)},
      kKeepNone,
      [index, options](Backend& b, Inputs<2> in) {
        return b.max_pool_with_indices_backward(std::move(in[0]), std::move(in[1]), index, options);
      },
      [index, grad_shape](BackwardArgs& r, Primitive g) -> Grads {
        if (!r.needs(1)) return {nullptr, nullptr};
        Backend& b = r.b;
        const std::int64_t n = grad_shape[0], c = grad_shape[1];
        const std::int64_t plane = g->shape().num_elements() / std::max<std::int64_t>(1, n * c);
        const std::int64_t windows = grad_shape.num_elements() / std::max<std::int64_t>(1, n * c);
        Primitive flat = b.reshape(std::move(g), Shape{n, c, plane});
        Primitive at = b.reshape(index, Shape{n, c, windows});
        return {nullptr, b.reshape(b.gather(2, std::move(flat), std::move(at)), grad_shape)};
      });
}

// ---- embedding, interpolation, patches ---------------------------------------------------------

Primitive AutodiffBackend::embedding(Primitive weights, Primitive indices) {
  Primitive index = inner_of(indices);
  return record<1>(
      "embedding", Cost::Stored, {std::move(weights)}, kKeepIn0,
      [index](Backend& b, Inputs<1> in) { return b.embedding(std::move(in[0]), index); },
      [index](BackwardArgs& r, Primitive g) -> Grads {
        return {r.b.embedding_backward(r.in(0), std::move(g), index)};
      });
}

Primitive AutodiffBackend::embedding_backward(Primitive weights, Primitive output_grad,
                                              Primitive indices) {
  Primitive index = inner_of(indices);
  return record<2>(
      "embedding_backward", Cost::Stored, {std::move(weights), std::move(output_grad)}, kKeepNone,
      [index](Backend& b, Inputs<2> in) {
        return b.embedding_backward(std::move(in[0]), std::move(in[1]), index);
      },
      [index](BackwardArgs& r, Primitive g) -> Grads {
        return {nullptr, r.needs(1) ? r.b.embedding(std::move(g), index) : nullptr};
      });
}

Primitive AutodiffBackend::interpolate(Primitive x, Axes output_size, InterpolateOptions options) {
  return record<1>(
      "interpolate", Cost::Stored, {std::move(x)}, kKeepIn0,
      [output_size, options](Backend& b, Inputs<1> in) {
        return b.interpolate(std::move(in[0]), output_size, options);
      },
      [output_size, options](BackwardArgs& r, Primitive g) -> Grads {
        return {r.b.interpolate_backward(r.in(0), std::move(g), output_size, options)};
      });
}

Primitive AutodiffBackend::interpolate_backward(Primitive x, Primitive output_grad,
                                                Axes output_size, InterpolateOptions options) {
  return record<2>(
      "interpolate_backward", Cost::Stored, {std::move(x), std::move(output_grad)}, kKeepNone,
      [output_size, options](Backend& b, Inputs<2> in) {
        return b.interpolate_backward(std::move(in[0]), std::move(in[1]), output_size, options);
      },
      [output_size, options](BackwardArgs& r, Primitive g) -> Grads {
        return {nullptr,
                r.needs(1) ? r.b.interpolate(std::move(g), output_size, options) : nullptr};
      });
}

// unfold_patches and fold_patches are each other's adjoints.
Primitive AutodiffBackend::unfold_patches(Primitive x, UnfoldOptions options) {
  Axes size = spatial_of(x->shape());
  return record<1>(
      "unfold_patches", Cost::Stored, {std::move(x)}, kKeepNone,
      [options](Backend& b, Inputs<1> in) { return b.unfold_patches(std::move(in[0]), options); },
      [options, size = std::move(size)](BackwardArgs& r, Primitive g) -> Grads {
        return {r.b.fold_patches(std::move(g), size, options)};
      });
}

Primitive AutodiffBackend::fold_patches(Primitive x, Axes output_size, UnfoldOptions options) {
  return record<1>(
      "fold_patches", Cost::Stored, {std::move(x)}, kKeepNone,
      [output_size, options](Backend& b, Inputs<1> in) {
        return b.fold_patches(std::move(in[0]), output_size, options);
      },
      [options](BackwardArgs& r, Primitive g) -> Grads {
        return {r.b.unfold_patches(std::move(g), options)};
      });
}

// ---- linear and normalisations -----------------------------------------------------------------

namespace {

// True when an odd number of swap_dims ops lead to the node's value from what they started at:
// the value is then (by the layout of its origin, row-major as tensors are made) transposed.
bool transposed_view(const NodeRef& node) {
  bool odd = false;
  for (const Node* n = node.get(); n != nullptr && std::strcmp(n->op(), "swap_dims") == 0;) {
    odd = !odd;
    const std::span<const NodeRef> parents = n->parents();
    n = parents.empty() ? nullptr : parents[0].get();
  }
  return odd;
}

}  // namespace

// y = x W + bias with W [in, out], over the rows of x flattened to [rows, in]:
// dx = g Wᵀ, dW = xᵀ g, dbias = the column sums of g.
// A W that is the transpose of a tracked [out, in] weight (module::linear's, PyTorch's layout)
// gets dW as the transpose of gᵀ x, made [out, in]: the transpose's own rule then hands the
// weight a row-major gradient, so that its cast back to f32 under autocast, its accumulation and
// the optimizer's update read it in order, not with a stride of `out` elements per step (on
// cuda a transposed cast of GPT-2's [768, 50304] head took 466 us, a contiguous one is ~70).
Primitive AutodiffBackend::linear(Primitive x, Primitive weight, OptionalPrimitive bias) {
  const Shape x_shape = x->shape(), w_shape = weight->shape();
  const bool weight_transposed = transposed_view(node_of(weight));
  return record<0>(
      "linear", Cost::Stored, operands(std::move(x), std::move(weight), std::move(bias)),
      kKeepIn0 | kKeepIn1,
      [](Backend& b, Inputs<0> in) {
        return b.linear(std::move(in[0]), std::move(in[1]), optional_at(in, 2));
      },
      [x_shape, w_shape, weight_transposed](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        const std::int64_t in = w_shape[0], out = w_shape[1];
        const std::int64_t rows = x_shape.num_elements() / std::max<std::int64_t>(1, in);
        Primitive rows_g = b.reshape(std::move(g), Shape{rows, out});
        Primitive dx, dw, db;
        if (r.needs(2)) db = b.reshape(b.sum_dim(rows_g, 0), Shape{out});
        if (r.needs(1)) {
          Primitive rows_x = b.reshape(r.in(0), Shape{rows, in});
          dw = weight_transposed
                   ? transpose_last(b, b.matmul(transpose_last(b, rows_g), std::move(rows_x)))
                   : b.matmul(transpose_last(b, std::move(rows_x)), rows_g);
        }
        if (r.needs(0))
          dx = b.reshape(b.matmul(std::move(rows_g), transpose_last(b, r.in(1))), x_shape);
        return {dx, dw, db};
      });
}

// dx and dgamma from the backend's layer_norm_backward (one kernel on cuda), or, when the
// backward pass is itself recorded, from its default's composition of differentiable ops (the
// same formula); dbeta = Σ g over the rows.
Primitive AutodiffBackend::layer_norm(Primitive x, Primitive gamma, OptionalPrimitive beta,
                                      double epsilon) {
  const Shape shape = x->shape();
  return record<0>(
      "layer_norm", Cost::Stored, operands(std::move(x), std::move(gamma), std::move(beta)),
      kKeepIn0 | kKeepIn1,
      [epsilon](Backend& b, Inputs<0> in) {
        return b.layer_norm(std::move(in[0]), std::move(in[1]), optional_at(in, 2), epsilon);
      },
      [epsilon, shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        const DType dtype = g->dtype();
        const std::int64_t width = shape[shape.rank() - 1];
        const std::int64_t rows = shape.num_elements() / std::max<std::int64_t>(1, width);
        Primitive dx, dgamma, dbeta;
        if (r.needs(2)) {
          dbeta =
              from_compute(b,
                           b.reshape(b.sum_dim(b.reshape(to_compute(b, g), Shape{rows, width}), 0),
                                     Shape{width}),
                           dtype);
        }
        if (r.needs(0) || r.needs(1)) {
          PrimitivePair grads = r.create_graph()
                                    ? b.Backend::layer_norm_backward(r.in(0), r.in(1), g, epsilon)
                                    : b.layer_norm_backward(r.in(0), r.in(1), g, epsilon);
          if (r.needs(0)) dx = std::move(grads.first);
          if (r.needs(1)) dgamma = std::move(grads.second);
        }
        return {dx, dgamma, dbeta};
      });
}

// y = (x - mean) * s * gamma + beta per channel (dim 1), s = 1 / sqrt(variance + eps), with
// the statistics given: every operand gets a gradient. Channel sums are conv_bias_backward
// (a sum over batch and space), which has its own rule for second derivatives.
Primitive AutodiffBackend::batch_norm(Primitive x, Primitive gamma, Primitive beta, Primitive mean,
                                      Primitive variance, double epsilon) {
  const Shape shape = x->shape();
  return record<5>(
      "batch_norm", Cost::Stored,
      {std::move(x), std::move(gamma), std::move(beta), std::move(mean), std::move(variance)},
      kKeepIn0 | kKeepIn1 | kKeepIn3 | kKeepIn4,
      [epsilon](Backend& b, Inputs<5> in) {
        return b.batch_norm(std::move(in[0]), std::move(in[1]), std::move(in[2]), std::move(in[3]),
                            std::move(in[4]), epsilon);
      },
      [epsilon, shape](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        const DType dtype = g->dtype();
        const Shape column = per_channel(shape.rank(), shape[1]);
        auto back = [&](Primitive p) { return from_compute(b, std::move(p), dtype); };
        Primitive gc = to_compute(b, std::move(g));
        Primitive gamma = to_compute(b, r.in(1));
        Primitive s = b.rsqrt(b.add_scalar(to_compute(b, r.in(4)), epsilon));
        Primitive dx, dgamma, dbeta, dmean, dvariance;
        if (r.needs(0)) dx = back(b.mul(gc, b.reshape(b.mul(gamma, s), column)));
        Primitive g_sum;
        if (r.needs(2) || r.needs(3)) g_sum = b.conv_bias_backward(gc);
        if (r.needs(3)) dmean = back(b.neg(b.mul(b.mul(g_sum, gamma), s)));
        if (r.needs(2)) dbeta = back(std::move(g_sum));
        if (r.needs(1) || r.needs(4)) {
          Primitive centred =
              b.sub(to_compute(b, r.in(0)), b.reshape(to_compute(b, r.in(3)), column));
          Primitive gx_sum = b.conv_bias_backward(b.mul(gc, std::move(centred)));
          if (r.needs(1)) dgamma = back(b.mul(gx_sum, s));
          if (r.needs(4)) {
            // d s / d variance = -s³ / 2
            Primitive cubed = b.mul(b.square(s), s);
            dvariance = back(b.mul(b.mul(gx_sum, gamma), scale(b, std::move(cubed), -0.5)));
          }
        }
        return {dx, dgamma, dbeta, dmean, dvariance};
      });
}

// ---- attention -------------------------------------------------------------------------------

namespace {

OptionalPrimitive optional_input(BackwardArgs& r, bool present, std::size_t i) {
  if (!present) return std::nullopt;
  return r.in(i);
}

}  // namespace

// out = P v with P = softmax(S), S = q kᵀ * scale + bias (masked and causal entries -inf). The
// forward runs the backend's kernel; the gradients are the backend's backward ops (a kernel of
// their own on cuda), or, for the bias's gradient and under create_graph, the composition of
// attention_grads.h, whose ops are recorded in turn.
Primitive AutodiffBackend::attention(Primitive query, Primitive key, Primitive value,
                                     OptionalPrimitive mask, OptionalPrimitive bias,
                                     OptionalPrimitive dropout_seed, AttentionOptions options) {
  // The mask and the dropout seed take no gradient: held as inner tensors, not recorded inputs.
  OptionalPrimitive mask_inner, seed_inner;
  if (mask) mask_inner = inner_of(*mask);
  if (dropout_seed) seed_inner = inner_of(*dropout_seed);
  const bool has_bias = bias.has_value();
  Inputs<0> in;
  in.reserve(4);
  in.push_back(std::move(query));
  in.push_back(std::move(key));
  in.push_back(std::move(value));
  if (bias) in.push_back(std::move(*bias));
  return record<0>(
      "attention", Cost::Stored, std::move(in), kKeepAllIn | kKeepOut,
      [mask_inner, seed_inner, options](Backend& b, Inputs<0> in) {
        return b.attention(std::move(in[0]), std::move(in[1]), std::move(in[2]), mask_inner,
                           optional_at(in, 3), seed_inner, options);
      },
      [mask_inner, seed_inner, options, has_bias](BackwardArgs& r, Primitive g) -> Grads {
        Backend& b = r.b;
        const OptionalPrimitive bias = optional_input(r, has_bias, 3);
        const bool need_dbias = has_bias && r.needs(3);
        if (need_dbias || r.create_graph()) {
          defaults::AttentionGrads grads = defaults::attention_grads(
              b, r.in(0), r.in(1), r.in(2), mask_inner, bias, seed_inner, g, options,
              {.dq = r.needs(0), .dk = r.needs(1), .dv = r.needs(2), .dbias = need_dbias});
          return {grads.dq, grads.dk, grads.dv, grads.dbias};
        }
        // dk and dv first: a backend may compute dq with them and hand it to the query op (cuda
        // on Hopper does).
        Primitive dq, dk, dv;
        const Primitive out = r.out();
        if (r.needs(1) || r.needs(2)) {
          auto [k_grad, v_grad] = b.attention_key_value_backward(
              r.in(0), r.in(1), r.in(2), out, g, mask_inner, bias, seed_inner, options);
          if (r.needs(1)) dk = std::move(k_grad);
          if (r.needs(2)) dv = std::move(v_grad);
        }
        if (r.needs(0)) {
          dq = b.attention_query_backward(r.in(0), r.in(1), r.in(2), out, g, mask_inner, bias,
                                          seed_inner, options);
        }
        return {dq, dk, dv, nullptr};
      });
}

}  // namespace kiln::autodiff
