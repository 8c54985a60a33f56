// Copies with stores that bypass the cache (AVX-512 and AVX builds): for outputs larger than the
// caches that nothing reads soon, a plain store first reads each line from memory, a third more
// traffic. Elsewhere, and for the unaligned head and tail, a memcpy. Streaming stores are weakly
// ordered, so a thread fences its copies before whatever it does next (leave a parallel region,
// hand the tensor on) for that to come after the copies for every other thread: stream_bytes
// fences each copy; a loop of short copies calls stream_bytes_unfenced and stream_fence once at
// its end, since a fence waits until the copy's lines reach memory (a fence per 1 KiB piece of a
// fused group's output doubled the group's time: fma_exp 4096², 2 threads).
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

inline void stream_bytes_unfenced(void* dst, const void* src, std::int64_t bytes) {
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
#else
  std::memcpy(out, in, static_cast<std::size_t>(bytes));
#endif
}

// dst[i] = src[i] * scale for i < n, streamed as stream_bytes_unfenced streams (softmax's last
// pass: a scaling pass over the row in cache and then a copy of it were two).
inline void stream_scaled_unfenced(float* dst, const float* src, float scale, std::int64_t n) {
  std::int64_t at = 0;
#if defined(__AVX512F__)
  const std::int64_t head =
      std::min<std::int64_t>(n, (64 - reinterpret_cast<std::uintptr_t>(dst) % 64) % 64 / 4);
  for (; at < head; ++at) dst[at] = src[at] * scale;
  if (reinterpret_cast<std::uintptr_t>(dst + at) % 64 == 0) {
    const __m512 factor = _mm512_set1_ps(scale);
    for (; at + 16 <= n; at += 16) {
      _mm512_stream_ps(dst + at, _mm512_mul_ps(_mm512_loadu_ps(src + at), factor));
    }
  }
#endif
  for (; at < n; ++at) dst[at] = src[at] * scale;
}

// Orders this thread's streamed stores before its later stores.
inline void stream_fence() {
#if defined(__AVX512F__) || defined(__AVX__)
  _mm_sfence();
#endif
}

inline void stream_bytes(void* dst, const void* src, std::int64_t bytes) {
  stream_bytes_unfenced(dst, src, bytes);
  stream_fence();
}

}  // namespace kiln::cpu
