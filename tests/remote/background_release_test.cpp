// BackgroundRelease: what it is handed is freed, large buffers on its thread and small ones at
// once, from several callers; its destructor frees what is still queued. Counted through glibc's
// mmapped bytes (buffers of 48 MiB are always mmapped, whatever threshold glibc has moved to);
// under a sanitizer, whose allocator glibc does not count, LeakSanitizer checks the same.
#ifdef KILN_HAVE_REMOTE_SERVER

#include "remote/background_release.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstddef>
#include <thread>
#include <vector>

namespace kiln::remote_test {
namespace {

constexpr std::size_t kLarge = std::size_t{48} << 20;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcCounts = false;
#else
constexpr bool kGlibcCounts = true;
#endif

std::size_t mmapped_bytes() { return mallinfo2().hblkhd; }

std::vector<std::byte> touched(std::size_t bytes) {
  std::vector<std::byte> out(bytes, std::byte{1});
  return out;
}

TEST(BackgroundRelease, FreesLargeBuffersFromSeveralCallersByItsEnd) {
  const std::size_t before = mmapped_bytes();
  {
    remote::BackgroundRelease release;
    std::vector<std::vector<std::byte>> buffers;
    for (int i = 0; i < 4; ++i) buffers.push_back(touched(kLarge));
    if (kGlibcCounts) EXPECT_GE(mmapped_bytes(), before + 4 * kLarge);
    std::thread other([&] {
      release.release(std::move(buffers[0]));
      release.release(std::move(buffers[1]));
    });
    release.release(std::move(buffers[2]));
    release.release(std::move(buffers[3]));
    release.release(touched(100));  // small: freed in the call
    other.join();
    for (const auto& b : buffers) EXPECT_EQ(b.capacity(), 0u);  // handed over, not copied
  }
  if (kGlibcCounts) EXPECT_LT(mmapped_bytes(), before + kLarge);
}

TEST(BackgroundRelease, AnEmptyBufferAndNoBufferAtAllEndCleanly) {
  remote::BackgroundRelease unused;
  remote::BackgroundRelease given_nothing;
  given_nothing.release({});
}

}  // namespace
}  // namespace kiln::remote_test

#endif  // KILN_HAVE_REMOTE_SERVER
