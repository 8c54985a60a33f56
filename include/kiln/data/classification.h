// The usual supervised-classification item (a feature vector and an integer class) and the
// batcher that stacks such items into tensors for a model.
//
//   data::ClassificationBatcher batcher(Device::cpu());
//   data::ClassificationBatch b = batcher({{{0.f, 1.f}, 3}, {{2.f, 3.f}, 1}});
//   // b.features: Tensor<2> [2, 2] = [[0, 1], [2, 3]];  b.labels: Tensor<1, Int> [2] = [3, 1]
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/data/loader.h"
#include "kiln/tensor.h"

namespace kiln::data {

struct ClassificationItem {
  std::vector<float> features{};
  std::int64_t label = 0;
  friend bool operator==(const ClassificationItem&, const ClassificationItem&) = default;
};

struct ClassificationBatch {
  Tensor<2> features;     // [batch, features]
  Tensor<1, Int> labels;  // [batch]
};

// Items -> one batch on the given device, in the device's default float and int dtypes.
// Throws InvalidArgument for an empty list and ShapeMismatch when the items' feature counts
// differ (naming the first item that disagrees). Safe to call from several threads at once.
class ClassificationBatcher {
 public:
  explicit ClassificationBatcher(Device device = Device::default_device())
      : device_(std::move(device)) {}
  ClassificationBatch operator()(const std::vector<ClassificationItem>& items) const;
  const Device& device() const noexcept { return device_; }

 private:
  Device device_;
};

// The loader for classification data:
//   data::ClassificationLoader loader(train, data::ClassificationBatcher(dev), {.batch_size = 64});
using ClassificationLoader = DataLoader<ClassificationItem, ClassificationBatch>;

}  // namespace kiln::data
