#include "kiln/nn/module.h"

#include <sstream>

#include "kiln/detail/format.h"

namespace kiln::nn {

void ParamSlot::set_primitive(Primitive p) {
  // Rank and kind: a parameter holds a float tensor of its declared rank.
  kiln::detail::check_primitive(p, rank_, Kind::Float, "Param::set");
  primitive_ = std::move(p);
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
  for_each(module, visit, [&](const std::string&, ParamSlot& slot) {
    const Primitive& p = slot.primitive();
    const bool tracked = kiln::detail::is_require_grad(p);
    // Keep the module's mode: a tracked parameter stays tracked where the device records
    // gradients, and the device's autodiff flag follows the parameter's.
    const Device target = p->device().is_autodiff() ? device.autodiff() : device.without_autodiff();
    Primitive moved = kiln::detail::to_device(kiln::detail::detach(p), target);
    if (tracked) moved = kiln::detail::require_grad(std::move(moved), true);
    slot.set_primitive(std::move(moved));
  });
}

void set_tracking(void* module, VisitFn visit, bool track) {
  for_each(module, visit, [&](const std::string&, ParamSlot& slot) {
    const Primitive& p = slot.primitive();
    if (track) {
      Primitive on = kiln::detail::to_device(kiln::detail::detach(p), p->device().autodiff());
      if (slot.trainable()) on = kiln::detail::require_grad(std::move(on), true);
      slot.set_primitive(std::move(on));
    } else {
      slot.set_primitive(kiln::detail::inner(kiln::detail::detach(p)));
    }
  });
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
