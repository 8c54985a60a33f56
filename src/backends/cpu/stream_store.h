// Copies with stores that bypass the cache (AVX-512 and AVX builds): for outputs larger than the
// caches that nothing reads soon, a plain store first reads each line from memory, a third more
// traffic. Elsewhere, and for the unaligned head and tail, a memcpy. Streaming stores are weakly
// ordered, so each call ends with a store fence on its own thread: whatever the thread does next
// (leave a parallel region, hand the tensor on) comes after the copy for every other thread.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

// Outputs at least this large are written with stream_bytes where a kernel can (bigger than the
// last-level cache of the machines we measure: the lines would be evicted before any reuse).
inline constexpr std::int64_t kStreamOutputBytes = std::int64_t{32} << 20;

inline void stream_bytes(void* dst, const void* src, std::int64_t bytes) {
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
#if defined(__AVX512F__)
  const std::int64_t head =
      std::min<std::int64_t>(bytes, (64 - reinterpret_cast<std::uintptr_t>(out) % 64) % 64);
  std::memcpy(out, in, static_cast<std::size_t>(head));
  std::int64_t at = head;
  for (; at + 64 <= bytes; at += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out + at),
                        _mm512_loadu_si512(reinterpret_cast<const void*>(in + at)));
  }
  std::memcpy(out + at, in + at, static_cast<std::size_t>(bytes - at));
  _mm_sfence();
#elif defined(__AVX__)
  const std::int64_t head =
      std::min<std::int64_t>(bytes, (32 - reinterpret_cast<std::uintptr_t>(out) % 32) % 32);
  std::memcpy(out, in, static_cast<std::size_t>(head));
  std::int64_t at = head;
  for (; at + 32 <= bytes; at += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + at),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + at)));
  }
  std::memcpy(out + at, in + at, static_cast<std::size_t>(bytes - at));
  _mm_sfence();
#else
  std::memcpy(out, in, static_cast<std::size_t>(bytes));
#endif
}

}  // namespace kiln::cpu
