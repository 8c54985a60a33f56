// KILN_STATELESS_MODULE: the visit members of a module without parameters (activations, pools,
// dropout, flatten), so it can sit in KILN_MODULE lists and in Sequential like any other module
// (KILN_MODULE needs at least one member).
//
//   struct Square {
//     KILN_STATELESS_MODULE
//     template <std::size_t D> Tensor<D> forward(const Tensor<D>& x) const { return x * x; }
//   };
#pragma once

#include <string_view>

#include "kiln/nn/module.h"

#define KILN_STATELESS_MODULE                                \
  void visit(::kiln::nn::Visitor&, std::string_view = {}) {} \
  void visit(::kiln::nn::Visitor&, std::string_view = {}) const {}
