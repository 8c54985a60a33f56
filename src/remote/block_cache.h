// The client's memory of the batches it has sent, so that a batch that repeats (the ops of a
// training step) crosses the wire once: the second time a run of ops, frees and assigns is seen
// it is sent as a Block (its commands over local ids, defined on the server and run), every
// later time as a Bind (the block's number and the session ids its local ids stand for this
// time). Only the structure and attributes must repeat; the ids may differ.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "remote/protocol.h"

namespace kiln::remote {

class BlockCache {
 public:
  // Rewrites the leading run of ops, frees and assigns of batch (when it is long enough) as a
  // Block or a Bind; leaves it as it is the first time it is seen, or when limits are reached.
  void compress(std::vector<Command>& batch, const Limits& limits);
  std::uint64_t replayed() const noexcept { return replayed_; }

 private:
  struct Known {
    std::uint32_t seen = 0;
    std::uint32_t block = 0;  // valid once seen >= 2
  };
  static constexpr std::size_t kMinCommands = 8;
  static constexpr std::size_t kMaxKnown = 4096;
  // A run's canonical commands, encoded, as a 128-bit hash and a length (what is remembered of
  // a run costs 24 bytes however long it is) -> what is known of it.
  struct Key {
    std::uint64_t low = 0, high = 0, length = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& key) const noexcept { return key.low; }
  };
  std::unordered_map<Key, Known, KeyHash> known_;
  std::uint32_t blocks_ = 0;
  std::uint64_t replayed_ = 0;
};

}  // namespace kiln::remote
