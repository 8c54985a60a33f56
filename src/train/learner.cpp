#include "kiln/train/learner.h"

#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <string_view>

#include "kiln/detail/format.h"

namespace kiln::train {

StepOutput classification_step(const Tensor<1>& loss, const Tensor<2>& logits,
                               const Tensor<1, Int>& labels) {
  const std::int64_t n = logits.dims()[0];
  if (labels.dims()[0] != n) {
    kiln::detail::fail<ShapeMismatch>("classification_step", "logits for ", n, " items but ",
                                      labels.dims()[0], " labels");
  }
  const Tensor<1, Int> predicted = logits.detach().argmax(1).template squeeze<1>(1);
  const auto hits = predicted.equal(labels.to_device(predicted.device())).int_().sum();
  // Inside a capture nothing is read to the host: the learner reads the count after each replay.
  if (capture_open()) return {loss, n, -1, hits};
  return {loss, n, hits.into_scalar<std::int64_t>()};
}

namespace detail {

void PassMetrics::add(const StepOutput& out, double loss) {
  loss_sum += loss * static_cast<double>(out.samples);
  samples += out.samples;
  if (out.correct >= 0) {
    classifier = true;
    correct += out.correct;
  }
}

std::string PassMetrics::summary() const {
  std::ostringstream text;
  text << std::fixed << std::setprecision(4) << "loss " << mean_loss();
  if (classifier) text << " accuracy " << accuracy();
  return text.str();
}

Device model_device(const std::vector<nn::NamedParam>& params) {
  if (params.empty()) {
    kiln::detail::fail<InvalidArgument>("train::fit", "the model has no parameters to train");
  }
  return params.front().value->device().without_autodiff();
}

void check_precision(DType precision) {
  if (precision != DType::F32 && precision != DType::BF16 && precision != DType::F16) {
    kiln::detail::fail<InvalidArgument>("train::fit", "precision must be f32, bf16 or f16, not ",
                                        dtype_name(precision));
  }
}

bool capture_allowed() {
  const char* value = std::getenv("KILN_CAPTURE");
  return value == nullptr || std::string_view(value) != "0";
}

void say_captured(std::ostream& out, const Device& device) {
  out << "capture: the training step is captured on " << device.to_string()
      << "; later batches of a captured shape replay it\n";
}

void say_not_captured(std::ostream& out, const std::string& why) {
  out << "capture: the training step runs eagerly: " << why << "\n";
}

void check_loss(const Tensor<1>& loss) {
  if (loss.num_elements() != 1) {
    kiln::detail::fail<ShapeMismatch>("train::fit", "the step's loss has shape ",
                                      loss.shape().to_string(), "; it must have one element");
  }
}

double read_loss(const Tensor<1>& loss) {
  check_loss(loss);
  return loss.into_scalar<double>();
}

}  // namespace detail
}  // namespace kiln::train
