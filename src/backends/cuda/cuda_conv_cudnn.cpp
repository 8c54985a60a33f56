// cuDNN's side of the convolutions (conv_cudnn.h): the descriptors of a problem, cuDNN's
// algorithms for it, and the call.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <limits>

#include "backends/cuda/conv_cudnn.h"
#include "backends/cuda/conv_cudnn_layout.h"
#include "backends/cuda/lib/event_timer.h"
#include "backends/cuda/lib_call.h"
#include "contract/spatial_shape.h"

namespace kiln::cuda::cudnn {
namespace {

// The graph API's engines timed against the legacy API's best when choosing.
constexpr int kGraphCandidates = 4;
// cuDNN's tensors hold fewer than 2^31 elements, and their sizes and strides are ints.
constexpr std::int64_t kMaxElements = std::int64_t{INT_MAX};

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::Nchw:
      return "nchw";
    case Layout::Nhwc:
      return "nhwc";
    case Layout::Copy:
      return "copy";
  }
  return "?";
}

// The tensor cuDNN sees: a 1-D convolution's shape with a spatial dim of 1 in front. Empty when
// a size is out of cuDNN's range.
std::vector<int> sizes_of(const Shape& shape, int dims) {
  std::vector<int> sizes;
  std::int64_t elements = 1;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    if (static_cast<int>(d) == 2 && static_cast<int>(shape.rank()) < dims) sizes.push_back(1);
    if (shape[d] < 1 || shape[d] > kMaxElements) return {};
    elements *= shape[d];
    if (elements > kMaxElements) return {};
    sizes.push_back(static_cast<int>(shape[d]));
  }
  return sizes;
}

// An algorithm's perf result as kiln takes it: it ran (or may run), deterministically, in an
// allowed math, within the workspace given.
template <class Allowed>
std::vector<AlgoPerf> acceptable(const std::vector<AlgoPerf>& results, std::size_t workspace,
                                 const Allowed& allowed) {
  std::vector<AlgoPerf> kept;
  for (const AlgoPerf& perf : results) {
    if (perf.status == Status::Success && perf.determinism == Determinism::Deterministic &&
        allowed(perf.math_type) && perf.memory <= workspace) {
      kept.push_back(perf);
    }
  }
  return kept;
}

}  // namespace

std::string encode(const Algorithm& algorithm) {
  if (algorithm.engine >= 0) return detail::concat("cudnn graph engine=", algorithm.engine);
  return detail::concat("cudnn algo=", algorithm.algo, " math=", static_cast<int>(algorithm.math),
                        " packed=", algorithm.packed ? 1 : 0);
}

std::optional<Algorithm> decode(const std::string& text) {
  int engine = 0, used = 0;
  if (std::sscanf(text.c_str(), "cudnn graph engine=%d%n", &engine, &used) == 1) {
    if (static_cast<std::size_t>(used) != text.size() || engine < 0) return std::nullopt;
    Algorithm algorithm;
    algorithm.engine = engine;
    return algorithm;
  }
  int algo = 0, math = 0, packed = 0;
  used = 0;
  if (std::sscanf(text.c_str(), "cudnn algo=%d math=%d packed=%d%n", &algo, &math, &packed,
                  &used) != 3 ||
      static_cast<std::size_t>(used) != text.size() || algo < 0 || math < 0 || math > 3 ||
      (packed != 0 && packed != 1)) {
    return std::nullopt;
  }
  Algorithm algorithm;
  algorithm.algo = algo;
  algorithm.math = static_cast<MathType>(math);
  algorithm.packed = packed == 1;
  return algorithm;
}

// The four descriptors of one call, destroyed with it; ok once all are set.
struct Convolution::Descriptors {
  const Api& api;
  TensorDescriptor x = nullptr;
  FilterDescriptor w = nullptr;
  TensorDescriptor y = nullptr;
  ConvolutionDescriptor conv = nullptr;
  bool ok = false;

  Descriptors(const Convolution& c, bool packed, MathType math) : api(c.cudnn_.library->api) {
    const ConvProblem& p = c.problem_;
    // The operands read keep a channels-last layout unless packed; all else is channels-first.
    auto layout = [&](const CudaTensor* t) {
      return t != nullptr && !packed && layout_of(*t) == Layout::Nhwc ? Layout::Nhwc : Layout::Nchw;
    };
    const DataType type = data_type(p.dtype);
    const std::vector<int> x_strides = strides_of(c.x_sizes_, layout(p.x));
    const std::vector<int> y_strides = strides_of(c.y_sizes_, layout(p.y));
    ok = api.create_tensor(&x) == Status::Success && api.create_filter(&w) == Status::Success &&
         api.create_tensor(&y) == Status::Success &&
         api.create_convolution(&conv) == Status::Success &&
         api.set_tensor(x, type, c.dims_, c.x_sizes_.data(), x_strides.data()) == Status::Success &&
         api.set_filter(w, type, TensorFormat::Nchw, c.dims_, c.w_sizes_.data()) ==
             Status::Success &&
         api.set_tensor(y, type, c.dims_, c.y_sizes_.data(), y_strides.data()) == Status::Success &&
         api.set_convolution(conv, c.dims_ - 2, c.padding_.data(), c.stride_.data(),
                             c.dilation_.data(), ConvolutionMode::CrossCorrelation,
                             p.dtype == DType::F64 ? DataType::Double : DataType::Float) ==
             Status::Success &&
         api.set_group_count(conv, static_cast<int>(p.groups)) == Status::Success &&
         api.set_math_type(conv, math) == Status::Success;
  }
  ~Descriptors() {
    if (x != nullptr) api.destroy_tensor(x);
    if (w != nullptr) api.destroy_filter(w);
    if (y != nullptr) api.destroy_tensor(y);
    if (conv != nullptr) api.destroy_convolution(conv);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

Convolution::Convolution(CudaBackend& backend, DeviceCudnn& cudnn, const ConvProblem& problem)
    : backend_(backend), cudnn_(cudnn), problem_(problem) {
  const ConvProblem& p = problem;
  const std::size_t rank = p.x_shape.rank(), spatial_dims = rank - 2;
  if (rank < 3 || rank > 5 || p.w_shape.rank() != rank || p.y_shape.rank() != rank) return;
  if (p.dtype != DType::F32 && p.dtype != DType::F16 && p.dtype != DType::BF16 &&
      p.dtype != DType::F64) {
    return;
  }
  if (p.stride.size() != spatial_dims || p.padding.size() != spatial_dims ||
      p.dilation.size() != spatial_dims || p.groups < 1 || p.groups > kMaxElements) {
    return;
  }
  dims_ = spatial_dims == 1 ? 4 : static_cast<int>(rank);
  x_sizes_ = sizes_of(p.x_shape, dims_);
  w_sizes_ = sizes_of(p.w_shape, dims_);
  y_sizes_ = sizes_of(p.y_shape, dims_);
  if (x_sizes_.empty() || w_sizes_.empty() || y_sizes_.empty()) return;
  // The shapes of one convolution: batch, channels per group, and each window's positions.
  const Shape& x = p.x_shape;
  const Shape& w = p.w_shape;
  const Shape& y = p.y_shape;
  if (x[0] != y[0] || x[1] != w[1] * p.groups || y[1] != w[0] || w[0] % p.groups != 0) return;
  if (spatial_dims == 1) {
    stride_ = {1};
    padding_ = {0};
    dilation_ = {1};
  }
  for (std::size_t i = 0; i < spatial_dims; ++i) {
    const std::int64_t s = p.stride[i], pad = p.padding[i], d = p.dilation[i];
    if (s < 1 || s > kMaxElements || pad < 0 || pad > kMaxElements || d < 1 || d > kMaxElements) {
      return;
    }
    if (spatial::conv_output_size(x[i + 2], w[i + 2], s, pad, d) != y[i + 2]) return;
    stride_.push_back(static_cast<int>(s));
    padding_.push_back(static_cast<int>(pad));
    dilation_.push_back(static_cast<int>(d));
  }
  tf32_ = p.dtype == DType::F32 && backend.runtime().device().allow_tf32();
  expressible_ = true;
}

std::string Convolution::layouts() const {
  const std::pair<const char*, const CudaTensor*> operands[] = {
      {"x", problem_.x}, {"w", problem_.w}, {"y", problem_.y}};
  std::string text;
  for (const auto& [name, t] : operands) {
    if (t == nullptr) continue;
    text += detail::concat(text.empty() ? "" : " ", name, " ", layout_name(layout_of(*t)));
  }
  return text;
}

std::string Convolution::precision() const {
  if (problem_.dtype != DType::F32) return {};
  return tf32_ ? "tf32" : "fma";
}

bool Convolution::allowed(MathType math) const {
  // Never f32 products in a 16-bit type; f32 on tensor cores (tf32) only when the device allows.
  if (math == MathType::TensorOpAllowConversion) return false;
  return problem_.dtype != DType::F32 || tf32_ || math == MathType::Fma;
}

Convolution::Operands Convolution::prepare(bool packed, bool graph) {
  const char* op = problem_.op;
  auto read = [&](const CudaTensor* t, bool filter, TensorPtr& copy) {
    if (t == nullptr) return;
    const Layout layout = layout_of(*t);
    if (layout == Layout::Nchw || (layout == Layout::Nhwc && !packed && (graph || !filter))) {
      return;
    }
    copy = backend_.make_tensor(t->dtype(), t->shape(), op);
    backend_.copy_into(*copy, *t, op);
  };
  Operands o;
  o.x_read = problem_.x;
  o.w_read = problem_.w;
  o.y_read = problem_.y;
  read(problem_.x, false, o.x);
  read(problem_.w, true, o.w);
  read(problem_.y, false, o.y);
  // The written tensor: packed channels-first, or channels-last where the graph API writes it so.
  const bool channels_last = graph && graph_written_layout() == Layout::Nhwc;
  auto written = [&](const Shape& shape) {
    if (!channels_last) return backend_.make_tensor(problem_.dtype, shape, op);
    const TensorPtr storage = backend_.make_tensor(problem_.dtype, Shape{shape.num_elements()}, op);
    return make_view(*storage, shape, packed_strides<Strides>(shape, shape.rank(), Layout::Nhwc),
                     0);
  };
  switch (problem_.direction) {
    case ConvDirection::Forward:
      o.y = written(problem_.y_shape);
      break;
    case ConvDirection::BackwardData:
      o.x = written(problem_.x_shape);
      break;
    case ConvDirection::BackwardFilter:
      o.w = written(problem_.w_shape);
      break;
  }
  return o;
}

std::optional<std::size_t> Convolution::workspace_bytes(const Descriptors& d, int algo) {
  const Api& api = d.api;
  Handle handle = cudnn_.handle;
  std::size_t bytes = 0;
  Status status = Status::NotSupported;
  switch (problem_.direction) {
    case ConvDirection::Forward:
      status = api.forward_workspace(handle, d.x, d.w, d.conv, d.y, algo, &bytes);
      break;
    case ConvDirection::BackwardData:
      status = api.backward_data_workspace(handle, d.w, d.y, d.conv, d.x, algo, &bytes);
      break;
    case ConvDirection::BackwardFilter:
      status = api.backward_filter_workspace(handle, d.x, d.y, d.conv, d.w, algo, &bytes);
      break;
  }
  if (status != Status::Success || bytes > kMaxWorkspaceBytes) return std::nullopt;
  return bytes;
}

std::vector<AlgoPerf> Convolution::candidates(const Descriptors& d, const Operands* o,
                                              void* workspace, std::size_t workspace_bytes) {
  const Api& api = d.api;
  Handle handle = cudnn_.handle;
  int count = 0;
  Status status = Status::NotSupported;
  switch (problem_.direction) {
    case ConvDirection::Forward:
      status = api.forward_count(handle, &count);
      break;
    case ConvDirection::BackwardData:
      status = api.backward_data_count(handle, &count);
      break;
    case ConvDirection::BackwardFilter:
      status = api.backward_filter_count(handle, &count);
      break;
  }
  if (status != Status::Success || count <= 0) return {};
  std::vector<AlgoPerf> results(static_cast<std::size_t>(count));
  int returned = 0;
  AlgoPerf* out = results.data();
  switch (problem_.direction) {
    case ConvDirection::Forward:
      status =
          o == nullptr
              ? api.forward_heuristic(handle, d.x, d.w, d.conv, d.y, count, &returned, out)
              : api.forward_find(handle, d.x, o->x_data(), d.w, o->w_data(), d.conv, d.y,
                                 o->y_data(), count, &returned, out, workspace, workspace_bytes);
      break;
    case ConvDirection::BackwardData:
      status = o == nullptr ? api.backward_data_heuristic(handle, d.w, d.y, d.conv, d.x, count,
                                                          &returned, out)
                            : api.backward_data_find(handle, d.w, o->w_data(), d.y, o->y_data(),
                                                     d.conv, d.x, o->x_data(), count, &returned,
                                                     out, workspace, workspace_bytes);
      break;
    case ConvDirection::BackwardFilter:
      status = o == nullptr ? api.backward_filter_heuristic(handle, d.x, d.y, d.conv, d.w, count,
                                                            &returned, out)
                            : api.backward_filter_find(handle, d.x, o->x_data(), d.y, o->y_data(),
                                                       d.conv, d.w, o->w_data(), count, &returned,
                                                       out, workspace, workspace_bytes);
      break;
  }
  if (status != Status::Success) return {};
  results.resize(static_cast<std::size_t>(std::clamp(returned, 0, count)));
  return results;
}

std::optional<Algorithm> Convolution::best(bool measure) {
  if (!expressible_) return std::nullopt;
  if (!graph_allowed()) return best_legacy(measure);
  const bool only = graph_mode(problem_.op) == GraphMode::Only;
  if (!measure) {
    std::vector<Algorithm> first = graph_plans(1);
    if (!first.empty()) return std::move(first.front());
    return only ? std::nullopt : best_legacy(false);
  }
  // Each candidate timed as the whole op (copies and all), on the stream, after a first call.
  std::vector<Algorithm> candidates = graph_plans(kGraphCandidates);
  if (std::optional<Algorithm> legacy = only ? std::nullopt : best_legacy(true)) {
    candidates.push_back(std::move(*legacy));
  }
  if (candidates.size() <= 1) {
    if (candidates.empty()) return std::nullopt;
    return std::move(candidates.front());
  }
  Runtime& runtime = backend_.runtime();
  lib::EventTimer timer(problem_.op);
  double best_seconds = std::numeric_limits<double>::infinity();
  std::size_t chosen = candidates.size();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    double seconds = std::numeric_limits<double>::infinity();
    try {
      bool ran = true;
      seconds = timer.seconds([&] { ran = run(candidates[i]).has_value(); },
                              [&] { return lib_stream(runtime); });
      if (!ran) seconds = std::numeric_limits<double>::infinity();
    } catch (const OutOfMemory&) {
    } catch (const ExecutionError&) {
      // An engine that fails as it runs is not a candidate; the others may still serve.
    }
    if (seconds < best_seconds) {
      best_seconds = seconds;
      chosen = i;
    }
  }
  if (chosen == candidates.size()) return std::nullopt;
  return std::move(candidates[chosen]);
}

std::optional<Algorithm> Convolution::best_legacy(bool measure) {
  Runtime& runtime = backend_.runtime();
  const MathType math = problem_.dtype == DType::F64   ? MathType::Default
                        : problem_.dtype != DType::F32 ? MathType::TensorOp
                        : tf32_                        ? MathType::TensorOp
                                                       : MathType::Fma;
  auto in_math = [&](MathType m) { return allowed(m); };
  // The operands as they are; again packed when a channels-last one left cuDNN without choice.
  bool channels_last = false;
  for (const CudaTensor* t : {problem_.x, problem_.w, problem_.y}) {
    channels_last = channels_last || (t != nullptr && layout_of(*t) == Layout::Nhwc);
  }
  for (const bool packed : {false, true}) {
    if (packed && !channels_last) break;
    const Descriptors d(*this, packed, math);
    if (!d.ok) continue;
    std::vector<AlgoPerf> found =
        acceptable(candidates(d, nullptr, nullptr, 0), kMaxWorkspaceBytes, in_math);
    if (found.empty()) continue;
    if (measure) {
      // cuDNN times its algorithms on the operands, with as much workspace as the heuristic's
      // acceptable ones ask; it writes the result, which is scratch here.
      std::size_t bytes = 0;
      for (const AlgoPerf& perf : found) bytes = std::max(bytes, perf.memory);
      try {
        const Operands operands = prepare(packed);
        std::optional<Workspace> workspace;
        if (bytes > 0) workspace.emplace(runtime, bytes, problem_.op);
        lib_stream(runtime);  // the copies queued before cuDNN's runs
        std::vector<AlgoPerf> timed =
            acceptable(candidates(d, &operands, workspace ? workspace->get() : nullptr, bytes),
                       bytes, in_math);
        if (!timed.empty()) found = std::move(timed);
      } catch (const OutOfMemory&) {
        // No room to time them: the heuristic's order stands.
      }
    }
    for (const AlgoPerf& perf : found) {
      Algorithm algorithm;
      algorithm.algo = perf.algo;
      algorithm.math = perf.math_type;
      algorithm.packed = packed;
      if (usable(algorithm)) return algorithm;
    }
  }
  return std::nullopt;
}

bool Convolution::usable(Algorithm& algorithm) {
  if (algorithm.engine >= 0) {
    if (!expressible_ || !graph_allowed()) return false;
    if (algorithm.graph == nullptr) {
      std::vector<Algorithm> plan = graph_plans(1, algorithm.engine);
      if (plan.empty()) return false;
      algorithm = std::move(plan.front());
    }
    return true;
  }
  if (!expressible_ || !allowed(algorithm.math)) return false;
  const Descriptors d(*this, algorithm.packed, algorithm.math);
  if (!d.ok) return false;
  const std::optional<std::size_t> bytes = workspace_bytes(d, algorithm.algo);
  if (!bytes) return false;
  algorithm.workspace = *bytes;
  return true;
}

std::optional<TensorPtr> Convolution::run(const Algorithm& algorithm) {
  if (algorithm.engine >= 0) return run_graph(algorithm);
  Runtime& runtime = backend_.runtime();
  const char* op = problem_.op;
  // The math type is the algorithm's (cuDNN picks the kernel by both).
  const Descriptors d(*this, algorithm.packed, algorithm.math);
  if (!d.ok) return std::nullopt;
  const std::size_t bytes = algorithm.workspace;
  const Operands o = prepare(algorithm.packed);
  std::optional<Workspace> workspace;
  if (bytes > 0) workspace.emplace(runtime, bytes, op);
  void* space = workspace ? workspace->get() : nullptr;
  // alpha = 1, beta = 0: doubles for f64 data, floats for the others.
  const double one = 1, zero = 0;
  const float one_f = 1, zero_f = 0;
  const bool f64 = problem_.dtype == DType::F64;
  const void* alpha = f64 ? static_cast<const void*>(&one) : &one_f;
  const void* beta = f64 ? static_cast<const void*>(&zero) : &zero_f;
  const Api& api = d.api;
  Handle handle = cudnn_.handle;
  lib_stream(runtime);  // every launch queued before (the copies) goes to the driver first
  Status status = Status::NotSupported;
  switch (problem_.direction) {
    case ConvDirection::Forward:
      status = api.forward(handle, alpha, d.x, o.x_data(), d.w, o.w_data(), d.conv, algorithm.algo,
                           space, bytes, beta, d.y, o.y_data());
      break;
    case ConvDirection::BackwardData:
      status = api.backward_data(handle, alpha, d.w, o.w_data(), d.y, o.y_data(), d.conv,
                                 algorithm.algo, space, bytes, beta, d.x, o.x_data());
      break;
    case ConvDirection::BackwardFilter:
      status = api.backward_filter(handle, alpha, d.x, o.x_data(), d.y, o.y_data(), d.conv,
                                   algorithm.algo, space, bytes, beta, d.w, o.w_data());
      break;
  }
  return finish(status, o);
}

std::optional<TensorPtr> Convolution::finish(Status status, const Operands& o) {
  Runtime& runtime = backend_.runtime();
  const char* op = problem_.op;
  runtime.context.note_launch(op);
  if (refused(*cudnn_.library, status, op)) return std::nullopt;
  TensorPtr written;
  switch (problem_.direction) {
    case ConvDirection::Forward:
      written = o.y;
      break;
    case ConvDirection::BackwardData:
      written = o.x;
      break;
    case ConvDirection::BackwardFilter:
      written = o.w;
      break;
  }
  if (problem_.bias != nullptr) add_channel_bias(runtime, *written, *problem_.bias, op);
  return written;
}

bool refused(const Library& library, Status status, const char* op) {
  if (status == Status::Success) return false;
  const Status kind = category(status);
  if (kind == Status::BadParam || kind == Status::NotSupported) return true;
  const std::string what = describe(library, status);
  if (status == Status::DeviceAllocationFailed) {
    detail::fail<OutOfMemory>(op, "cuDNN's convolution failed: ", what);
  }
  detail::fail<ExecutionError>(op, "cuDNN's convolution failed: ", what);
}

}  // namespace kiln::cuda::cudnn
