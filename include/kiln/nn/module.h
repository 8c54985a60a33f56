// Modules: plain structs of parameters and sub-modules. A module lists its members once, with
// KILN_MODULE, and every generic operation (moving, training mode, counting, printing, saving,
// optimizing) walks them through one visitor, naming each parameter PyTorch-style:
//
//   struct Mlp {
//     nn::Linear hidden, out;
//     KILN_MODULE(hidden, out)
//     Tensor<2> forward(const Tensor<2>& x) const { return
//     out.forward(activation::relu(hidden.forward(x))); }
//   };
//   Mlp model{nn::LinearConfig{784, 128}.init(dev), nn::LinearConfig{128, 10}.init(dev)};
//   nn::named_parameters(model);        // "hidden.weight", "hidden.bias", "out.weight", ...
//   model = nn::train(model);           // parameters on dev.autodiff(), tracked
//
// A member whose checkpoint name differs from its C++ name is listed as KILN_NAMED(member,
// "Name"): `KILN_MODULE(query, key, KILN_NAMED(layer_norm, "LayerNorm"))` names layer_norm's
// parameters "LayerNorm.weight" and "LayerNorm.bias" everywhere (named_parameters, records,
// describe, optimizer state). Buffers may hold integers or bools, kept in their dtype:
//
//   struct Embeddings {
//     nn::Embedding word_embeddings;
//     nn::LayerNorm layer_norm;
//     nn::Buffer<2, Int> position_ids;  // [1, max_positions], i64: never cast, never trained
//     KILN_MODULE(word_embeddings, KILN_NAMED(layer_norm, "LayerNorm"), position_ids)
//   };
//
// Modules are values: a copy shares the parameters' storage until one of them is replaced (an
// optimizer step or a move replaces a parameter in that copy only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/detail/map_macro.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// The rank-independent part of a parameter, as visitors see it.
class ParamSlot {
 public:
  // Trainable parameters get gradients and optimizer updates; buffers (running statistics) are
  // saved and moved with the module but never trained.
  bool trainable() const noexcept { return trainable_; }
  // The kind of tensor the slot holds: Float for a Param, the declared kind for a Buffer.
  Kind kind() const noexcept { return kind_; }
  bool initialized() const noexcept { return primitive_ != nullptr; }
  const Primitive& primitive() const noexcept { return primitive_; }
  std::size_t rank() const noexcept { return rank_; }
  // A new value for the parameter, what `param = tensor` does: it must have the parameter's
  // shape, dtype and device (ShapeMismatch / DTypeMismatch / DeviceMismatch otherwise, naming
  // the parameter when `name` is given, and both values). The parameter keeps its mode: the value
  // lands on the parameter's form of the device (autodiff while the module trains) and becomes a
  // tracked leaf if the parameter was tracked (a tracked value is detached first: a parameter is
  // a leaf). A slot without a value yet takes any value of its rank and kind.
  void assign(Primitive value, std::string_view name = {});
  // Replaces the value with any tensor of the declared rank and kind (ShapeMismatch /
  // DTypeMismatch otherwise), as it is. The explicit path for changing what a parameter is (its
  // shape, dtype, device or mode): nn::to_device, nn::cast, nn::train and nn::valid use it. New
  // values for a parameter go through assign, which checks them.
  void set_primitive(Primitive p);
  // The scheme forward passes fake-quantize the value with (quantization-aware training,
  // nn::prepare_qat), if any: see Param::forward_value.
  const std::optional<QuantScheme>& fake_quant() const noexcept { return fake_quant_; }
  void set_fake_quant(std::optional<QuantScheme> scheme) noexcept { fake_quant_ = scheme; }
  // The value forward passes compute with (Param::forward_value).
  Primitive forward_primitive() const;

 protected:
  ParamSlot(std::size_t rank, bool trainable, Kind kind) noexcept
      : rank_(rank), trainable_(trainable), kind_(kind) {}
  Primitive primitive_;

 private:
  std::size_t rank_;
  bool trainable_;
  Kind kind_;
  std::optional<QuantScheme> fake_quant_;
};

// A trainable tensor of rank D. Assigning a tensor gives it a new value, checked (ParamSlot::
// assign): `linear.weight = Tensor<2>::ones({7, 9}, dev)` needs a Linear(9 -> 7) on dev in its
// dtype. Assigning a Param replaces the parameter itself, unchecked, as assigning whole modules
// does (`model = nn::to_device(model, gpu)`, a layer built anew from its config).
template <std::size_t D>
class Param : public ParamSlot {
 public:
  Param() noexcept : ParamSlot(D, true, Kind::Float) {}
  explicit Param(const Tensor<D>& value) : ParamSlot(D, true, Kind::Float) {
    primitive_ = value.primitive();
  }
  Tensor<D> val() const { return Tensor<D>::from_primitive(primitive_); }
  operator Tensor<D>() const { return val(); }  // NOLINT: a parameter reads as its tensor
  // The value a forward pass computes with: val(), or under quantization-aware training
  // (nn::prepare_qat) val().fake_quantize(scheme), whose gradient reaches val() unchanged. The
  // layers of kiln/nn read their weights through it; a module's own products may too.
  Tensor<D> forward_value() const { return Tensor<D>::from_primitive(forward_primitive()); }
  Param& operator=(const Tensor<D>& value) {
    assign(value.primitive());
    return *this;
  }
};

// Module state that is saved and moved but never trained, of rank D and kind K: running
// statistics (Float, the default), token position ids (`Buffer<1, Int>`), masks (`Buffer<2,
// Bool>`). A Float buffer follows the module's dtype (nn::cast); an Int or Bool buffer keeps its
// own dtype through nn::cast and records (an i64 entry loads as i64), and moves with the module.
template <std::size_t D, TensorKind K = Float>
class Buffer : public ParamSlot {
 public:
  Buffer() noexcept : ParamSlot(D, false, K::kind) {}
  explicit Buffer(const Tensor<D, K>& value) : ParamSlot(D, false, K::kind) {
    primitive_ = value.primitive();
  }
  Tensor<D, K> val() const { return Tensor<D, K>::from_primitive(primitive_); }
  operator Tensor<D, K>() const { return val(); }  // NOLINT
  Buffer& operator=(const Tensor<D, K>& value) {   // checked as a Param's
    assign(value.primitive());
    return *this;
  }
};

// A non-negative integer count kept on the host, for module state that PyTorch keeps as an
// int64 scalar tensor (BatchNorm's num_batches_tracked). It is not a tensor on purpose: no device
// needs it, and a layer reads it each forward pass (e.g. for a 1/n averaging factor) without a
// device round trip. Records save it as an I64 tensor of shape [] under its dotted name, as
// PyTorch's state_dict does; it is not a parameter (named_parameters, optimizers and device moves
// skip it) and, like a Buffer, a copy of the module holds its own value from then on.
class Counter {
 public:
  Counter() noexcept = default;
  // InvalidArgument if value is negative.
  explicit Counter(std::int64_t value) { set(value); }
  std::int64_t value() const noexcept { return value_; }
  void set(std::int64_t value);
  Counter& operator++() noexcept {
    ++value_;
    return *this;
  }

 private:
  std::int64_t value_ = 0;
};

// Receives every parameter of a module with its dotted name, and every counter through
// visit_counter (ignored unless a visitor overrides it: most visitors only care for tensors).
class Visitor {
 public:
  virtual ~Visitor() = default;
  virtual void visit(const std::string& name, ParamSlot& slot) = 0;
  virtual void visit_counter(const std::string& /*name*/, Counter& /*counter*/) {}
};

namespace detail {

std::string join_name(std::string_view prefix, std::string_view name);

// KILN_NAMED's name: a string literal (a name computed at run time would differ between the
// saving and the loading program).
template <std::size_t N>
consteval std::string_view member_name(const char (&name)[N]) {
  static_assert(N > 1, "KILN_NAMED: the name must not be empty");
  return {name, N - 1};
}

template <class M>
concept Visitable = requires(M& m, Visitor& v) {
  m.visit(v, std::string_view{});
};

inline void visit_member(Visitor& v, std::string_view prefix, std::string_view name,
                         ParamSlot& slot) {
  if (slot.initialized()) v.visit(join_name(prefix, name), slot);
}
inline void visit_member(Visitor& v, std::string_view prefix, std::string_view name,
                         Counter& counter) {
  v.visit_counter(join_name(prefix, name), counter);
}
template <Visitable M>
void visit_member(Visitor& v, std::string_view prefix, std::string_view name, M& module) {
  module.visit(v, join_name(prefix, name));
}
template <class T>
void visit_member(Visitor& v, std::string_view prefix, std::string_view name,
                  std::optional<T>& member) {
  if (member) visit_member(v, prefix, name, *member);
}
template <class T>
void visit_member(Visitor& v, std::string_view prefix, std::string_view name,
                  std::vector<T>& members) {
  const std::string base = join_name(prefix, name);
  for (std::size_t i = 0; i < members.size(); ++i) {
    visit_member(v, base, std::to_string(i), members[i]);
  }
}

}  // namespace detail

// Lists a module's parameters and sub-modules (members of type Param, Buffer, Counter, another
// module, std::optional or std::vector of those); names are the member names, or the name given
// with KILN_NAMED(member, "name") (a string literal) for a member saved under another name.
#define KILN_NAMED(member, name) (member, name)
// Each entry of the list is either `member` or KILN_NAMED's `(member, name)`: KILN_MEMBER_PROBE
// before a parenthesised pair expands to a comma, which moves KILN_VISIT_NAMED_MEMBER into
// the position KILN_MEMBER_SECOND picks; before a plain name it stays one argument.
#define KILN_MEMBER_PROBE(...) ~, KILN_VISIT_NAMED_MEMBER
#define KILN_MEMBER_SECOND_(first, second, ...) second
#define KILN_MEMBER_SECOND(...) KILN_MEMBER_SECOND_(__VA_ARGS__)
#define KILN_VISIT_MEMBER(entry) \
  KILN_MEMBER_SECOND(KILN_MEMBER_PROBE entry, KILN_VISIT_PLAIN_MEMBER, ~)(entry)
#define KILN_VISIT_PLAIN_MEMBER(member) \
  ::kiln::nn::detail::visit_member(visitor, prefix, #member, member)
#define KILN_VISIT_NAMED_MEMBER(pair) KILN_VISIT_NAMED_MEMBER_ pair
#define KILN_VISIT_NAMED_MEMBER_(member, name) \
  ::kiln::nn::detail::visit_member(visitor, prefix, ::kiln::nn::detail::member_name(name), member)
#define KILN_MODULE(...)                                                             \
  void visit(::kiln::nn::Visitor& visitor, std::string_view prefix = {}) {           \
    KILN_MAP_EACH(KILN_VISIT_MEMBER, __VA_ARGS__);                                   \
  }                                                                                  \
  void visit(::kiln::nn::Visitor& visitor, std::string_view prefix = {}) const {     \
    const_cast<std::remove_cvref_t<decltype(*this)>&>(*this).visit(visitor, prefix); \
  }

struct NamedParam {
  std::string name;
  Primitive value;
  bool trainable;
};

// ---- the non-template work behind the module functions (src/nn/module.cpp) ----
namespace detail {
using VisitFn = void (*)(void* module, Visitor& visitor);
std::vector<NamedParam> named_parameters(void* module, VisitFn visit);
void to_device(void* module, VisitFn visit, const Device& device);
void cast(void* module, VisitFn visit, DType dtype);
void set_tracking(void* module, VisitFn visit, bool track);
std::string describe(void* module, VisitFn visit, std::string_view type_name);
template <class M>
void visit_fn(void* module, Visitor& visitor) {
  static_cast<M*>(module)->visit(visitor, std::string_view{});
}
}  // namespace detail

// Every parameter and buffer, in declaration order, with its dotted name.
template <detail::Visitable M>
std::vector<NamedParam> named_parameters(const M& module) {
  return detail::named_parameters(const_cast<M*>(&module), detail::visit_fn<M>);
}

// The number of trainable scalars.
template <detail::Visitable M>
std::int64_t num_params(const M& module) {
  std::int64_t total = 0;
  for (const NamedParam& p : named_parameters(module)) {
    if (p.trainable) total += p.value->shape().num_elements();
  }
  return total;
}

// The module with every parameter moved to device (tracking kept where the device allows).
// Slots that share one tensor (tied weights) still share one after the move.
template <detail::Visitable M>
M to_device(M module, const Device& device) {
  detail::to_device(&module, detail::visit_fn<M>, device);
  return module;
}

// The module with every parameter and Float buffer cast to a float dtype, in the same mode
// (tracked parameters are tracked leaves again), tied slots still tied: an f64 copy for gradient
// checks, an f16 one for inference. Int and Bool buffers keep their dtype. DTypeMismatch for a
// dtype that is not float; UnsupportedDType where a parameter's device cannot store it (the
// module passed in is unchanged either way).
template <detail::Visitable M>
M cast(M module, DType dtype) {
  detail::cast(&module, detail::visit_fn<M>, dtype);
  return module;
}

// nn::cast under the name of PyTorch's `module.to(dtype)`: `nn::to_dtype(bert, DType::F16)`.
template <detail::Visitable M>
M to_dtype(M module, DType dtype) {
  return cast(std::move(module), dtype);
}

// Training mode: parameters on the autodiff form of their device, trainable ones tracked.
template <detail::Visitable M>
M train(M module) {
  detail::set_tracking(&module, detail::visit_fn<M>, true);
  return module;
}

// Validation mode: parameters on the plain device, untracked (no graph is recorded).
template <detail::Visitable M>
M valid(M module) {
  detail::set_tracking(&module, detail::visit_fn<M>, false);
  return module;
}

// A copy of the module on device, in the same mode (training or not) as the original.
template <detail::Visitable M>
M fork(const M& module, const Device& device) {
  return to_device(module, device);
}

// A readable summary: one line per parameter (name, shape, dtype, device) and counter (name,
// value), and the total.
template <detail::Visitable M>
std::string describe(const M& module, std::string_view type_name = "Module") {
  return detail::describe(const_cast<M*>(&module), detail::visit_fn<M>, type_name);
}

}  // namespace kiln::nn
