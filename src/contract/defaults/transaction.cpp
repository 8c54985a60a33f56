// Default of read_many: every read is started before any is awaited, so a backend with
// asynchronous reads overlaps them.
#include "contract/backend.h"

namespace kiln {

ReadManyFuture Backend::read_many(PrimitiveList xs) {
  std::vector<ReadFuture> reads;
  reads.reserve(xs.size());
  for (Primitive& x : xs) reads.push_back(into_data(std::move(x)));
  return std::async(std::launch::deferred, [reads = std::move(reads)]() mutable {
    std::vector<TensorData> out;
    out.reserve(reads.size());
    for (ReadFuture& read : reads) out.push_back(read.get());
    return out;
  });
}

}  // namespace kiln
