#include "remote/block_cache.h"

#include <xxhash.h>

#include <unordered_map>

namespace kiln::remote {
namespace {

bool blockable(const Command& c) {
  return c.kind == CommandKind::Op || c.kind == CommandKind::Free || c.kind == CommandKind::Assign;
}

// Renames the ids of commands to local ids numbered by first appearance; bindings[local] is the
// session id.
class Renamer {
 public:
  std::uint32_t local(std::uint32_t id) {
    const auto [it, added] = locals_.try_emplace(id, static_cast<std::uint32_t>(bindings.size()));
    if (added) bindings.push_back(id);
    return it->second;
  }
  void rename(Command& c) {
    switch (c.kind) {
      case CommandKind::Op:
        for (ir::TensorId& id : c.op.inputs) {
          if (id != ir::kNoTensor) id.index = local(id.index);
        }
        for (ir::TensorId& id : c.op.outputs) id.index = local(id.index);
        break;
      case CommandKind::Assign:
        c.id = local(c.id);
        c.other = local(c.other);
        break;
      default:  // Free
        c.id = local(c.id);
        break;
    }
  }
  std::vector<std::uint32_t> bindings;

 private:
  std::unordered_map<std::uint32_t, std::uint32_t> locals_;
};

}  // namespace

void BlockCache::compress(std::vector<Command>& batch, const Limits& limits) {
  std::size_t run = 0;
  while (run < batch.size() && blockable(batch[run])) ++run;
  if (run < kMinCommands || run > limits.max_block_commands) return;

  Renamer renamer;
  // A copy: the batch is sent as it is unless the run is replaced.
  std::vector<Command> body(batch.begin(), batch.begin() + static_cast<long>(run));
  for (Command& c : body) renamer.rename(c);
  ir::wire::Writer key_writer;
  for (const Command& c : body) write_command(key_writer, c);
  const std::vector<std::byte> encoded = std::move(key_writer).take();
  const XXH128_hash_t hash = XXH3_128bits(encoded.data(), encoded.size());
  const Key key{hash.low64, hash.high64, encoded.size()};

  const auto found = known_.find(key);
  if (found == known_.end()) {
    if (known_.size() < kMaxKnown) known_.emplace(key, Known{1, 0});
    return;  // sent as it is
  }
  Known& known = found->second;
  Command replacement;
  replacement.ids = std::move(renamer.bindings);
  if (known.seen >= 2) {
    replacement.kind = CommandKind::Bind;
    ++replayed_;
  } else if (blocks_ < limits.max_blocks) {
    known.seen = 2;
    known.block = blocks_++;
    replacement.kind = CommandKind::Block;
    replacement.body = std::move(body);
  } else {
    return;  // no block numbers left: sent as it is
  }
  replacement.block = known.block;
  batch.erase(batch.begin() + 1, batch.begin() + static_cast<long>(run));
  batch[0] = std::move(replacement);
}

}  // namespace kiln::remote
