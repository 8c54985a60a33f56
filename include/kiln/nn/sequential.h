// Sequential<Layers...>: modules applied one after another, the output of each feeding the
// next. Its parameters are named by position, as PyTorch's nn.Sequential ("0.weight",
// "2.bias", ...; stateless layers take a position but have no parameters). The layer types are
// template arguments, so each forward is checked at compile time and may change the rank:
//
//   auto net = nn::Sequential(
//       nn::Conv2dConfig{.in_channels = 1, .out_channels = 8, .kernel_size = {3, 3}}.init(dev),
//       nn::Relu{}, nn::MaxPool2d{.kernel_size = {2, 2}}, nn::Flatten{},
//       nn::LinearConfig{8 * 13 * 13, 10}.init(dev));
//   Tensor<2> logits = net.forward(images);   // [N, 1, 28, 28] -> [N, 10]
//   nn::Linear& head = net.get<4>();
//
// Any type with a const `forward` taking the previous layer's output and a `visit` (KILN_MODULE,
// KILN_STATELESS_MODULE or another Sequential) can be a layer. A run-time list of layers of one
// type is a std::vector member of a module instead (KILN_MODULE names them "name.0", ...).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "kiln/nn/module.h"
#include "kiln/nn/stateless.h"

namespace kiln::nn {

template <class... Layers>
struct Sequential {
  static_assert(sizeof...(Layers) >= 1, "a Sequential needs at least one layer");
  std::tuple<Layers...> layers;

  Sequential() = default;
  explicit Sequential(Layers... ls) : layers(std::move(ls)...) {}

  static constexpr std::size_t size() noexcept { return sizeof...(Layers); }
  template <std::size_t I>
  auto& get() noexcept {
    return std::get<I>(layers);
  }
  template <std::size_t I>
  const auto& get() const noexcept {
    return std::get<I>(layers);
  }

  template <class Input>
  auto forward(const Input& x) const {
    return forward_from<0>(x);
  }

  void visit(Visitor& visitor, std::string_view prefix = {}) {
    visit_each(visitor, prefix, std::index_sequence_for<Layers...>{});
  }
  void visit(Visitor& visitor, std::string_view prefix = {}) const {
    const_cast<Sequential&>(*this).visit(visitor, prefix);
  }

 private:
  template <std::size_t I, class Input>
  auto forward_from(const Input& x) const {
    if constexpr (I + 1 == sizeof...(Layers)) {
      return std::get<I>(layers).forward(x);
    } else {
      return forward_from<I + 1>(std::get<I>(layers).forward(x));
    }
  }
  template <std::size_t... I>
  void visit_each(Visitor& visitor, std::string_view prefix, std::index_sequence<I...>) {
    (detail::visit_member(visitor, prefix, std::to_string(I), std::get<I>(layers)), ...);
  }
};

template <class... Layers>
Sequential(Layers...) -> Sequential<Layers...>;

// [N, d1, d2, ...] -> [N, d1 * d2 * ...] (PyTorch's nn.Flatten with its defaults), the bridge
// from convolutional features to linear layers.
struct Flatten {
  KILN_STATELESS_MODULE
  template <std::size_t D>
  requires(D >= 2) Tensor<2> forward(const Tensor<D>& x)
  const { return x.template flatten<2>(1, static_cast<std::int64_t>(D) - 1); }
};

}  // namespace kiln::nn
