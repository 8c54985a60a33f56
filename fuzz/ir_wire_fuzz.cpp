// libFuzzer target for the op IR's wire format (src/ir/wire.cpp), the bytes `kiln serve` will
// read from the network. Any input must either deserialize or throw a kiln::Error; another
// exception escapes and libFuzzer reports it, as do the sanitizers' findings. A program that
// deserializes must validate, print, hash and survive the wire again unchanged.
//
// An input whose first byte is even is taken as a program's body: the fuzzer gets the valid
// header (magic, version, contract hash) in front, so it spends its time past the header.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ir/op_ir.h"
#include "kiln/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes;
  if (size > 0 && data[0] % 2 == 0) {
    bytes = kiln::ir::serialize(kiln::ir::Program{});
    bytes.resize(16);  // the header alone
    ++data;
    --size;
  }
  const auto* first = reinterpret_cast<const std::byte*>(data);
  bytes.insert(bytes.end(), first, first + size);
  kiln::ir::Program program;
  try {
    program = kiln::ir::deserialize(bytes);
  } catch (const kiln::Error&) {
    return 0;
  }
  kiln::ir::validate(program);
  (void)kiln::ir::to_string(program);
  (void)kiln::ir::structure_hash(program);
  if (!(kiln::ir::deserialize(kiln::ir::serialize(program)) == program)) __builtin_trap();
  return 0;
}
