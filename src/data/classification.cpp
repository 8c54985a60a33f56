#include "kiln/data/classification.h"

#include "kiln/data.h"
#include "kiln/detail/format.h"
#include "kiln/error.h"

namespace kiln::data {

using kiln::detail::fail;

ClassificationBatch ClassificationBatcher::operator()(
    const std::vector<ClassificationItem>& items) const {
  if (items.empty()) fail<InvalidArgument>("ClassificationBatcher", "no items to batch");
  const std::size_t width = items.front().features.size();
  std::vector<float> features;
  features.reserve(items.size() * width);
  std::vector<std::int64_t> labels;
  labels.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].features.size() != width) {
      fail<ShapeMismatch>("ClassificationBatcher", "item ", i, " has ", items[i].features.size(),
                          " features but item 0 has ", width);
    }
    features.insert(features.end(), items[i].features.begin(), items[i].features.end());
    labels.push_back(items[i].label);
  }
  const auto batch = static_cast<std::int64_t>(items.size());
  TensorData feature_data =
      TensorData::from_vec(features, Shape{batch, static_cast<std::int64_t>(width)});
  TensorData label_data = TensorData::from_vec(labels, Shape{batch});
  // Built as f32 / i64 and converted when the device defaults differ (f64, bf16, i32, ...).
  const DeviceSettings settings = device_.settings();
  if (settings.float_dtype != feature_data.dtype()) {
    feature_data = feature_data.convert(settings.float_dtype);
  }
  if (settings.int_dtype != label_data.dtype()) label_data = label_data.convert(settings.int_dtype);
  return ClassificationBatch{Tensor<2>::from_data(std::move(feature_data), device_),
                             Tensor<1, Int>::from_data(std::move(label_data), device_)};
}

}  // namespace kiln::data
