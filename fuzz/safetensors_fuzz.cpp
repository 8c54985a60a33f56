// libFuzzer target for the safetensors reader. Any input must either parse or throw a
// kiln::Error: another exception escapes and libFuzzer reports it, as do the sanitizers'
// findings (out-of-bounds reads, overflows, leaks). A file that parses must also survive a
// round trip: writing it back and parsing that gives the same tensors and metadata.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kiln/error.h"
#include "kiln/record/safetensors.h"

namespace {

bool same(const kiln::record::SafetensorsFile& a, const kiln::record::SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (auto i = a.tensors.begin(), j = b.tensors.begin(); i != a.tensors.end(); ++i, ++j) {
    const kiln::TensorData& x = i->second;
    const kiln::TensorData& y = j->second;
    if (i->first != j->first || x.dtype() != y.dtype() || !(x.shape() == y.shape()) ||
        !std::ranges::equal(x.bytes(), y.bytes())) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  kiln::record::SafetensorsFile file;
  try {
    file = kiln::record::parse_safetensors(bytes, "fuzz-input");
  } catch (const kiln::Error&) {
    return 0;  // a rejected file is the expected outcome for most inputs
  }
  // Accepted: the writer must take it back (a kiln::Error here escapes and is reported) and
  // the reader must read that to the same content.
  const std::vector<std::byte> written =
      kiln::record::serialize_safetensors(file.tensors, file.metadata);
  if (!same(kiln::record::parse_safetensors(written, "round-trip"), file)) __builtin_trap();
  return 0;
}
