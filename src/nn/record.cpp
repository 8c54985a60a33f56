#include "kiln/nn/record.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include "kiln/autodiff.h"
#include "kiln/detail/format.h"

namespace kiln::nn::detail {
namespace {

struct NamedSlot {
  std::string name;
  ParamSlot* slot;
};

struct NamedCounter {
  std::string name;
  Counter* counter;
};

class CollectSlots final : public Visitor {
 public:
  void visit(const std::string& name, ParamSlot& slot) override { out.push_back({name, &slot}); }
  void visit_counter(const std::string& name, Counter& counter) override {
    counters.push_back({name, &counter});
  }
  std::vector<NamedSlot> out;
  std::vector<NamedCounter> counters;
};

CollectSlots collect(void* module, VisitFn visit) {
  CollectSlots collector;
  visit(module, collector);
  return collector;
}

// A counter's value from its record entry: PyTorch writes an int64 tensor of shape []; any
// integer dtype of one element and shape [] is read (ShapeMismatch / DTypeMismatch otherwise).
std::int64_t counter_value(std::string_view op, std::string_view origin, const std::string& name,
                           const TensorData& stored) {
  if (stored.shape().rank() != 0) {
    kiln::detail::fail<ShapeMismatch>(op, origin, ": counter '", name, "' is ",
                                      stored.shape().to_string(),
                                      " in the record but a count is a scalar of shape []");
  }
  if (!is_int(stored.dtype())) {
    kiln::detail::fail<DTypeMismatch>(op, origin, ": counter '", name, "' is ",
                                      dtype_name(stored.dtype()),
                                      " in the record but a count is an integer");
  }
  // A U64 count beyond int64 would not survive the conversion, so it is refused before it.
  const bool too_large = stored.dtype() == DType::U64 &&
                         stored.to_vec<std::uint64_t>()[0] > static_cast<std::uint64_t>(INT64_MAX);
  const std::int64_t value = too_large ? -1 : stored.convert(DType::I64).to_vec<std::int64_t>()[0];
  if (value < 0) {
    kiln::detail::fail<InvalidArgument>(op, origin, ": counter '", name, "' holds ",
                                        stored.to_string(), ", not a count in [0, 2^63)");
  }
  return value;
}

// Whether a record entry of dtype stored can fill a slot of kind: a float slot takes any float
// (converted to its dtype, as PyTorch's copy_ does) or quantized blocks (dequantized), an Int or
// Bool slot an entry of its kind.
bool loads_into(DType stored, Kind kind) {
  switch (kind) {
    case Kind::Float:
      return is_float(stored) || stored == DType::QFloat;
    case Kind::Int:
      return is_int(stored);
    case Kind::Bool:
      return is_bool(stored);
  }
  return false;
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

// Every problem found, in one message.
std::string join(const std::vector<std::string>& problems) {
  std::string joined;
  for (const std::string& p : problems) joined += (joined.empty() ? "" : "; ") + p;
  return joined;
}

// Levenshtein distance between a and b: the edits that turn one name into the other.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// For the first few missing names, the file's name nearest to each (as the file spells it), so
// that a prefix or a renamed layer shows in the message: the shortest name that ends with the
// missing one after a dot (a prefix: LoadOptions::prefix), else the fewest edits.
std::string closest_names(const std::vector<std::string>& missing,
                          const record::TensorMap& tensors) {
  constexpr std::size_t kShown = 3;
  if (tensors.empty()) return " (the record is empty)";
  std::string out = "; closest names in the record: ";
  for (std::size_t i = 0; i < missing.size() && i < kShown; ++i) {
    const std::string* best = nullptr;
    std::pair<bool, std::size_t> best_rank;  // (not prefixed, distance): smallest first
    for (const auto& [name, data] : tensors) {
      const bool prefixed = name.size() > missing[i].size() && name.ends_with(missing[i]) &&
                            name[name.size() - missing[i].size() - 1] == '.';
      const std::pair<bool, std::size_t> rank{
          !prefixed, prefixed ? name.size() - missing[i].size() : edit_distance(missing[i], name)};
      if (best == nullptr || rank < best_rank) {
        best = &name;
        best_rank = rank;
      }
    }
    out += kiln::detail::concat(i ? ", '" : "'", missing[i], "' ~ '", *best, "'");
  }
  return out;
}

// The record's entries under the module's names: LoadOptions::prefix taken off (other names
// left out), then LoadOptions::rename applied. Each points at the file's entry (its name, for
// messages, and its data).
using Entry = record::TensorMap::value_type;
std::map<std::string, const Entry*> renamed(const record::TensorMap& tensors,
                                            const LoadOptions& options, std::string_view op,
                                            std::string_view origin) {
  std::map<std::string, const Entry*> out;
  for (const Entry& entry : tensors) {
    if (!entry.first.starts_with(options.prefix)) continue;
    std::string mine = entry.first.substr(options.prefix.size());
    if (options.rename) mine = options.rename(mine);
    if (mine.empty()) continue;
    const auto [at, fresh] = out.emplace(mine, &entry);
    if (!fresh) {
      kiln::detail::fail<InvalidArgument>(op, origin, ": '", at->second->first, "' and '",
                                          entry.first, "' both load as '", mine, "'");
    }
  }
  return out;
}

}  // namespace

record::TensorMap to_record(void* module, VisitFn visit) {
  const CollectSlots found = collect(module, visit);
  const std::vector<NamedSlot>& slots = found.out;
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
  for (const NamedCounter& c : found.counters) {
    // PyTorch's layout for num_batches_tracked: int64, shape [].
    TensorData value = TensorData::from_vec(std::vector<std::int64_t>{c.counter->value()}, Shape{});
    if (!out.emplace(c.name, std::move(value)).second) {
      kiln::detail::fail<InvalidArgument>("nn::save", "two entries are named '", c.name, "'");
    }
  }
  return out;
}

namespace {

// movable: file itself when the caller gave it up, so that an entry kept in its dtype moves into
// the parameter's new value instead of being copied (a 90 MB model touched once less).
void load_entries(void* module, VisitFn visit, const record::TensorMap& file,
                  record::TensorMap* movable, const LoadOptions& options, std::string_view origin) {
  constexpr std::string_view kOp = "nn::load";
  const std::map<std::string, const Entry*> tensors = renamed(file, options, kOp, origin);
  const CollectSlots found = collect(module, visit);
  const std::vector<NamedSlot>& slots = found.out;

  std::vector<std::string> missing;
  std::set<std::string> known;
  // Two members under one name (a KILN_NAMED name that is another member's) would both load
  // the one entry; save refuses them too.
  const auto name_once = [&](const std::string& name) {
    if (!known.insert(name).second) {
      kiln::detail::fail<InvalidArgument>(kOp, origin, ": two entries of the module are named '",
                                          name, "'");
    }
  };
  for (const NamedSlot& s : slots) {
    name_once(s.name);
    if (!tensors.contains(s.name)) missing.push_back(s.name);
  }
  // A counter absent from the record restarts at 0 rather than failing: kiln files written
  // before BatchNorm kept num_batches_tracked lack it (PyTorch treats its own older files so).
  std::vector<std::int64_t> counts;
  for (const NamedCounter& c : found.counters) {
    name_once(c.name);
    const auto entry = tensors.find(c.name);
    counts.push_back(
        entry == tensors.end() ? 0 : counter_value(kOp, origin, c.name, entry->second->second));
  }
  if (!missing.empty()) {
    kiln::detail::fail<InvalidArgument>(kOp, origin, ": ", missing.size(),
                                        " parameter(s) of the module are not in the record: ",
                                        list_names(missing), closest_names(missing, file));
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
  std::vector<std::string> wrong_kinds;
  for (const NamedSlot& s : slots) {
    const Entry& entry = *tensors.at(s.name);
    const Kind kind = s.slot->kind();
    if (loads_into(entry.second.dtype(), kind)) continue;
    const std::string file_name = entry.first == s.name
                                      ? std::string("entry")
                                      : kiln::detail::concat("entry '", entry.first, "'");
    wrong_kinds.push_back(kiln::detail::concat(
        s.slot->trainable() ? "parameter '" : "buffer '", s.name, "' holds ", kind_name(kind),
        " values (", dtype_name(s.slot->primitive()->dtype()), ") but the record's ", file_name,
        " is ", dtype_name(entry.second.dtype())));
  }
  if (!wrong_kinds.empty()) {
    kiln::detail::fail<DTypeMismatch>(kOp, origin,
                                      ": entries of another kind: ", join(wrong_kinds));
  }
  std::vector<std::string> mismatches;
  for (const NamedSlot& s : slots) {
    const Shape& stored = tensors.at(s.name)->second.shape();
    const Shape& expected = s.slot->primitive()->shape();
    if (!(stored == expected)) {
      mismatches.push_back(kiln::detail::concat("'", s.name, "' is ", expected.to_string(),
                                                " in the module but ", stored.to_string(),
                                                " in the record"));
    }
  }
  if (!mismatches.empty()) {
    kiln::detail::fail<ShapeMismatch>(kOp, origin, ": parameter shapes differ: ", join(mismatches));
  }

  // Build every new value before replacing any, so a failure leaves the module as it was.
  std::vector<Primitive> fresh;
  fresh.reserve(slots.size());
  for (const NamedSlot& s : slots) {
    const Primitive& current = s.slot->primitive();
    const TensorData& stored = tensors.at(s.name)->second;
    // A float slot keeps its dtype; an Int or Bool buffer takes the record's (an i64 entry stays
    // i64, whatever the buffer held before), and so does a quantized weight (nn::quantize): the
    // record's blocks, or its float values.
    const bool keep = stored.dtype() == current->dtype() || s.slot->kind() != Kind::Float ||
                      current->dtype() == DType::QFloat;
    TensorData data = !keep     ? stored.convert(current->dtype())
                      : movable ? std::move(const_cast<TensorData&>(stored))
                                : stored;
    Primitive value =
        kiln::detail::from_data(std::move(data), current->device(), s.slot->kind(), s.slot->rank());
    if (kiln::detail::is_require_grad(current)) {
      value = kiln::detail::require_grad(std::move(value), true);
    }
    fresh.push_back(std::move(value));
  }
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i].slot->set_primitive(std::move(fresh[i]));
  for (std::size_t i = 0; i < counts.size(); ++i) found.counters[i].counter->set(counts[i]);
}

}  // namespace

void load_record(void* module, VisitFn visit, const record::TensorMap& tensors,
                 const LoadOptions& options, std::string_view origin) {
  load_entries(module, visit, tensors, nullptr, options, origin);
}

void load_record(void* module, VisitFn visit, record::TensorMap&& tensors,
                 const LoadOptions& options, std::string_view origin) {
  load_entries(module, visit, tensors, &tensors, options, origin);
}

}  // namespace kiln::nn::detail
