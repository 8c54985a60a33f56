// Gradcheck rows: module ops (convolution, pooling, embedding, interpolation, patches, linear,
// normalisations, attention) and their backward ops. The backward ops are called on the backend
// with complete options (as the rules call them), and are also reached through create_graph:
// the gradient of a module op, differentiated again.
#include <algorithm>
#include <functional>
#include <random>
#include <string>

#include "conformance/grad_of.h"
#include "conformance/gradcheck.h"
#include "runtime/registry.h"

namespace kiln::conformance {
namespace {

using Sizes = std::vector<std::int64_t>;

// A constant operand of the same dtype and device as like.
Primitive constant(const std::vector<double>& values, const Shape& shape, const Primitive& like) {
  return make_primitive(values, shape, like->dtype(), Layout::Contiguous, like->device());
}

std::vector<double> values_for(const Shape& shape, std::uint64_t seed) {
  return random_values(shape, DType::F64, seed, -1.0, 1.0);
}

// Distinct values -2, -1.875, ... (exact in every float dtype), shuffled: max pooling never
// meets a tie, and finite differences never move a maximum.
std::vector<double> distinct(const Shape& shape, std::uint64_t seed) {
  const auto n = static_cast<std::size_t>(shape.num_elements());
  std::vector<double> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = -2.0 + 0.125 * static_cast<double>(i);
  std::mt19937_64 rng(seed);
  std::shuffle(values.begin(), values.end(), rng);
  return values;
}

Primitive indices(const std::vector<double>& values, const Shape& shape, const Primitive& like) {
  return make_primitive(values, shape, DType::I64, Layout::Contiguous, like->device());
}

Backend& backend_of(const Primitive& p) { return backend_for(p->device()); }

// ---- convolution -----------------------------------------------------------------------------

struct ConvCase {
  Shape x, weight;
  Sizes stride, padding, dilation;
  std::int64_t groups;
  bool bias;
};

std::int64_t conv_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p,
                       std::int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

Shape conv_output(const ConvCase& c) {
  Sizes dims{c.x[0], c.weight[0]};
  for (std::size_t d = 0; d + 2 < c.x.rank(); ++d) {
    dims.push_back(
        conv_size(c.x[d + 2], c.weight[d + 2], c.stride[d], c.padding[d], c.dilation[d]));
  }
  return Shape(dims);
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {{2, 2, 5}, {4, 1, 3}, {2}, {1}, {1}, 2, true},                  // 1-d, groups, stride
      {{1, 2, 6}, {2, 2, 2}, {1}, {0}, {2}, 1, false},                 // 1-d, dilation
      {{1, 2, 4, 4}, {2, 2, 2, 2}, {2, 1}, {1, 0}, {1, 1}, 1, true},   // 2-d, stride, padding
      {{1, 4, 3, 4}, {2, 2, 2, 2}, {1, 1}, {0, 1}, {1, 2}, 2, false},  // 2-d, groups, dilation
      {{0, 2, 3, 3}, {2, 2, 2, 2}, {1, 1}, {0, 0}, {1, 1}, 1, true},   // empty batch
  };
  return cases;
}

ConvOptions options_of(const ConvCase& c) { return {c.stride, c.padding, c.dilation, c.groups}; }

}  // namespace

KILN_CONFORMANCE_ROW(grad_conv, ({"grad:conv"})) {
  for (std::size_t i = 0; i < conv_cases().size(); ++i) {
    const ConvCase& c = conv_cases()[i];
    const std::string what = "conv case " + std::to_string(i);
    const std::size_t dims = c.x.rank() - 2;
    std::vector<GradInput> inputs = {{c.x}, {c.weight, Layout::Transposed}};
    if (c.bias) inputs.push_back({Shape{c.weight[0]}});
    const auto f = [&](const Prims& in) {
      std::optional<Primitive> bias;
      if (c.bias) bias = in[2];
      return detail::conv(in[0], in[1], bias, options_of(c), dims);
    };
    if (i == 2) {
      for (Layout layout : kLayouts) {
        inputs[0].layout = layout;
        gradcheck(device, what + " " + layout_name(layout), inputs, f);
      }
    } else {
      gradcheck(device, what, inputs, f);
    }
  }
  // Second derivatives: the recorded x and weight gradients (conv_x_backward and
  // conv_weight_backward on the autodiff backend), differentiated in the other operand and seed.
  for (std::size_t i : {0, 3}) {
    const ConvCase& c = conv_cases()[i];
    const std::size_t dims = c.x.rank() - 2;
    const Shape y = conv_output(c);
    gradcheck(device, "conv second derivative in x, case " + std::to_string(i),
              {{c.x}, {c.weight}, {y}}, [&](const Prims& in) {
                return grad_of(in[0], in[2], [&](const Primitive& x) {
                  return detail::conv(x, in[1], std::nullopt, options_of(c), dims);
                });
              });
    gradcheck(device, "conv second derivative in weight, case " + std::to_string(i),
              {{c.x}, {c.weight}, {y}}, [&](const Prims& in) {
                return grad_of(in[1], in[2], [&](const Primitive& w) {
                  return detail::conv(in[0], w, std::nullopt, options_of(c), dims);
                });
              });
  }
}

KILN_CONFORMANCE_ROW(grad_conv_backward_ops, ({"grad:conv_x_backward", "grad:conv_weight_backward",
                                               "grad:conv_bias_backward"})) {
  for (std::size_t i = 0; i < conv_cases().size(); ++i) {
    const ConvCase& c = conv_cases()[i];
    const std::string what = " case " + std::to_string(i);
    const Shape y = conv_output(c);
    const auto x_values = values_for(c.x, 100 + i);
    const auto w_values = values_for(c.weight, 200 + i);
    gradcheck(device, "conv_x_backward" + what, {{c.weight}, {y, Layout::Strided}},
              [&](const Prims& in) {
                return backend_of(in[0]).conv_x_backward(constant(x_values, c.x, in[0]), in[0],
                                                         in[1], options_of(c));
              });
    gradcheck(device, "conv_weight_backward" + what, {{c.x, Layout::Transposed}, {y}},
              [&](const Prims& in) {
                return backend_of(in[0]).conv_weight_backward(
                    in[0], constant(w_values, c.weight, in[0]), in[1], options_of(c));
              });
    gradcheck(device, "conv_bias_backward" + what, {{y, Layout::Offset}},
              [&](const Prims& in) { return backend_of(in[0]).conv_bias_backward(in[0]); });
  }
}

namespace {

struct ConvTransposeCase {
  Shape x, weight;  // weight [C_in, C_out / groups, k...]
  Sizes stride, padding, padding_out, dilation;
  std::int64_t groups;
  bool bias;
};

}  // namespace

KILN_CONFORMANCE_ROW(grad_conv_transpose, ({"grad:conv_transpose"})) {
  const std::vector<ConvTransposeCase> cases = {
      {{1, 2, 3}, {2, 2, 3}, {2}, {1}, {1}, {1}, 1, true},
      {{2, 2, 3}, {2, 1, 2}, {1}, {0}, {0}, {1}, 2, false},
      {{1, 2, 2, 3}, {2, 2, 2, 2}, {2, 1}, {0, 1}, {1, 0}, {1, 1}, 1, true},
      // padding_out 1 at stride 1 (allowed under dilation 2): conv of the gradient overshoots x.
      {{1, 2, 2, 3}, {2, 1, 2, 2}, {1, 2}, {0, 0}, {1, 0}, {2, 1}, 2, true},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const ConvTransposeCase& c = cases[i];
    const std::size_t dims = c.x.rank() - 2;
    const ConvTransposeOptions options{c.stride, c.padding, c.padding_out, c.dilation, c.groups};
    std::vector<GradInput> inputs = {{c.x}, {c.weight, Layout::Strided}};
    if (c.bias) inputs.push_back({Shape{c.weight[1] * c.groups}});
    const auto f = [&](const Prims& in) {
      std::optional<Primitive> bias;
      if (c.bias) bias = in[2];
      return detail::conv_transpose(in[0], in[1], bias, options, dims);
    };
    const std::string what = "conv_transpose case " + std::to_string(i);
    if (i == 2) {
      for (Layout layout : kLayouts) {
        inputs[0].layout = layout;
        gradcheck(device, what + " " + layout_name(layout), inputs, f);
      }
    } else {
      gradcheck(device, what, inputs, f);
    }
  }
  // Second derivative through create_graph (the rule's conv and conv_weight_backward).
  const ConvTransposeCase& c = cases[2];
  const ConvTransposeOptions options{c.stride, c.padding, c.padding_out, c.dilation, c.groups};
  const auto y = detail::conv_transpose(
      make_primitive(values_for(c.x, 1), c.x, DType::F64, Layout::Contiguous, device.autodiff()),
      make_primitive(values_for(c.weight, 2), c.weight, DType::F64, Layout::Contiguous,
                     device.autodiff()),
      std::nullopt, options, 2);
  gradcheck(device, "conv_transpose second derivative", {{c.x}, {c.weight}, {y->shape()}},
            [&](const Prims& in) {
              return grad_of(in[0], in[2], [&](const Primitive& x) {
                return detail::conv_transpose(x, in[1], std::nullopt, options, 2);
              });
            });
}

// ---- pooling ---------------------------------------------------------------------------------

namespace {

struct PoolCase {
  Shape x;
  PoolOptions options;  // complete: every vector filled
};

}  // namespace

KILN_CONFORMANCE_ROW(grad_avg_pool, ({"grad:avg_pool", "grad:avg_pool_backward"})) {
  const std::vector<PoolCase> cases = {
      {{1, 2, 5},
       {.kernel_size = {3},
        .stride = {2},
        .padding = {1},
        .dilation = {1},
        .ceil_mode = true,
        .count_include_pad = false}},
      {{1, 2, 5},
       {.kernel_size = {2},
        .stride = {1},
        .padding = {1},
        .dilation = {1},
        .ceil_mode = false,
        .count_include_pad = true}},
      {{1, 1, 4, 5},
       {.kernel_size = {2, 3},
        .stride = {2, 2},
        .padding = {1, 1},
        .dilation = {1, 1},
        .ceil_mode = false,
        .count_include_pad = true}},
      {{2, 1, 3, 4},
       {.kernel_size = {2, 2},
        .stride = {2, 3},
        .padding = {0, 1},
        .dilation = {1, 1},
        .ceil_mode = true,
        .count_include_pad = false}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const PoolCase& c = cases[i];
    const std::size_t dims = c.x.rank() - 2;
    const std::string what = " case " + std::to_string(i);
    const auto f = [&](const Prims& in) { return detail::avg_pool(in[0], c.options, dims); };
    for (Layout layout : kLayouts) {
      if (i != 2 && layout != Layout::Contiguous) continue;
      gradcheck(device, "avg_pool" + what + " " + layout_name(layout), {{c.x, layout}}, f);
    }
    const auto x_values = values_for(c.x, 300 + i);
    const Shape y = detail::avg_pool(make_primitive(x_values, c.x, DType::F64, Layout::Contiguous,
                                                    device.autodiff()),
                                     c.options, dims)
                        ->shape();
    gradcheck(device, "avg_pool_backward" + what, {{y, Layout::Transposed}}, [&](const Prims& in) {
      return backend_of(in[0]).avg_pool_backward(constant(x_values, c.x, in[0]), in[0], c.options);
    });
    gradcheck(device, "avg_pool second derivative" + what, {{c.x}, {y}}, [&](const Prims& in) {
      return grad_of(in[0], in[1],
                     [&](const Primitive& x) { return detail::avg_pool(x, c.options, dims); });
    });
  }
}

KILN_CONFORMANCE_ROW(grad_adaptive_avg_pool,
                     ({"grad:adaptive_avg_pool", "grad:adaptive_avg_pool_backward"})) {
  const std::vector<std::pair<Shape, Sizes>> cases = {
      {{1, 2, 5}, {3}}, {{1, 1, 5, 4}, {2, 3}}, {{2, 1, 3, 3}, {4, 1}}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    // References rather than a structured binding, which clang before 16 cannot capture.
    const Shape& shape = cases[i].first;
    const Sizes& size = cases[i].second;
    const std::string what = " case " + std::to_string(i);
    for (Layout layout : kLayouts) {
      if (i != 1 && layout != Layout::Contiguous) continue;
      gradcheck(device, "adaptive_avg_pool" + what + " " + layout_name(layout), {{shape, layout}},
                [&](const Prims& in) { return detail::adaptive_avg_pool(in[0], size); });
    }
    Sizes y_dims{shape[0], shape[1]};
    y_dims.insert(y_dims.end(), size.begin(), size.end());
    const Shape y(y_dims);
    const auto x_values = values_for(shape, 400 + i);
    gradcheck(device, "adaptive_avg_pool_backward" + what, {{y, Layout::Strided}},
              [&](const Prims& in) {
                return backend_of(in[0]).adaptive_avg_pool_backward(
                    constant(x_values, shape, in[0]), in[0]);
              });
    gradcheck(
        device, "adaptive_avg_pool second derivative" + what, {{shape}, {y}}, [&](const Prims& in) {
          return grad_of(in[0], in[1],
                         [&](const Primitive& x) { return detail::adaptive_avg_pool(x, size); });
        });
  }
}

KILN_CONFORMANCE_ROW(grad_max_pool, ({"grad:max_pool", "grad:max_pool_with_indices",
                                      "grad:max_pool_with_indices_backward"})) {
  const std::vector<PoolCase> cases = {
      {{1, 2, 6},
       {.kernel_size = {3}, .stride = {2}, .padding = {1}, .dilation = {1}, .ceil_mode = true}},
      {{1, 1, 7},
       {.kernel_size = {2}, .stride = {1}, .padding = {0}, .dilation = {3}, .ceil_mode = false}},
      {{1, 2, 4, 4},
       {.kernel_size = {2, 2},
        .stride = {1, 2},
        .padding = {1, 0},
        .dilation = {1, 1},
        .ceil_mode = false}},
      {{1, 1, 5, 5},
       {.kernel_size = {3, 2},
        .stride = {2, 2},
        .padding = {1, 1},
        .dilation = {2, 1},
        .ceil_mode = true}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const PoolCase& c = cases[i];
    const std::size_t dims = c.x.rank() - 2;
    const std::string what = " case " + std::to_string(i);
    GradInput x{c.x};
    x.values = distinct(c.x, 500 + i);
    for (Layout layout : kLayouts) {
      if (i != 2 && layout != Layout::Contiguous) continue;
      x.layout = layout;
      gradcheck(device, "max_pool" + what + " " + layout_name(layout), {x},
                [&](const Prims& in) { return detail::max_pool(in[0], c.options, dims); });
    }
    x.layout = Layout::Contiguous;
    gradcheck(device, "max_pool_with_indices" + what, {x}, [&](const Prims& in) {
      return detail::max_pool_with_indices(in[0], c.options, dims).first;
    });
    // The backward op with the indices of a fixed input, linear in the window gradients.
    const Primitive plain =
        make_primitive(x.values, c.x, DType::F64, Layout::Contiguous, device.autodiff());
    const detail::PrimPair pooled = detail::max_pool_with_indices(plain, c.options, dims);
    const Primitive index = pooled.second;
    const Shape y = pooled.first->shape();
    gradcheck(device, "max_pool_with_indices_backward" + what, {{y, Layout::Transposed}},
              [&](const Prims& in) {
                return backend_of(in[0]).max_pool_with_indices_backward(
                    constant(x.values, c.x, in[0]), in[0], index, c.options);
              });
    gradcheck(device, "max_pool second derivative" + what, {x, {y}}, [&](const Prims& in) {
      return grad_of(in[0], in[1],
                     [&](const Primitive& p) { return detail::max_pool(p, c.options, dims); });
    });
  }
}

// ---- embedding, interpolation, patches ---------------------------------------------------------

KILN_CONFORMANCE_ROW(grad_embedding, ({"grad:embedding", "grad:embedding_backward"})) {
  const Shape weights{5, 3};
  const Shape index_shape{2, 3};
  const std::vector<double> index_values = {0, 4, 2, 4, 1, 0};  // rows 0 and 4 read twice
  const Shape y{2, 3, 3};
  for (Layout layout : kLayouts) {
    gradcheck(device, "embedding " + layout_name(layout), {{weights, layout}},
              [&](const Prims& in) {
                return detail::embedding(in[0], indices(index_values, index_shape, in[0]));
              });
  }
  const auto w_values = values_for(weights, 600);
  gradcheck(device, "embedding_backward", {{y, Layout::Strided}}, [&](const Prims& in) {
    return backend_of(in[0]).embedding_backward(constant(w_values, weights, in[0]), in[0],
                                                indices(index_values, index_shape, in[0]));
  });
  gradcheck(device, "embedding second derivative", {{weights}, {y}}, [&](const Prims& in) {
    return grad_of(in[0], in[1], [&](const Primitive& w) {
      return detail::embedding(w, indices(index_values, index_shape, w));
    });
  });
}

KILN_CONFORMANCE_ROW(grad_interpolate, ({"grad:interpolate", "grad:interpolate_backward"})) {
  const Shape x{1, 2, 3, 3};
  const std::vector<Sizes> sizes = {{4, 5}, {2, 2}};
  for (InterpolateMode mode :
       {InterpolateMode::Nearest, InterpolateMode::Bilinear, InterpolateMode::Bicubic}) {
    for (bool align : {false, true}) {
      const InterpolateOptions options{mode, align};
      for (const Sizes& size : sizes) {
        const std::string what = "mode " + std::to_string(static_cast<int>(mode)) +
                                 (align ? " aligned" : "") + " to " + std::to_string(size[0]) +
                                 "x" + std::to_string(size[1]);
        const Layout layout = size[0] == 4 ? Layout::Transposed : Layout::Offset;
        gradcheck(device, "interpolate " + what, {{x, layout}},
                  [&](const Prims& in) { return detail::interpolate(in[0], size, options); });
        const Shape y{x[0], x[1], size[0], size[1]};
        const auto x_values = values_for(x, 700);
        gradcheck(device, "interpolate_backward " + what, {{y}}, [&](const Prims& in) {
          return backend_of(in[0]).interpolate_backward(constant(x_values, x, in[0]), in[0], size,
                                                        options);
        });
        gradcheck(device, "interpolate second derivative " + what, {{x}, {y}},
                  [&](const Prims& in) {
                    return grad_of(in[0], in[1], [&](const Primitive& p) {
                      return detail::interpolate(p, size, options);
                    });
                  });
      }
    }
  }
}

KILN_CONFORMANCE_ROW(grad_patches, ({"grad:unfold_patches", "grad:fold_patches"})) {
  const UnfoldOptions options{
      .kernel_size = {2, 2}, .stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}};
  const Shape x{1, 1, 4, 4};
  const Shape patches{1, 4, 6};  // 4 taps; 3 x 2 windows
  for (Layout layout : kLayouts) {
    gradcheck(device, "unfold_patches " + layout_name(layout), {{x, layout}},
              [&](const Prims& in) { return detail::unfold_patches(in[0], options); });
    gradcheck(device, "fold_patches " + layout_name(layout), {{patches, layout}},
              [&](const Prims& in) {
                return detail::fold_patches(in[0], {4, 4}, options);
              });
  }
  const UnfoldOptions plain{.kernel_size = {2, 1}, .stride = {}, .padding = {}, .dilation = {}};
  gradcheck(device, "unfold_patches two channels", {{Shape{2, 2, 2, 3}}},
            [&](const Prims& in) { return detail::unfold_patches(in[0], plain); });
  gradcheck(device, "unfold_patches second derivative", {{x}, {patches}}, [&](const Prims& in) {
    return grad_of(in[0], in[1],
                   [&](const Primitive& p) { return detail::unfold_patches(p, options); });
  });
  gradcheck(device, "fold_patches second derivative", {{patches}, {x}}, [&](const Prims& in) {
    return grad_of(in[0], in[1], [&](const Primitive& p) {
      return detail::fold_patches(p, {4, 4}, options);
    });
  });
}

// ---- linear, normalisations, attention ---------------------------------------------------------

KILN_CONFORMANCE_ROW(grad_linear, ({"grad:linear"})) {
  const auto with_bias = [](const Prims& in) { return detail::linear(in[0], in[1], in[2]); };
  const auto without_bias = [](const Prims& in) {
    return detail::linear(in[0], in[1], std::nullopt);
  };
  for (Layout layout : kLayouts) {
    gradcheck(device, "linear " + layout_name(layout),
              {{Shape{2, 3}, layout}, {Shape{3, 4}, Layout::Transposed}, {Shape{4}}}, with_bias);
  }
  gradcheck(device, "linear rank 3", {{Shape{2, 2, 3}, Layout::Strided}, {Shape{3, 2}}},
            without_bias);
  gradcheck(device, "linear rank 1", {{Shape{3}}, {Shape{3, 2}}, {Shape{2}}}, with_bias);
  gradcheck(device, "linear no rows", {{Shape{0, 3}}, {Shape{3, 2}}, {Shape{2}}}, with_bias);
}

KILN_CONFORMANCE_ROW(grad_linear_second, ({"grad:linear"})) {
  // Needs the layout rules (reshape) under create_graph.
  gradcheck(device, "linear second derivative", {{Shape{2, 3}}, {Shape{3, 2}}, {Shape{2, 2}}},
            [](const Prims& in) {
              return grad_of(in[0], in[2], [&](const Primitive& x) {
                return detail::linear(x, in[1], std::nullopt);
              });
            });
}

KILN_CONFORMANCE_ROW(grad_layer_norm, ({"grad:layer_norm"})) {
  for (Layout layout : kLayouts) {
    gradcheck(device, "layer_norm " + layout_name(layout),
              {{Shape{3, 4}, layout}, {Shape{4}}, {Shape{4}}},
              [](const Prims& in) { return detail::layer_norm(in[0], in[1], in[2], 1e-5); });
  }
  gradcheck(device, "layer_norm rank 3 no beta", {{Shape{2, 1, 3}, Layout::Transposed}, {Shape{3}}},
            [](const Prims& in) { return detail::layer_norm(in[0], in[1], std::nullopt, 1e-5); });
  gradcheck(device, "layer_norm large epsilon", {{Shape{2, 3}}, {Shape{3}}, {Shape{3}}},
            [](const Prims& in) { return detail::layer_norm(in[0], in[1], in[2], 0.5); });
  gradcheck(device, "layer_norm no rows", {{Shape{0, 3}}, {Shape{3}}, {Shape{3}}},
            [](const Prims& in) { return detail::layer_norm(in[0], in[1], in[2], 1e-5); });
}

KILN_CONFORMANCE_ROW(grad_layer_norm_second, ({"grad:layer_norm"})) {
  // Needs the layout rules (reshape) under create_graph.
  gradcheck(device, "layer_norm second derivative", {{Shape{2, 3}}, {Shape{3}}, {Shape{2, 3}}},
            [](const Prims& in) {
              return grad_of(in[0], in[2], [&](const Primitive& x) {
                return detail::layer_norm(x, in[1], std::nullopt, 1e-5);
              });
            });
}

KILN_CONFORMANCE_ROW(grad_batch_norm, ({"grad:batch_norm"})) {
  const auto f = [](const Prims& in) {
    return detail::batch_norm(in[0], in[1], in[2], in[3], in[4], 1e-3);
  };
  GradInput variance{Shape{3}};
  variance.lo = 0.3;
  variance.hi = 2.0;
  for (Layout layout : kLayouts) {
    gradcheck(device, "batch_norm " + layout_name(layout),
              {{Shape{2, 3, 2}, layout}, {Shape{3}}, {Shape{3}}, {Shape{3}}, variance}, f);
  }
  gradcheck(device, "batch_norm rank 2",
            {{Shape{4, 3}}, {Shape{3}}, {Shape{3}}, {Shape{3}}, variance}, f);
  gradcheck(device, "batch_norm rank 4",
            {{Shape{1, 3, 2, 2}, Layout::Offset}, {Shape{3}}, {Shape{3}}, {Shape{3}}, variance}, f);
}

KILN_CONFORMANCE_ROW(grad_batch_norm_second, ({"grad:batch_norm"})) {
  // Needs the layout rules (reshape) under create_graph.
  GradInput variance{Shape{2}};
  variance.lo = 0.3;
  variance.hi = 2.0;
  gradcheck(device, "batch_norm second derivative",
            {{Shape{2, 2, 2}}, {Shape{2}}, variance, {Shape{2, 2, 2}}}, [](const Prims& in) {
              const Primitive zeros =
                  detail::full(Shape{2}, 0.0, in[0]->dtype(), in[0]->device(), Kind::Float);
              return grad_of(in[0], in[3], [&](const Primitive& x) {
                return detail::batch_norm(x, in[1], zeros, zeros, in[2], 1e-3);
              });
            });
}

namespace {

struct AttentionCase {
  Shape q, k, v;
  std::optional<Shape> mask, bias;
  AttentionOptions options;
};

// A mask that excludes some keys but never a whole row.
std::vector<double> partial_mask(const Shape& shape) {
  std::vector<double> values(static_cast<std::size_t>(shape.num_elements()));
  const std::int64_t keys = shape[3];
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto key = static_cast<std::int64_t>(i) % keys;
    values[i] = key != 0 && (static_cast<std::int64_t>(i) / keys + key) % 2 == 0 ? 1.0 : 0.0;
  }
  return values;
}

}  // namespace

KILN_CONFORMANCE_ROW(grad_attention, ({"grad:attention"})) {
  const std::vector<AttentionCase> cases = {
      {{1, 2, 3, 2}, {1, 2, 4, 2}, {1, 2, 4, 3}, std::nullopt, std::nullopt, {}},
      {{1, 2, 3, 2},
       {1, 2, 4, 2},
       {1, 2, 4, 2},
       Shape{1, 1, 3, 4},
       Shape{1, 2, 3, 4},
       {.scale = 0.7}},
      {{1, 1, 3, 2},
       {1, 1, 3, 2},
       {1, 1, 3, 2},
       std::nullopt,
       Shape{1, 1, 1, 3},
       {.scale = std::nullopt, .is_causal = true}},
      // Batch and head dims broadcast: q over heads, k and v over the batch.
      {{2, 1, 2, 2}, {1, 2, 3, 2}, {1, 2, 3, 2}, std::nullopt, Shape{2, 1, 2, 1}, {}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const AttentionCase& c = cases[i];
    std::vector<GradInput> inputs = {{c.q}, {c.k, Layout::Transposed}, {c.v}};
    if (c.bias) inputs.push_back({*c.bias});
    const auto f = [&](const Prims& in) {
      std::optional<Primitive> mask, bias;
      if (c.mask) {
        mask = make_primitive(partial_mask(*c.mask), *c.mask, DType::Bool, Layout::Contiguous,
                              in[0]->device());
      }
      if (c.bias) bias = in[3];
      return detail::attention(in[0], in[1], in[2], mask, bias, c.options);
    };
    const std::string what = "attention case " + std::to_string(i);
    if (i == 0) {
      for (Layout layout : kLayouts) {
        inputs[0].layout = layout;
        gradcheck(device, what + " " + layout_name(layout), inputs, f);
      }
    } else {
      gradcheck(device, what, inputs, f);
    }
  }
}

KILN_CONFORMANCE_ROW(grad_attention_second, ({"grad:attention"})) {
  // Needs the layout and masking rules (swap_dims, expand, mask_fill) under create_graph.
  gradcheck(device, "attention second derivative",
            {{Shape{1, 1, 2, 2}}, {Shape{1, 1, 3, 2}}, {Shape{1, 1, 3, 2}}, {Shape{1, 1, 2, 2}}},
            [](const Prims& in) {
              return grad_of(in[0], in[3], [&](const Primitive& q) {
                return detail::attention(q, in[1], in[2], std::nullopt, std::nullopt, {});
              });
            });
}

// Under balanced checkpointing relu's output is not stored: conv and max pooling read it
// recomputed when their rules run.
KILN_CONFORMANCE_ROW(grad_module_balanced, ({"grad:conv", "grad:max_pool", "grad:layer_norm"})) {
  const CheckpointScope scope(CheckpointStrategy::Balanced);
  const PoolOptions pool{.kernel_size = {2}, .stride = {2}, .padding = {0}, .dilation = {1}};
  gradcheck(device, "conv, relu, max_pool, layer_norm (balanced)",
            {{Shape{1, 2, 6}}, {Shape{2, 2, 3}}, {Shape{2}}}, [&](const Prims& in) {
              Primitive y = detail::conv(in[0], in[1], std::nullopt, {}, 1);
              y = detail::max_pool(detail::relu(detail::conv(detail::relu(y), in[1], std::nullopt,
                                                             {.padding = {1}}, 1)),
                                   pool, 1);
              return detail::layer_norm(detail::relu(y), in[2], std::nullopt, 1e-5);
            });
}

}  // namespace kiln::conformance
