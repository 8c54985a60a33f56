#include "kiln/nn/module.h"

#include <map>
#include <set>
#include <sstream>

#include "kiln/autodiff.h"
#include "kiln/detail/format.h"
#include "kiln/nn/quantize.h"

namespace kiln::nn {

using kiln::detail::fail;

namespace {

// "parameter 'fc.weight'" when the name is known, "the parameter" otherwise.
std::string which(bool trainable, std::string_view name) {
  const char* what = trainable ? "parameter" : "buffer";
  if (name.empty()) return kiln::detail::concat("the ", what);
  return kiln::detail::concat(what, " '", name, "'");
}

}  // namespace

void ParamSlot::set_primitive(Primitive p) {
  // Rank and kind: a parameter holds a float tensor of its declared rank, a buffer one of its
  // declared rank and kind.
  kiln::detail::check_primitive(p, rank_, kind_, trainable_ ? "Param::set" : "Buffer::set");
  primitive_ = std::move(p);
}

void ParamSlot::assign(Primitive value, std::string_view name) {
  const char* op = trainable_ ? "Param::assign" : "Buffer::assign";
  kiln::detail::check_primitive(value, rank_, kind_, op);
  if (!initialized()) {
    primitive_ = std::move(value);
    return;
  }
  const Primitive& current = primitive_;
  if (value->shape() != current->shape()) {
    fail<ShapeMismatch>(op, which(trainable_, name), " has shape ", current->shape().to_string(),
                        " but the new value has shape ", value->shape().to_string());
  }
  if (value->dtype() != current->dtype()) {
    fail<DTypeMismatch>(op, which(trainable_, name), " is ", dtype_name(current->dtype()),
                        " but the new value is ", dtype_name(value->dtype()),
                        kind_ == Kind::Float ? "; cast the value, or the whole module with nn::cast"
                                             : "; cast the value");
  }
  const Device device = current->device();
  if (!value->device().same_hardware(device)) {
    fail<DeviceMismatch>(op, which(trainable_, name), " is on ", device.to_string(),
                         " but the new value is on ", value->device().to_string(),
                         "; move the value, or the whole module with nn::to_device");
  }
  // The parameter's mode, whatever the value's: a tracked leaf (a value that is one already is
  // kept as it is, so tied slots stay tied), plain, or an untracked constant on the autodiff
  // device (a buffer of a training module).
  if (kiln::detail::is_require_grad(current)) {
    primitive_ =
        kiln::detail::require_grad(kiln::detail::to_device(std::move(value), device), true);
  } else {
    primitive_ = kiln::detail::to_device(kiln::detail::detach(std::move(value)), device);
  }
}

Primitive ParamSlot::forward_primitive() const {
  if (!fake_quant_ || primitive_->dtype() == DType::QFloat) return primitive_;
  return kiln::detail::fake_quantize(primitive_, *fake_quant_);
}

void Counter::set(std::int64_t value) {
  if (value < 0)
    kiln::detail::fail<InvalidArgument>("Counter::set", "count ", value, " is negative");
  value_ = value;
}

namespace detail {
namespace {

class Collect final : public Visitor {
 public:
  void visit(const std::string& name, ParamSlot& slot) override {
    out.push_back({name, slot.primitive(), slot.trainable()});
  }
  std::vector<NamedParam> out;
};

template <class F>
class ForEach final : public Visitor {
 public:
  explicit ForEach(F f) : f_(std::move(f)) {}
  void visit(const std::string& name, ParamSlot& slot) override { f_(name, slot); }

 private:
  F f_;
};

template <class F>
void for_each(void* module, VisitFn visit, F f) {
  ForEach<F> visitor(std::move(f));
  visit(module, visitor);
}

// Gives every slot the value make(name, slot) computes, through set_primitive (the explicit path:
// the new values may differ in device, dtype or mode). A tensor shared by several slots (tied
// weights) is made once and stays shared; every value is made before any slot changes, so a
// failure leaves the module as it was.
template <class Make>
void replace_each(void* module, VisitFn visit, Make make) {
  std::vector<ParamSlot*> slots;
  std::vector<Primitive> values;
  std::map<const TensorPrimitive*, Primitive> made;
  for_each(module, visit, [&](const std::string& name, ParamSlot& slot) {
    auto [it, fresh] = made.try_emplace(slot.primitive().get());
    if (fresh) it->second = make(name, slot);
    slots.push_back(&slot);
    values.push_back(it->second);
  });
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i]->set_primitive(std::move(values[i]));
}

// values (untracked) on device, in p's mode: on the device's autodiff form if p is on one, a
// tracked leaf if p is tracked.
Primitive in_mode_of(const Primitive& p, Primitive values, const Device& device) {
  const Device target = p->device().is_autodiff() ? device.autodiff() : device.without_autodiff();
  Primitive placed = kiln::detail::to_device(std::move(values), target);
  if (kiln::detail::is_require_grad(p))
    placed = kiln::detail::require_grad(std::move(placed), true);
  return placed;
}

}  // namespace

std::string join_name(std::string_view prefix, std::string_view name) {
  if (prefix.empty()) return std::string(name);
  std::string out;
  out.reserve(prefix.size() + 1 + name.size());
  out.append(prefix).append(".").append(name);
  return out;
}

std::vector<NamedParam> named_parameters(void* module, VisitFn visit) {
  Collect collect;
  visit(module, collect);
  return std::move(collect.out);
}

void to_device(void* module, VisitFn visit, const Device& device) {
  // Keep the module's mode: a tracked parameter stays tracked where the device records
  // gradients, and the device's autodiff flag follows the parameter's.
  replace_each(module, visit, [&](const std::string&, const ParamSlot& slot) {
    const Primitive& p = slot.primitive();
    return in_mode_of(p, kiln::detail::detach(p), device);
  });
}

void cast(void* module, VisitFn visit, DType dtype) {
  if (!is_float(dtype)) {
    fail<DTypeMismatch>("nn::cast", "parameters are float tensors; ", dtype_name(dtype),
                        " is not a float dtype");
  }
  replace_each(module, visit, [&](const std::string&, const ParamSlot& slot) {
    const Primitive& p = slot.primitive();
    // Integer and bool buffers (token ids, masks) mean the same in any float model; quantized
    // weights keep their blocks (nn::quantize).
    if (slot.kind() != Kind::Float || p->dtype() == DType::QFloat) return p;
    return in_mode_of(p, kiln::detail::cast(kiln::detail::detach(p), dtype), p->device());
  });
}

void set_tracking(void* module, VisitFn visit, bool track) {
  replace_each(module, visit, [&](const std::string&, const ParamSlot& slot) {
    const Primitive& p = slot.primitive();
    if (!track) return kiln::detail::inner(kiln::detail::detach(p));
    Primitive on = kiln::detail::to_device(kiln::detail::detach(p), p->device().autodiff());
    // A quantized weight is a constant (it has no gradient).
    if (slot.trainable() && p->dtype() != DType::QFloat) {
      on = kiln::detail::require_grad(std::move(on), true);
    }
    return on;
  });
}

namespace {

// The schemes nn::quantize and nn::prepare_qat give: checked, and for each trainable 2-D float
// parameter the scheme whose blocks its rows hold whole (the main one, else the fallback).
class SchemeChoice {
 public:
  SchemeChoice(const QuantScheme& scheme, const QuantizeOptions& options, std::string_view op)
      : schemes_{scheme, options.fallback.value_or(scheme)} {
    for (const QuantScheme& s : schemes_) {
      check_quant_scheme(s, op);
      if (!can_quantize(s)) {
        fail<UnsupportedOperation>(op, "kiln decodes ", quant_kind_name(s.kind),
                                   " but does not encode it");
      }
    }
  }
  static bool eligible(const ParamSlot& slot) {
    return slot.trainable() && slot.rank() == 2 && is_float(slot.primitive()->dtype());
  }
  // Rows of `length` values hold whole blocks of s (int8_channel's block is the row).
  std::optional<QuantScheme> operator()(const ParamSlot& slot) const {
    const std::int64_t length = slot.primitive()->shape()[1];
    for (const QuantScheme& s : schemes_) {
      if (length > 0 && (s.kind == QuantScheme::Kind::Int8Channel || length % s.block_size == 0)) {
        return s;
      }
    }
    return std::nullopt;
  }

 private:
  QuantScheme schemes_[2];  // the scheme, then the fallback (the scheme again without one)
};

// nn::prepare_qat's marks: each eligible parameter takes the scheme `choose` gives it, reported
// once per tensor; without a choice, every mark is cleared (nn::quantize's blocks need none).
class MarkFakeQuant final : public Visitor {
 public:
  MarkFakeQuant(const SchemeChoice* choose, std::vector<QuantizedWeight>* report)
      : choose_(choose), report_(report) {}
  void visit(const std::string& name, ParamSlot& slot) override {
    if (choose_ == nullptr) return slot.set_fake_quant({});
    if (!SchemeChoice::eligible(slot)) return;
    slot.set_fake_quant((*choose_)(slot));
    if (seen_.insert(slot.primitive().get()).second) {
      report_->push_back({name, slot.primitive()->shape(), slot.fake_quant()});
    }
  }

 private:
  const SchemeChoice* choose_;
  std::vector<QuantizedWeight>* report_;
  std::set<const TensorPrimitive*> seen_;
};

}  // namespace

void quantize(void* module, VisitFn visit, const QuantScheme& scheme,
              const QuantizeOptions& options) {
  const SchemeChoice choose(scheme, options, "nn::quantize");
  std::vector<QuantizedWeight> report;
  replace_each(module, visit, [&](const std::string& name, const ParamSlot& slot) {
    const Primitive& p = slot.primitive();
    if (!SchemeChoice::eligible(slot)) return p;
    // A weight trained with fake quantization takes the scheme it was trained for.
    const std::optional<QuantScheme> chosen = slot.fake_quant() ? slot.fake_quant() : choose(slot);
    report.push_back({name, p->shape(), chosen});
    if (!chosen) return p;
    return kiln::detail::quantize(kiln::detail::detach(p), *chosen);
  });
  MarkFakeQuant clear(nullptr, nullptr);
  visit(module, clear);
  if (options.report != nullptr) *options.report = std::move(report);
}

void prepare_qat(void* module, VisitFn visit, const QuantScheme& scheme,
                 const QuantizeOptions& options) {
  const SchemeChoice choose(scheme, options, "nn::prepare_qat");
  std::vector<QuantizedWeight> report;
  MarkFakeQuant mark(&choose, &report);
  visit(module, mark);
  if (options.report != nullptr) *options.report = std::move(report);
}

std::string describe(void* module, VisitFn visit, std::string_view type_name) {
  std::ostringstream out;
  std::int64_t trainable = 0;
  std::int64_t buffers = 0;
  out << type_name << " {\n";
  // Counters are listed in declaration order with the tensors, so one visitor prints both.
  struct Describe final : Visitor {
    std::ostringstream* out;
    std::int64_t* trainable;
    std::int64_t* buffers;
    void visit(const std::string& name, ParamSlot& slot) override {
      const Primitive& p = slot.primitive();
      *out << "  " << name << ": " << p->shape().to_string() << " " << dtype_name(p->dtype())
           << " on " << p->device().to_string() << (slot.trainable() ? "" : " (buffer)") << "\n";
      (slot.trainable() ? *trainable : *buffers) += p->shape().num_elements();
    }
    void visit_counter(const std::string& name, Counter& counter) override {
      *out << "  " << name << ": " << counter.value() << " (counter)\n";
    }
  } describer;
  describer.out = &out;
  describer.trainable = &trainable;
  describer.buffers = &buffers;
  visit(module, describer);
  out << "}  " << trainable << " trainable parameters";
  if (buffers > 0) out << ", " << buffers << " buffer values";
  return out.str();
}

}  // namespace detail
}  // namespace kiln::nn
