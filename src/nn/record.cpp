#include "kiln/nn/record.h"

#include <set>

#include "kiln/autodiff.h"
#include "kiln/detail/format.h"

namespace kiln::nn::detail {
namespace {

struct NamedSlot {
  std::string name;
  ParamSlot* slot;
};

class CollectSlots final : public Visitor {
 public:
  void visit(const std::string& name, ParamSlot& slot) override { out.push_back({name, &slot}); }
  std::vector<NamedSlot> out;
};

std::vector<NamedSlot> collect(void* module, VisitFn visit) {
  CollectSlots collector;
  visit(module, collector);
  return std::move(collector.out);
}

// A readable list for messages; a checkpoint of another model can differ in thousands of names.
std::string list_names(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 10;
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < kShown; ++i) {
    out += (i ? ", '" : "'") + names[i] + "'";
  }
  if (names.size() > kShown) out += kiln::detail::concat(" and ", names.size() - kShown, " more");
  return out;
}

}  // namespace

record::TensorMap to_record(void* module, VisitFn visit) {
  const std::vector<NamedSlot> slots = collect(module, visit);
  kiln::detail::Prims values;
  values.reserve(slots.size());
  for (const NamedSlot& s : slots) values.push_back(s.slot->primitive());
  std::vector<TensorData> data = kiln::detail::read_many(std::move(values));
  record::TensorMap out;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (!out.emplace(slots[i].name, std::move(data[i])).second) {
      kiln::detail::fail<InvalidArgument>("nn::save", "two parameters are named '", slots[i].name,
                                          "'");
    }
  }
  return out;
}

void load_record(void* module, VisitFn visit, const record::TensorMap& tensors,
                 const LoadOptions& options, std::string_view origin) {
  constexpr std::string_view kOp = "nn::load";
  const std::vector<NamedSlot> slots = collect(module, visit);

  std::vector<std::string> missing;
  std::set<std::string> known;
  for (const NamedSlot& s : slots) {
    known.insert(s.name);
    if (!tensors.contains(s.name)) missing.push_back(s.name);
  }
  if (!missing.empty()) {
    kiln::detail::fail<InvalidArgument>(
        kOp, origin, ": ", missing.size(),
        " parameter(s) of the module are not in the record: ", list_names(missing));
  }
  if (!options.allow_unexpected) {
    std::vector<std::string> unexpected;
    for (const auto& [name, data] : tensors) {
      if (!known.contains(name)) unexpected.push_back(name);
    }
    if (!unexpected.empty()) {
      kiln::detail::fail<InvalidArgument>(
          kOp, origin, ": ", unexpected.size(),
          " name(s) in the record are not in the module: ", list_names(unexpected),
          " (LoadOptions::allow_unexpected ignores them)");
    }
  }
  std::vector<std::string> mismatches;
  for (const NamedSlot& s : slots) {
    const Shape& stored = tensors.at(s.name).shape();
    const Shape& expected = s.slot->primitive()->shape();
    if (!(stored == expected)) {
      mismatches.push_back(kiln::detail::concat("'", s.name, "' is ", expected.to_string(),
                                                " in the module but ", stored.to_string(),
                                                " in the record"));
    }
  }
  if (!mismatches.empty()) {
    std::string joined;
    for (const std::string& m : mismatches) joined += (joined.empty() ? "" : "; ") + m;
    kiln::detail::fail<ShapeMismatch>(kOp, origin, ": parameter shapes differ: ", joined);
  }

  // Build every new value before replacing any, so a failure leaves the module as it was.
  std::vector<Primitive> fresh;
  fresh.reserve(slots.size());
  for (const NamedSlot& s : slots) {
    const Primitive& current = s.slot->primitive();
    const TensorData& stored = tensors.at(s.name);
    TensorData data =
        stored.dtype() == current->dtype() ? stored : stored.convert(current->dtype());
    Primitive value =
        kiln::detail::from_data(std::move(data), current->device(), Kind::Float, s.slot->rank());
    if (kiln::detail::is_require_grad(current)) {
      value = kiln::detail::require_grad(std::move(value), true);
    }
    fresh.push_back(std::move(value));
  }
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i].slot->set_primitive(std::move(fresh[i]));
}

}  // namespace kiln::nn::detail
