// Which path a convolution takes (conv_cudnn.h): KILN_CONV, then per shape class the choice kept
// in this process, remembered on disk (runtime/autotune.h), or made now.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "backends/cuda/conv_cudnn.h"
#include "backends/cuda/lib/event_timer.h"
#include "backends/cuda/lib/lt_autotune.h"
#include "backends/cuda/lib_call.h"
#include "runtime/autotune.h"

namespace kiln::cuda {
namespace {

enum class Mode { Auto, Cudnn, Kiln };

// KILN_CONV, read at each op so that a benchmark or a test can switch it. Unset, the choice per
// shape (auto).
Mode mode(const char* op) {
  const char* text = std::getenv("KILN_CONV");
  if (text == nullptr || *text == '\0') return Mode::Auto;
  if (std::strcmp(text, "auto") == 0) return Mode::Auto;
  if (std::strcmp(text, "cudnn") == 0) return Mode::Cudnn;
  if (std::strcmp(text, "kiln") == 0) return Mode::Kiln;
  detail::fail<InvalidArgument>(op, "KILN_CONV must be auto, cudnn or kiln, got \"", text, "\"");
}

// What this process has settled for one shape class.
struct Plan {
  bool searched = false;                      // cuDNN's algorithm looked for
  std::optional<cudnn::Algorithm> algorithm;  // none: cuDNN has none (or refused it)
  std::optional<bool> cudnn_chosen;           // cuDNN's path over kiln's own, once decided
};

using Plans = std::map<std::string, Plan>;

// One GPU's plans: found under a lock, used under its DeviceCudnn::mutex. Never destroyed.
Plans& plans_of(int index) {
  static std::mutex mutex;
  static auto& table = *new std::map<int, Plans>();
  std::lock_guard lock(mutex);
  return table[index];
}

const char* direction_name(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::Forward:
      return "forward";
    case ConvDirection::BackwardData:
      return "backward data";
    case ConvDirection::BackwardFilter:
      return "backward filter";
  }
  return "?";
}

std::string joined(const std::vector<std::int64_t>& values) {
  std::string text;
  for (std::int64_t v : values) text += detail::concat(text.empty() ? "" : ",", v);
  return text;
}

// KILN_CUDNN_GRAPH's part of the key: its choices differ from the default's.
const char* graph_words(cudnn::GraphMode mode) {
  switch (mode) {
    case cudnn::GraphMode::Compete:
      return "";
    case cudnn::GraphMode::Legacy:
      return " legacy";
    case cudnn::GraphMode::Only:
      return " graph";
  }
  return "";
}

// The shape class: direction, dtype and math, the three shapes, the windows, the layouts of the
// operands read, and the machine with its cuDNN (what makes a measured choice valid elsewhere).
std::string key_of(const ConvProblem& p, const cudnn::Convolution& conv,
                   const cudnn::DeviceCudnn& device, int index) {
  const std::string precision = conv.precision();
  return detail::concat(
      "conv ", direction_name(p.direction), " ", dtype_name(p.dtype), precision.empty() ? "" : " ",
      precision, " x ", p.x_shape.to_string(), " w ", p.w_shape.to_string(), " y ",
      p.y_shape.to_string(), " stride ", joined(p.stride), " padding ", joined(p.padding),
      " dilation ", joined(p.dilation), " groups ", p.groups, " ", conv.layouts(), " | ",
      lib::lt_machine_key(index, p.op), "/cudnn ", cudnn::version_text(device.library->version),
      graph_words(cudnn::graph_mode(p.op)));
}

// cuDNN's algorithm for the plan: timed by cuDNN when measuring is allowed, else its heuristic's.
void search(Plan& plan, cudnn::Convolution& conv, bool measure) {
  plan.searched = true;
  plan.algorithm = conv.best(measure);
}

// Thrown out of a timed run that cannot run here: that path takes forever.
struct Refused {};

// Chooses between cuDNN and kiln's own path for the plan: the remembered choice, else cuDNN's
// heuristic algorithm when nothing may be measured, else both timed and the faster remembered.
void decide(Plan& plan, const std::string& key, cudnn::Convolution& conv, bool measure,
            Runtime& runtime, const char* op, const std::function<TensorPtr()>& kiln_path) {
  if (autotune::enabled()) {
    if (const std::optional<autotune::Choice> known = autotune::find(key)) {
      if (known->choice == "kiln") {
        plan.cudnn_chosen = false;
        return;
      }
      if (std::optional<cudnn::Algorithm> algorithm = cudnn::decode(known->choice);
          algorithm && conv.usable(*algorithm)) {
        plan.searched = true;
        plan.algorithm = algorithm;
        plan.cudnn_chosen = true;
        return;
      }
    }
  }
  if (!plan.searched) search(plan, conv, measure);
  if (!plan.algorithm || !measure) {
    plan.cudnn_chosen = plan.algorithm.has_value();
    return;
  }
  // Candidate 0, the default, is cuDNN's; 1 is kiln's own path. Each is the whole op (copies,
  // bias and all), on the stream, after its first call.
  const cudnn::Algorithm algorithm = *plan.algorithm;
  lib::EventTimer timer(op);
  auto stream = [&] { return lib_stream(runtime); };
  auto seconds = [&](int candidate) {
    try {
      return timer.seconds(
          [&] {
            if (candidate == 1) {
              kiln_path();
            } else if (!conv.run(algorithm)) {
              throw Refused{};
            }
          },
          stream);
    } catch (const Refused&) {
    } catch (const UnsupportedOperation&) {
    } catch (const OutOfMemory&) {
    }
    return std::numeric_limits<double>::infinity();
  };
  const std::string cudnn_choice = cudnn::encode(algorithm);
  const std::string choice = autotune::measure(
      key, 2, seconds, [&](int candidate) { return candidate == 0 ? cudnn_choice : "kiln"; });
  plan.cudnn_chosen = choice != "kiln";
}

}  // namespace

TensorPtr convolve(CudaBackend& backend, const ConvProblem& problem,
                   const std::function<TensorPtr()>& kiln_path) {
  const Mode chosen = mode(problem.op);
  if (chosen == Mode::Kiln) return kiln_path();
  Runtime& runtime = backend.runtime();
  // Inside a CUDA graph capture cuDNN is used only if it was set up before.
  const bool capturing = runtime.context.capturing();
  cudnn::DeviceCudnn* device = cudnn::device_cudnn(runtime, nullptr, !capturing);
  if (device == nullptr) return kiln_path();
  cudnn::Convolution conv(backend, *device, problem);
  if (!conv.expressible()) return kiln_path();
  // A library call never joins a fused kernel: the capture takes the op back (lib_call.h).
  KernelCapture::refuse_if_active();
  const int index = runtime.context.index();
  const std::string key = key_of(problem, conv, *device, index);
  // Timing synchronises the stream: never inside a CUDA graph capture.
  const bool measure = autotune::enabled() && !capturing;
  std::unique_lock lock(device->mutex);
  // cuDNN's calls and the events run in this GPU's context (cudart's current device otherwise).
  runtime.context.make_current();
  Plan& plan = plans_of(index)[key];
  if (chosen == Mode::Auto && !plan.cudnn_chosen) {
    decide(plan, key, conv, measure, runtime, problem.op, kiln_path);
  }
  const bool wanted = chosen == Mode::Cudnn || plan.cudnn_chosen.value_or(false);
  if (wanted && !plan.searched) search(plan, conv, measure);
  if (wanted && plan.algorithm) {
    if (std::optional<TensorPtr> result = conv.run(*plan.algorithm)) {
      device->calls.fetch_add(1, std::memory_order_relaxed);
      return *result;
    }
    // cuDNN refused its own algorithm as it ran: kiln's path for this shape from now on.
    plan.algorithm.reset();
    plan.cudnn_chosen = false;
  }
  lock.unlock();
  return kiln_path();
}

}  // namespace kiln::cuda
