#include "contract/random_stream.h"

namespace kiln {
namespace {

thread_local std::optional<RandomStream> pinned;

}  // namespace

DrawRandomAt::DrawRandomAt(RandomStream at) noexcept : previous_(pinned) { pinned = at; }

DrawRandomAt::~DrawRandomAt() { pinned = previous_; }

std::optional<RandomStream> take_pinned_random() noexcept {
  std::optional<RandomStream> at = pinned;
  pinned.reset();
  return at;
}

}  // namespace kiln
