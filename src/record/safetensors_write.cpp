// Writing safetensors the way the reference writer does, so files are byte-identical to its.
#include <algorithm>
#include <bit>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "kiln/record/safetensors.h"
#include "record/safetensors_format.h"

namespace kiln::record {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is written without byte swapping");

using OrderedJson = nlohmann::ordered_json;
using Item = const TensorMap::value_type*;

struct Plan {
  std::string header;  // the 8-byte length prefix, the JSON and its padding
  std::vector<Item> order;
};

// dump() throws on invalid UTF-8 without saying which string; find it for the message.
[[noreturn]] void fail_on_encoding(const TensorMap& tensors, const Metadata& metadata,
                                   std::string_view op, std::string_view origin) {
  auto encodes = [](const std::string& text) {
    try {
      (void)OrderedJson(text).dump();
      return true;
    } catch (const OrderedJson::exception&) {
      return false;
    }
  };
  for (const auto& [name, data] : tensors) {
    if (!encodes(name))
      kiln::detail::fail<InvalidArgument>(op, origin, ": a tensor name is not valid UTF-8");
  }
  for (const auto& [key, value] : metadata) {
    if (!encodes(key) || !encodes(value)) {
      kiln::detail::fail<InvalidArgument>(op, origin, ": a metadata string is not valid UTF-8");
    }
  }
  kiln::detail::fail<InvalidArgument>(op, origin, ": the header could not be encoded as JSON");
}

Plan plan(const TensorMap& tensors, const Metadata& metadata, std::string_view op,
          std::string_view origin) {
  Plan plan;
  for (const auto& item : tensors) {
    if (item.first == "__metadata__") {
      kiln::detail::fail<InvalidArgument>(op, origin,
                                          ": '__metadata__' is reserved and cannot name a tensor");
    }
    (void)detail::safetensors_dtype_name(item.second.dtype(), op);  // rejects QFloat early
    plan.order.push_back(&item);
  }
  // Widest elements first keeps every tensor aligned to its element size (the header length
  // is a multiple of 8); the map already sorted names, and stable_sort keeps that order.
  std::stable_sort(plan.order.begin(), plan.order.end(), [](Item a, Item b) {
    return detail::layout_rank(a->second.dtype()) < detail::layout_rank(b->second.dtype());
  });

  OrderedJson json = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson& meta = json["__metadata__"] = OrderedJson::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
  }
  std::uint64_t offset = 0;
  for (Item item : plan.order) {
    const TensorData& data = item->second;
    const std::uint64_t end = offset + data.bytes().size();
    json[item->first] = OrderedJson{
        {"dtype", detail::safetensors_dtype_name(data.dtype(), op)},
        {"shape", data.shape().to_vector()},
        {"data_offsets", {offset, end}},
    };
    offset = end;
  }
  std::string text;
  try {
    text = json.dump();
  } catch (const OrderedJson::exception&) {
    fail_on_encoding(tensors, metadata, op, origin);
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  plan.header.resize(8);
  for (std::size_t i = 0; i < 8; ++i) {
    plan.header[i] = static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xff);
  }
  plan.header += text;
  return plan;
}

}  // namespace

std::vector<std::byte> serialize_safetensors(const TensorMap& tensors, const Metadata& metadata) {
  const Plan p = plan(tensors, metadata, "serialize_safetensors", "<memory>");
  std::size_t total = p.header.size();
  for (Item item : p.order) total += item->second.bytes().size();
  std::vector<std::byte> out;
  out.reserve(total);
  const auto* header = reinterpret_cast<const std::byte*>(p.header.data());
  out.insert(out.end(), header, header + p.header.size());
  for (Item item : p.order) {
    const std::span<const std::byte> bytes = item->second.bytes();
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  return out;
}

void save_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                      const Metadata& metadata) {
  constexpr std::string_view kOp = "save_safetensors";
  const Plan p = plan(tensors, metadata, kOp, path.string());
  kiln::detail::AtomicFile file(path, kOp);
  file.write(std::string_view(p.header));
  for (Item item : p.order) file.write(item->second.bytes());
  file.commit();
}

}  // namespace kiln::record
