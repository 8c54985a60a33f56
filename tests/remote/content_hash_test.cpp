// content_hash: the upload cache's key. Equal bytes give equal keys on both sides of the
// two-thread size; a change of one byte anywhere (either half, the middle, the last), a byte more
// or a seed of another type gives another key.
#ifdef KILN_HAVE_REMOTE_SERVER

#include "remote/content_hash.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <vector>

namespace kiln::remote_test {
namespace {

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(random() & 0xff);
  return out;
}

TEST(ContentHash, EqualBytesEqualKeysAndEveryChangedByteAnotherKey) {
  for (const std::size_t n : {std::size_t{0}, std::size_t{1} << 20, remote::kTwoThreadHashBytes - 1,
                              remote::kTwoThreadHashBytes, remote::kTwoThreadHashBytes + 3}) {
    SCOPED_TRACE(n);
    std::vector<std::byte> bytes = random_bytes(n, 7);
    const std::vector<std::byte> copy = bytes;
    const std::uint64_t key = remote::content_hash(bytes, 11);
    EXPECT_EQ(remote::content_hash(copy, 11), key);
    EXPECT_NE(remote::content_hash(bytes, 12), key);
    if (n == 0) continue;
    for (const std::size_t at : {std::size_t{0}, n / 2 - (n > 1), n / 2, n / 2 + (n > 2), n - 1}) {
      bytes[at] ^= std::byte{1};
      EXPECT_NE(remote::content_hash(bytes, 11), key) << "byte " << at;
      bytes[at] ^= std::byte{1};
    }
    bytes.push_back(std::byte{0});
    EXPECT_NE(remote::content_hash(bytes, 11), key);
  }
}

}  // namespace
}  // namespace kiln::remote_test

#endif  // KILN_HAVE_REMOTE_SERVER
