// libFuzzer target for the GGUF reader. Any input must either parse or throw a kiln::Error;
// another exception, a sanitizer report, a leak or a crash is a finding. A file that parses must
// dequantize every quantized tensor, and survive a round trip: writing it back and parsing that
// gives the same bytes again when written (bytes, not values, so NaN metadata compares equal).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kiln/error.h"
#include "kiln/record/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  kiln::record::GgufFile file;
  try {
    file = kiln::record::parse_gguf(bytes, "fuzz-input");
  } catch (const kiln::Error&) {
    return 0;  // a rejected file is the expected outcome for most inputs
  }
  for (const auto& [name, tensor] : file.tensors) {
    if (tensor.dtype() == kiln::DType::QFloat) (void)tensor.dequantize();
  }
  const std::vector<std::byte> written = kiln::record::serialize_gguf(file);
  const std::vector<std::byte> again =
      kiln::record::serialize_gguf(kiln::record::parse_gguf(written, "round-trip"));
  if (written != again) __builtin_trap();
  return 0;
}
