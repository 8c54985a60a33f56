// Saving and loading a module's parameters and buffers as safetensors, under their
// PyTorch-style dotted names, so files interchange with PyTorch's state_dict:
//
//   nn::save(model, "mlp.safetensors");
//   Mlp fresh{nn::LinearConfig{784, 128}.init(dev), nn::LinearConfig{128, 10}.init(dev)};
//   nn::load(fresh, "mlp.safetensors");                  // every value replaced from the file
//   nn::load(fresh, "bigger.safetensors", {.allow_unexpected = true});
//   nn::load(encoder, "model.safetensors", {.allow_unexpected = true, .prefix = "bert."});
//   auto bert = nn::from_record(BertConfig{...}, "model.safetensors", dev);  // no random init
//
// Loading is strict by default: every parameter of the module must be in the file with its
// exact shape (ShapeMismatch naming the parameter and both shapes otherwise), a missing one is
// InvalidArgument listing them all with the closest names the file has, and so are names in the
// file the module does not have unless LoadOptions::allow_unexpected is set. Each loaded value
// keeps the current parameter's device, mode and dtype: it lands on the parameter's device (its
// autodiff form if the module is training, tracked again if the parameter was tracked), and a file
// whose dtype differs from the parameter's is converted on load, as PyTorch's load_state_dict
// copies do (an f16 file into an f32 model widens exactly; f32 into f16 rounds to nearest even).
// Only floats convert: an Int or Bool buffer (nn::Buffer<D, Int>) takes its entry in the file's
// own dtype (an i64 entry loads as i64), and an entry of another kind than its slot (a float
// entry for an Int buffer, an integer entry for a parameter or Float buffer) is DTypeMismatch
// naming the slot and both dtypes. Loading checks everything first and replaces nothing when it
// throws.
//
// Counters (nn::Counter, e.g. BatchNorm's num_batches_tracked) are saved as PyTorch saves them,
// int64 tensors of shape []. On load a counter accepts any integer dtype of shape [] (ShapeMismatch
// / DTypeMismatch / InvalidArgument for another shape, a float or a negative count), and a counter
// missing from the file is set to 0 instead of failing, so files written by kiln before it kept
// counters still load (PyTorch also starts num_batches_tracked at 0 for its own older files).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "kiln/nn/init.h"
#include "kiln/nn/module.h"
#include "kiln/record/safetensors.h"

namespace kiln::nn {

struct LoadOptions {
  // Ignore names in the file that the module does not have (e.g. loading a backbone out of a
  // whole model's checkpoint).
  bool allow_unexpected = false;
  // Read only the file's names that start with prefix, without it: {.prefix = "bert."} loads a
  // BertModel-shaped module from a whole BertForMaskedLM checkpoint. Names outside the prefix are
  // not the module's business (never "unexpected").
  std::string prefix{};
  // Then each name (prefix removed) as rename returns it: a checkpoint's "LayerNorm.gamma" can
  // become the module's "norm.weight". An empty result skips the entry; two entries renamed to
  // one name are InvalidArgument naming both.
  std::function<std::string(std::string_view)> rename{};
};

// ---- the non-template work (src/nn/record.cpp) ----
namespace detail {
record::TensorMap to_record(void* module, VisitFn visit);
void load_record(void* module, VisitFn visit, const record::TensorMap& tensors,
                 const LoadOptions& options, std::string_view origin);
// The same, taking the record's tensors over (nothing is copied that need not be).
void load_record(void* module, VisitFn visit, record::TensorMap&& tensors,
                 const LoadOptions& options, std::string_view origin);
}  // namespace detail

// Every parameter and buffer read back to the host, by dotted name.
template <detail::Visitable M>
record::TensorMap to_record(const M& module) {
  return detail::to_record(const_cast<M*>(&module), detail::visit_fn<M>);
}

// Replaces every parameter and buffer of module with the tensor of its name.
template <detail::Visitable M>
void load_record(M& module, const record::TensorMap& tensors, const LoadOptions& options = {}) {
  detail::load_record(&module, detail::visit_fn<M>, tensors, options, "record");
}

// Writes every parameter and buffer to a safetensors file (metadata optional).
template <detail::Visitable M>
void save(const M& module, const std::filesystem::path& path,
          const record::Metadata& metadata = {}) {
  record::save_safetensors(path, to_record(module), metadata);
}

// Replaces every parameter and buffer of module with those of a safetensors file.
template <detail::Visitable M>
void load(M& module, const std::filesystem::path& path, const LoadOptions& options = {}) {
  detail::load_record(&module, detail::visit_fn<M>, record::load_safetensors(path), options,
                      path.string());
}

// A layer or model configuration: `config.init(device)` builds the module (LinearConfig,
// TransformerEncoderConfig, a model's own config).
template <class Config>
concept ModuleConfig = requires(const Config& config, const Device& device) {
  { config.init(device) } -> detail::Visitable;
};

namespace detail {
template <ModuleConfig Config>
auto init_without_drawing(const Config& config, const Device& device) {
  const SkipInit skip;
  return config.init(device);
}
}  // namespace detail

// The module config.init(device) builds, with every value taken from a record instead of drawn:
// init runs under SkipInit (no random draw, the device's generator untouched), then the record
// loads strictly as load_record / load do, so every parameter and buffer must be in it
// (InvalidArgument naming the missing ones and the record's closest names otherwise) with its
// shape (ShapeMismatch) and kind (DTypeMismatch); a Counter it lacks starts at 0, as in load.
// options: allow_unexpected, prefix, rename, as for load.
//
//   nn::Linear dense = nn::from_record(nn::LinearConfig{768, 768}, "dense.safetensors", dev);
//   auto encoder = nn::from_record(config, checkpoint, dev, {.allow_unexpected = true,
//                                                            .prefix = "bert.encoder."});
template <ModuleConfig Config>
auto from_record(const Config& config, const record::TensorMap& tensors, const Device& device,
                 const LoadOptions& options = {}) {
  auto module = detail::init_without_drawing(config, device);
  load_record(module, tensors, options);
  return module;
}

// The same from a safetensors file.
template <ModuleConfig Config>
auto from_record(const Config& config, const std::filesystem::path& path, const Device& device,
                 const LoadOptions& options = {}) {
  auto module = detail::init_without_drawing(config, device);
  load(module, path, options);
  return module;
}

}  // namespace kiln::nn
