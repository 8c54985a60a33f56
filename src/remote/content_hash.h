// The key of an upload's content in the client's and server's upload caches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kiln::remote {

// XXH3 (64 bits) of bytes under seed; from kTwoThreadHashBytes on, the XXH3 of the two halves'
// XXH3s, the second half hashed on a thread of its own. Only the same for the same bytes, seed
// and build: a key within one client's session, never a stored checksum.
std::uint64_t content_hash(std::span<const std::byte> bytes, std::uint64_t seed);

// One core reads memory slower than two: a 64 MB cache hit took 3.4-3.8 ms hashed by one thread,
// 2.5-2.7 ms by two (the development machine, loopback).
inline constexpr std::size_t kTwoThreadHashBytes = std::size_t{8} << 20;

}  // namespace kiln::remote
