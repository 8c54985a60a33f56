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

std::filesystem::path RunFiles::model(int epoch) const {
  return directory / ("model-" + std::to_string(epoch) + ".safetensors");
}

std::filesystem::path RunFiles::optimizer(int epoch) const {
  return directory / ("optimizer-" + std::to_string(epoch) + ".safetensors");
}

int RunFiles::latest_checkpoint() const {
  if (!std::filesystem::exists(log())) return 0;
  const History history = History::read_csv(log());
  // The log is written last, so an epoch it lists has its model and optimizer files.
  for (auto it = history.records().rbegin(); it != history.records().rend(); ++it) {
    if (std::filesystem::exists(model(it->epoch)) && std::filesystem::exists(optimizer(it->epoch))) {
      return it->epoch;
    }
  }
  return 0;
}

void RunFiles::commit(int epoch, const record::TensorMap& model_record,
                      const record::TensorMap& optimizer_record, const History& history) const {
  record::save_safetensors(model(epoch), model_record);
  record::save_safetensors(optimizer(epoch), optimizer_record);
  history.write_csv(log());
  history.write_svg(chart());
  // Keep the newest checkpoint and the one before it (a crash while writing leaves one intact).
  for (int old = epoch - 2; old >= 1; --old) {
    std::error_code ec;
    const bool had_model = std::filesystem::remove(model(old), ec);
    const bool had_optimizer = std::filesystem::remove(optimizer(old), ec);
    if (!had_model && !had_optimizer) break;
  }
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
