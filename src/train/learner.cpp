#include "kiln/train/learner.h"

#include <iomanip>
#include <sstream>

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

double read_loss(const Tensor<1>& loss) {
  if (loss.num_elements() != 1) {
    kiln::detail::fail<ShapeMismatch>("train::fit", "the step's loss has shape ",
                                      loss.shape().to_string(), "; it must have one element");
  }
  return loss.into_scalar<double>();
}

}  // namespace detail
}  // namespace kiln::train
