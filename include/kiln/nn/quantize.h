// Post-training quantization of a module's weights (kiln/quant.h has the schemes):
//
//   auto q8 = nn::quantize(nn::valid(model), quant_scheme(QuantScheme::Kind::Q8_0));
//   Tensor<3> logits = q8.forward(ids);   // linear layers and lookups read the weights' blocks
//   std::vector<nn::QuantizedWeight> report;
//   auto q4 = nn::quantize(model, quant_scheme(QuantScheme::Kind::Q4_K),
//                          {.fallback = quant_scheme(QuantScheme::Kind::Q5_0), .report = &report});
//
// Every trainable 2-D parameter becomes a QFloat tensor (Tensor::quantize): the weights of
// Linear, Embedding, MultiheadAttention's projections and the RNN layers, whose rows run along
// the product's inner dim (or hold an embedding each), so forward passes multiply with the
// blocks and look rows up without decoding the table. Biases, norms, convolution kernels and
// buffers stay as they are. A weight whose rows are not a whole number of the scheme's blocks
// (a k-quant's 256 values) takes options.fallback where its blocks fit (llama.cpp gives Q4_K's
// misfits Q5_0), and otherwise stays float. Quantized parameters are constants: nn::train leaves
// them untracked (they take no gradient), nn::cast leaves them quantized, nn::to_device moves
// their blocks. Records: nn::save writes safetensors, which hold no QFloat (UnsupportedDType);
// nn::to_record gives the blocks, which record::save_gguf writes and nn::load_record takes
// back (into a QFloat parameter as they are, into a float one dequantized).
//
// Quantization-aware training (fake quantization, straight-through gradients):
//   auto qat = nn::prepare_qat(model, quant_scheme(QuantScheme::Kind::Q4_K));
//   ... train qat as any model (nn::train, an optimizer, Learner) ...
//   auto q4 = nn::quantize(nn::valid(qat), quant_scheme(QuantScheme::Kind::Q4_K));
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/quant.h"

namespace kiln::nn {

// Which scheme a weight took (nullopt: it stayed float), for QuantizeOptions::report.
struct QuantizedWeight {
  std::string name;
  Shape shape;
  std::optional<QuantScheme> scheme;
};

struct QuantizeOptions {
  // The scheme of a weight whose rows do not hold whole blocks of the main scheme.
  std::optional<QuantScheme> fallback = std::nullopt;
  // When set, receives one entry per 2-D trainable parameter, in declaration order (tied
  // parameters once).
  std::vector<QuantizedWeight>* report = nullptr;
};

namespace detail {
void quantize(void* module, VisitFn visit, const QuantScheme& scheme,
              const QuantizeOptions& options);
void prepare_qat(void* module, VisitFn visit, const QuantScheme& scheme,
                 const QuantizeOptions& options);
}  // namespace detail

// The module with its 2-D weights quantized in scheme (InvalidArgument for a malformed scheme,
// UnsupportedOperation for one kiln cannot encode; the module passed in is unchanged on error).
template <detail::Visitable M>
M quantize(M module, const QuantScheme& scheme, const QuantizeOptions& options = {}) {
  detail::quantize(&module, detail::visit_fn<M>, scheme, options);
  return module;
}

// Quantization-aware training: the module with the weights nn::quantize would quantize (the same
// choice of scheme and fallback, the same report) marked for fake quantization. They stay float
// parameters that train as before, but forward passes see them as their blocks would decode
// (Param::forward_value, Tensor::fake_quantize), and their gradients pass straight through to
// the float values. nn::quantize of the trained module then encodes each marked weight in the
// scheme it was trained for. The layers of kiln/nn read weights through forward_value; a
// module's own products on its Params take part when they do too.
template <detail::Visitable M>
M prepare_qat(M module, const QuantScheme& scheme, const QuantizeOptions& options = {}) {
  detail::prepare_qat(&module, detail::visit_fn<M>, scheme, options);
  return module;
}

}  // namespace kiln::nn
