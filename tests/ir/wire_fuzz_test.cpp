// deserialize on hostile input: thousands of seeded truncations, bit flips and overwritten
// fields of real programs (every op of ops.def among them). Each must either be refused with a
// kiln::Error or give a program that validates and survives the wire again; never a crash (the
// suite also runs under AddressSanitizer, ./run sanitize).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "ir/op_ir.h"
#include "ir/samples.h"

namespace kiln::ir_test {

struct FuzzTally {
  int refused = 0;
  int accepted = 0;
};

void feed(std::span<const std::byte> bytes, FuzzTally& tally) {
  ir::Program program;
  try {
    program = ir::deserialize(bytes);
  } catch (const Error&) {
    ++tally.refused;
    return;
  }
  ++tally.accepted;
  // What was accepted is a valid program: it prints, hashes and travels again unchanged.
  EXPECT_NO_THROW(ir::validate(program));
  (void)ir::to_string(program);
  (void)ir::structure_hash(program);
  EXPECT_EQ(ir::deserialize(ir::serialize(program)), program);
}

std::vector<std::vector<std::byte>> fuzz_seeds() {
  std::vector<std::vector<std::byte>> seeds;
  seeds.push_back(ir::serialize(every_op_program()));
  seeds.push_back(ir::serialize(sample_program<OpCode::add>(0)));
  seeds.push_back(ir::serialize(sample_program<OpCode::from_data>(0)));
  seeds.push_back(ir::serialize(sample_program<OpCode::conv>(0)));
  seeds.push_back(ir::serialize(sample_program<OpCode::cat>(1)));
  seeds.push_back(ir::serialize(sample_program<OpCode::attention>(0)));
  return seeds;
}

TEST(IrWireFuzz, TruncatedBuffersAreRefused) {
  FuzzTally tally;
  for (const std::vector<std::byte>& seed : fuzz_seeds()) {
    const std::size_t step = std::max<std::size_t>(1, seed.size() / 700);
    for (std::size_t length = 0; length < seed.size(); length += step) {
      feed(std::span(seed).first(length), tally);
    }
  }
  EXPECT_EQ(tally.accepted, 0) << "a proper prefix of a program is never a program";
  EXPECT_GT(tally.refused, 1000);
}

TEST(IrWireFuzz, FlippedBitsAndOverwrittenFieldsNeverCrash) {
  const std::vector<std::vector<std::byte>> seeds = fuzz_seeds();
  std::mt19937_64 rng(20261203);
  FuzzTally tally;
  for (int round = 0; round < 6000; ++round) {
    std::vector<std::byte> bytes = seeds[static_cast<std::size_t>(round) % seeds.size()];
    auto position = [&] {
      return std::uniform_int_distribution<std::size_t>(0, bytes.size() - 1)(rng);
    };
    switch (round % 4) {
      case 0: {  // a few flipped bits past the header (a wrong header is refused at once)
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) {
          const std::size_t at = 16 + position() % (bytes.size() - 16);
          bytes[at] ^= static_cast<std::byte>(1u << (rng() % 8));
        }
        break;
      }
      case 1: {  // a 32-bit field overwritten: counts, lengths, ids, codes
        const std::size_t at = 16 + position() % (bytes.size() - 20);
        const std::uint32_t values[] = {
            0, 1, 2, 0xffffffffu, 0x7fffffffu, 0x10000u, static_cast<std::uint32_t>(rng())};
        const std::uint32_t value = values[rng() % std::size(values)];
        for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<std::byte>(value >> (8 * i));
        break;
      }
      case 2: {  // a byte overwritten with a small value: kinds, enums, dtypes, bools
        bytes[16 + position() % (bytes.size() - 16)] = static_cast<std::byte>(rng() % 32);
        break;
      }
      default: {  // a span cut out or repeated
        const std::size_t at = 16 + position() % (bytes.size() - 16);
        const std::size_t length = std::min<std::size_t>(1 + rng() % 16, bytes.size() - at);
        if (rng() % 2) {
          bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                      bytes.begin() + static_cast<std::ptrdiff_t>(at + length));
        } else {
          const std::vector<std::byte> copy(
              bytes.begin() + static_cast<std::ptrdiff_t>(at),
              bytes.begin() + static_cast<std::ptrdiff_t>(at + length));
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), copy.begin(), copy.end());
        }
      }
    }
    feed(bytes, tally);
  }
  EXPECT_EQ(tally.refused + tally.accepted, 6000);
  EXPECT_GT(tally.refused, 3000);
}

TEST(IrWireFuzz, RandomBytesAfterAValidHeader) {
  const std::vector<std::byte> header = [] {
    std::vector<std::byte> bytes = ir::serialize(ir::Program{});
    bytes.resize(16);
    return bytes;
  }();
  std::mt19937 rng(7);
  FuzzTally tally;
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::byte> bytes = header;
    const std::size_t length = rng() % 200;
    for (std::size_t i = 0; i < length; ++i) {
      // Mostly small numbers, so counts and kinds often look plausible.
      bytes.push_back(static_cast<std::byte>(rng() % 4 == 0 ? rng() % 256 : rng() % 4));
    }
    feed(bytes, tally);
  }
  EXPECT_GT(tally.refused, 1900);
}

}  // namespace kiln::ir_test
