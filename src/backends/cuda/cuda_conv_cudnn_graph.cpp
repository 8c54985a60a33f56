// Convolutions through cuDNN's graph ("backend") API (conv_cudnn.h): one convolution node as an
// operation graph, the engines cuDNN's heuristic ranks for it, an execution plan per engine, and
// the call. The legacy calls (cuda_conv_cudnn.cpp) reach only cuDNN's older kernels; for 16-bit
// data the engines here include the runtime-compiled ones torch runs, at 2-2.5x their speed.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backends/cuda/conv_cudnn.h"
#include "backends/cuda/conv_cudnn_layout.h"

namespace kiln::cuda::cudnn {
namespace {

// The tensors' unique ids in the graph and the variant pack.
constexpr std::int64_t kXId = 'x', kWId = 'w', kYId = 'y';

// A descriptor of the graph API, destroyed with this (unless released to a GraphPlan).
class Descriptor {
 public:
  Descriptor(const Api& api, DescriptorType type) : api_(api) {
    ok_ = api.backend_create(type, &handle_) == Status::Success;
  }
  ~Descriptor() {
    if (handle_ != nullptr) api_.backend_destroy(handle_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor(Descriptor&& other) noexcept
      : api_(other.api_), handle_(std::exchange(other.handle_, nullptr)), ok_(other.ok_) {}

  BackendDescriptor get() const { return handle_; }
  BackendDescriptor release() { return std::exchange(handle_, nullptr); }
  bool ok() const { return ok_; }

  // Sets an attribute (a failure makes ok() false: the chain of sets is checked once).
  template <class T>
  Descriptor& set(Attribute name, AttributeType type, const T* values, std::int64_t count = 1) {
    ok_ = ok_ && api_.backend_set(handle_, name, type, count, values) == Status::Success;
    return *this;
  }
  Descriptor& set(Attribute name, const Descriptor& value) {
    const BackendDescriptor d = value.get();
    ok_ = ok_ && value.ok();
    return set(name, AttributeType::Descriptor, &d);
  }
  Descriptor& set(Attribute name, const std::vector<std::int64_t>& values) {
    return set(name, AttributeType::Int64, values.data(), static_cast<std::int64_t>(values.size()));
  }
  bool finalize() {
    ok_ = ok_ && api_.backend_finalize(handle_) == Status::Success;
    return ok_;
  }

 private:
  const Api& api_;
  BackendDescriptor handle_ = nullptr;
  bool ok_ = false;
};

// The graph node of a direction: its descriptor type and the attributes that name the image x,
// the filter w and the windows' side y (whichever of them it writes), the convolution, alpha and
// beta.
struct Node {
  DescriptorType type;
  Attribute x, w, y, convolution, alpha, beta;
};
Node node_of(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::Forward:
      break;
    case ConvDirection::BackwardData:
      return {DescriptorType::ConvolutionBackwardData,
              Attribute::BackwardDataDx,
              Attribute::BackwardDataW,
              Attribute::BackwardDataDy,
              Attribute::BackwardDataConvolution,
              Attribute::BackwardDataAlpha,
              Attribute::BackwardDataBeta};
    case ConvDirection::BackwardFilter:
      return {DescriptorType::ConvolutionBackwardFilter,
              Attribute::BackwardFilterX,
              Attribute::BackwardFilterDw,
              Attribute::BackwardFilterDy,
              Attribute::BackwardFilterConvolution,
              Attribute::BackwardFilterAlpha,
              Attribute::BackwardFilterBeta};
  }
  return {DescriptorType::ConvolutionForward,
          Attribute::ForwardX,
          Attribute::ForwardW,
          Attribute::ForwardY,
          Attribute::ForwardConvolution,
          Attribute::ForwardAlpha,
          Attribute::ForwardBeta};
}

std::vector<std::int64_t> widened(const std::vector<int>& values) {
  return {values.begin(), values.end()};
}

// Whether kiln takes an engine: deterministic (kiln's own path is, and a CUDA graph's replays
// give its eager run's bits), inputs not converted down, sums in f32.
bool acceptable_engine(const Api& api, BackendDescriptor config) {
  Descriptor engine(api, DescriptorType::Engine);
  if (!engine.ok()) return false;
  BackendDescriptor handle = engine.get();
  std::int64_t count = 0;
  if (api.backend_get(config, Attribute::EngineConfigEngine, AttributeType::Descriptor, 1, &count,
                      &handle) != Status::Success ||
      count != 1) {
    return false;
  }
  std::array<NumericalNote, 16> notes{};
  if (api.backend_get(engine.get(), Attribute::EngineNumericalNotes, AttributeType::NumericalNote,
                      static_cast<std::int64_t>(notes.size()), &count,
                      notes.data()) != Status::Success) {
    return false;
  }
  for (std::int64_t i = 0; i < std::min<std::int64_t>(count, notes.size()); ++i) {
    const NumericalNote note = notes[static_cast<std::size_t>(i)];
    if (note == NumericalNote::Nondeterministic || note == NumericalNote::DownConvertInputs ||
        note == NumericalNote::ReducedPrecisionReduction) {
      return false;
    }
  }
  return true;
}

}  // namespace

GraphMode graph_mode(const char* op) {
  const char* text = std::getenv("KILN_CUDNN_GRAPH");
  if (text == nullptr || *text == '\0' || std::strcmp(text, "1") == 0) return GraphMode::Compete;
  if (std::strcmp(text, "0") == 0) return GraphMode::Legacy;
  if (std::strcmp(text, "only") == 0) return GraphMode::Only;
  detail::fail<InvalidArgument>(op, "KILN_CUDNN_GRAPH must be 1, 0 or only, got \"", text, "\"");
}

bool Convolution::graph_allowed() const {
  // The graph path's tensors are 16-bit with f32 sums; f32 and f64 keep the legacy calls, whose
  // FFT and Winograd algorithms already beat the alternatives there.
  if (problem_.dtype != DType::F16 && problem_.dtype != DType::BF16) return false;
  // A plan made inside a CUDA graph capture would compile and allocate there: only plans made
  // before run in one (the route keeps them).
  return graph_mode(problem_.op) != GraphMode::Legacy && !backend_.runtime().context.capturing();
}

Layout Convolution::graph_written_layout() const {
  const CudaTensor* image =
      problem_.direction == ConvDirection::BackwardData ? problem_.y : problem_.x;
  return image != nullptr && layout_of(*image) == Layout::Nhwc ? Layout::Nhwc : Layout::Nchw;
}

std::vector<Algorithm> Convolution::graph_plans(int limit, int only) {
  std::vector<Algorithm> plans;
  if (!expressible_ || limit <= 0) return plans;
  const Api& api = cudnn_.library->api;
  Handle handle = cudnn_.handle;
  const ConvProblem& p = problem_;
  // The operands' layouts as prepare(false, true) leaves them: read ones as they lie when packed
  // (either order), copied ones packed channels-first, the written one graph_written_layout().
  auto layout = [&](const CudaTensor* t) {
    if (t == nullptr) return graph_written_layout();
    const Layout l = layout_of(*t);
    return l == Layout::Copy ? Layout::Nchw : l;
  };
  const DataType type = data_type(p.dtype);
  auto tensor = [&](std::int64_t id, const std::vector<int>& sizes, Layout l) {
    Descriptor t(api, DescriptorType::Tensor);
    const std::int64_t alignment = 16;
    t.set(Attribute::TensorDataType, AttributeType::DataType, &type)
        .set(Attribute::TensorDimensions, widened(sizes))
        .set(Attribute::TensorStrides, widened(strides_of(sizes, l)))
        .set(Attribute::TensorUniqueId, AttributeType::Int64, &id)
        .set(Attribute::TensorAlignment, AttributeType::Int64, &alignment)
        .finalize();
    return t;
  };
  Descriptor x = tensor(kXId, x_sizes_, layout(p.x));
  Descriptor w = tensor(kWId, w_sizes_, layout(p.w));
  Descriptor y = tensor(kYId, y_sizes_, layout(p.y));

  Descriptor conv(api, DescriptorType::Convolution);
  const DataType compute = DataType::Float;
  const ConvolutionMode mode = ConvolutionMode::CrossCorrelation;
  const std::int64_t spatial = dims_ - 2;
  conv.set(Attribute::ConvolutionComputeType, AttributeType::DataType, &compute)
      .set(Attribute::ConvolutionMode, AttributeType::ConvolutionMode, &mode)
      .set(Attribute::ConvolutionSpatialDims, AttributeType::Int64, &spatial)
      .set(Attribute::ConvolutionDilations, widened(dilation_))
      .set(Attribute::ConvolutionStrides, widened(stride_))
      .set(Attribute::ConvolutionPrePaddings, widened(padding_))
      .set(Attribute::ConvolutionPostPaddings, widened(padding_))
      .finalize();

  const float alpha = 1, beta = 0;
  const Node node = node_of(p.direction);
  Descriptor operation(api, node.type);
  operation.set(node.x, x)
      .set(node.w, w)
      .set(node.y, y)
      .set(node.convolution, conv)
      .set(node.alpha, AttributeType::Float, &alpha)
      .set(node.beta, AttributeType::Float, &beta);
  if (!operation.finalize()) return plans;

  Descriptor graph(api, DescriptorType::OperationGraph);
  graph.set(Attribute::GraphOperations, operation)
      .set(Attribute::GraphHandle, AttributeType::Handle, &handle)
      .finalize();
  Descriptor heuristics(api, DescriptorType::EngineHeuristics);
  const HeuristicsMode heuristics_mode = HeuristicsMode::A;
  heuristics.set(Attribute::HeuristicsGraph, graph)
      .set(Attribute::HeuristicsMode, AttributeType::HeuristicsMode, &heuristics_mode)
      .finalize();
  if (!heuristics.ok()) return plans;

  // The ranked engine configurations, into descriptors made for them.
  std::int64_t count = 0;
  if (api.backend_get(heuristics.get(), Attribute::HeuristicsResults, AttributeType::Descriptor, 0,
                      &count, nullptr) != Status::Success ||
      count <= 0) {
    return plans;
  }
  std::vector<Descriptor> configs;
  std::vector<BackendDescriptor> handles;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(api, DescriptorType::EngineConfig);
    if (!configs.back().ok()) return plans;
    handles.push_back(configs.back().get());
  }
  std::int64_t returned = 0;
  if (api.backend_get(heuristics.get(), Attribute::HeuristicsResults, AttributeType::Descriptor,
                      count, &returned, handles.data()) != Status::Success) {
    return plans;
  }
  for (std::int64_t i = 0; i < std::min(returned, count); ++i) {
    if (static_cast<int>(plans.size()) >= limit) break;
    if (only >= 0 && i != only) continue;
    const Descriptor& config = configs[static_cast<std::size_t>(i)];
    if (!acceptable_engine(api, config.get())) continue;
    Descriptor plan(api, DescriptorType::ExecutionPlan);
    plan.set(Attribute::PlanHandle, AttributeType::Handle, &handle)
        .set(Attribute::PlanEngineConfig, config)
        .finalize();
    std::int64_t workspace = 0, got = 0;
    if (!plan.ok() ||
        api.backend_get(plan.get(), Attribute::PlanWorkspaceSize, AttributeType::Int64, 1, &got,
                        &workspace) != Status::Success ||
        workspace < 0 || static_cast<std::size_t>(workspace) > kMaxWorkspaceBytes) {
      continue;
    }
    auto kept = std::make_shared<GraphPlan>();
    kept->api = &api;
    kept->plan = plan.release();
    kept->workspace = static_cast<std::size_t>(workspace);
    Algorithm algorithm;
    algorithm.engine = static_cast<int>(i);
    algorithm.workspace = kept->workspace;
    algorithm.graph = std::move(kept);
    plans.push_back(std::move(algorithm));
  }
  return plans;
}

std::optional<TensorPtr> Convolution::run_graph(const Algorithm& algorithm) {
  if (algorithm.graph == nullptr) return std::nullopt;
  Runtime& runtime = backend_.runtime();
  const char* op = problem_.op;
  const Api& api = cudnn_.library->api;
  const GraphPlan& plan = *algorithm.graph;
  const Operands o = prepare(false, true);
  std::optional<Workspace> workspace;
  if (plan.workspace > 0) workspace.emplace(runtime, plan.workspace, op);
  void* space = workspace ? workspace->get() : nullptr;
  Descriptor pack(api, DescriptorType::VariantPack);
  const std::int64_t ids[] = {kXId, kWId, kYId};
  void* pointers[] = {o.x_data(), o.w_data(), o.y_data()};
  pack.set(Attribute::VariantUniqueIds, AttributeType::Int64, ids, 3)
      .set(Attribute::VariantDataPointers, AttributeType::VoidPointer, pointers, 3)
      .set(Attribute::VariantWorkspace, AttributeType::VoidPointer, &space)
      .finalize();
  if (!pack.ok()) return std::nullopt;
  lib_stream(runtime);  // every launch queued before (the copies) goes to the driver first
  return finish(api.backend_execute(cudnn_.handle, plan.plan, pack.get()), o);
}

}  // namespace kiln::cuda::cudnn
