// Convolutions through cuDNN (cuda_conv_cudnn.cpp) and the choice, per shape, between cuDNN and
// kiln's own im2col + cuBLASLt path (conv_route.cpp, cuda_conv.cpp).
//
// cuDNN's three convolution calls serve kiln's three ops: conv is cudnnConvolutionForward (the
// bias added after), conv_transpose (and so the data gradient, conv_x_backward's default) is
// cudnnConvolutionBackwardData, conv_weight_backward is cudnnConvolutionBackwardFilter. Each
// sees the image x, the filter w and the windows' side y of one forward convolution, 2-D or 3-D
// (a 1-D one gets a spatial dim of 1 in front). The operands read are given to cuDNN with their
// strides where they are packed channels-first or channels-last and 16-byte aligned, and copied
// to packed channels-first otherwise (also when cuDNN has no algorithm for the layout as it
// is); the filter is always packed. Only deterministic algorithms are taken (kiln's own path is
// deterministic, and a CUDA graph's replays give its eager run's bits); f32 uses tf32 tensor
// cores only when the device allows tf32, f16 and bf16 accumulate in f32, f64 is f64.
//
// KILN_CONV=cudnn takes cuDNN wherever it can run the op, KILN_CONV=kiln kiln's own path always;
// unset (or auto), the first call of each shape class times both and keeps the faster
// (runtime/autotune.h: remembered on disk per machine and cuDNN version; KILN_AUTOTUNE=0 or a
// CUDA graph capture: cuDNN's heuristic choice, nothing measured).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/conv_cudnn_layout.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cudnn_loader.h"
#include "backends/cuda/lib_call.h"

namespace kiln::cuda {

enum class ConvDirection { Forward, BackwardData, BackwardFilter };

// One convolution in cuDNN's terms: the image x [n, c, spatial...], the filter w [k, c / groups,
// kernel...] and the windows' side y [n, k, positions...] of a forward convolution with these
// windows. The op reads two and writes the third: Forward writes y (conv), BackwardData writes
// x (conv_transpose, whose input is y), BackwardFilter writes w (conv_weight_backward).
struct ConvProblem {
  const char* op = nullptr;
  ConvDirection direction = ConvDirection::Forward;
  DType dtype = DType::F32;
  Shape x_shape, w_shape, y_shape;
  // The operands read; null for the one written.
  const CudaTensor* x = nullptr;
  const CudaTensor* w = nullptr;
  const CudaTensor* y = nullptr;
  // One per spatial dim.
  std::vector<std::int64_t> stride, padding, dilation;
  std::int64_t groups = 1;
  // Added per channel to the result of Forward and BackwardData, when not null.
  const CudaTensor* bias = nullptr;
};

// y[n, c, ...] += bias[c] in place (y contiguous, bias any 1-d view): cuda_conv.cpp.
void add_channel_bias(Runtime& runtime, const CudaTensor& y, const CudaTensor& bias,
                      const char* op);

// The op's result through cuDNN or kiln_path(), as KILN_CONV and the choice for the problem's
// shape class say: conv_route.cpp.
TensorPtr convolve(CudaBackend& backend, const ConvProblem& problem,
                   const std::function<TensorPtr()>& kiln_path);

namespace cudnn {

// The most workspace an algorithm may ask for: as much as kiln's own path allows its columns.
inline constexpr std::size_t kMaxWorkspaceBytes = std::size_t{512} << 20;

// A finalised execution plan of cuDNN's graph API for one problem, its operands' layouts
// included, destroyed with the last Algorithm that holds it.
struct GraphPlan {
  const Api* api = nullptr;
  BackendDescriptor plan = nullptr;
  std::size_t workspace = 0;
  GraphPlan() = default;
  GraphPlan(const GraphPlan&) = delete;
  GraphPlan& operator=(const GraphPlan&) = delete;
  ~GraphPlan() {
    if (plan != nullptr) api->backend_destroy(plan);
  }
};

// One of cuDNN's algorithms for a problem, with the math type it runs in, whether every operand
// read is first copied to packed channels-first, and the workspace it needs there (asked of cuDNN
// once, when the algorithm is chosen: the same for every call of the shape class).
//
// Or, with engine >= 0, an engine of the graph API (cuDNN's runtime-compiled and fused kernels,
// which torch reaches and the legacy calls above do not): its place in the heuristic's list (mode
// A) for the problem, and the plan made for it. That path takes every operand read as it lies
// when packed channels-first or channels-last, the filter too.
struct Algorithm {
  int algo = 0;
  MathType math = MathType::Default;
  bool packed = false;
  std::size_t workspace = 0;
  int engine = -1;
  std::shared_ptr<const GraphPlan> graph;  // made by usable() or the search
};

// KILN_CUDNN_GRAPH, read at each op: for f16 and bf16, the graph API's engines compete with the
// legacy algorithms (unset or 1), are not asked (0), or alone are taken (only: the tests of that
// path). Another value is an InvalidArgument naming op.
enum class GraphMode { Compete, Legacy, Only };
GraphMode graph_mode(const char* op);

// Whether a failed call is cuDNN refusing the problem (a bad or unsupported parameter: nothing
// was written, kiln's path answers); false for a call that succeeded. Other failures throw,
// naming op: OutOfMemory for device memory, ExecutionError otherwise.
bool refused(const Library& library, Status status, const char* op);

// The autotune cache's words for an algorithm ("cudnn algo=1 math=3 packed=0", "cudnn graph
// engine=2"), and back (the workspace or the plan still to be made: Convolution::usable).
std::string encode(const Algorithm& algorithm);
std::optional<Algorithm> decode(const std::string& text);

// A problem as cuDNN will run it on one GPU. Every call uses the GPU's handle: the caller holds
// DeviceCudnn::mutex.
class Convolution {
 public:
  Convolution(CudaBackend& backend, DeviceCudnn& cudnn, const ConvProblem& problem);

  // Whether cuDNN can be asked at all: 1 to 3 spatial dims, no empty dim, sizes within cuDNN's
  // 32-bit limits (fewer than 2^31 elements a tensor), shapes that agree with the windows, a
  // float dtype. When not, kiln's own path runs.
  bool expressible() const noexcept { return expressible_; }
  // The layouts of the operands read, as the choice's key names them: "nchw" (packed
  // channels-first), "nhwc" (packed channels-last), "copy" (anything else: copied first).
  std::string layouts() const;
  // The math the device allows for the dtype: "fma" or "tf32" for f32, empty for the others.
  std::string precision() const;
  // cuDNN's best deterministic algorithm in the allowed math: timed by cuDNN (its Find
  // functions: synchronises, so never under a CUDA graph capture) when measure is set, else its
  // heuristic's first; the operands as they are first, packed when that gives none. For f16 and
  // bf16 the graph API's engines compete too (KILN_CUDNN_GRAPH=0: not): measured, the faster of
  // the legacy winner and the heuristic's first few engines, each timed as the whole op; not
  // measured, the heuristic's first engine. nullopt when cuDNN has none.
  std::optional<Algorithm> best(bool measure);
  // Whether algorithm runs here (a remembered choice: its math is allowed and cuDNN sizes its
  // workspace, which is kept in algorithm; a graph engine's plan is made and kept in it).
  bool usable(Algorithm& algorithm);
  // The op's result through algorithm, with the bias added; nullopt when cuDNN refuses it as it
  // runs (a bad or unsupported parameter), which leaves nothing written. Other failures throw.
  std::optional<TensorPtr> run(const Algorithm& algorithm);

 private:
  struct Descriptors;
  // The three tensors of one call: the ones read (copies where their layout asks) and the one
  // written (fresh, packed channels-first, or channels-last where the graph API writes it so).
  struct Operands {
    TensorPtr x, w, y;
    const CudaTensor* x_read = nullptr;
    const CudaTensor* w_read = nullptr;
    const CudaTensor* y_read = nullptr;
    const CudaTensor& x_tensor() const { return x ? *x : *x_read; }
    const CudaTensor& w_tensor() const { return w ? *w : *w_read; }
    const CudaTensor& y_tensor() const { return y ? *y : *y_read; }
    void* x_data() const { return device_address(x_tensor()); }
    void* w_data() const { return device_address(w_tensor()); }
    void* y_data() const { return device_address(y_tensor()); }
  };
  // The operands read, copied where the layout (or packed) asks, the filter kept channels-last
  // only for the graph API; the written one allocated.
  Operands prepare(bool packed, bool graph = false);
  // The legacy API's best (above).
  std::optional<Algorithm> best_legacy(bool measure);
  // The graph API (cuda_conv_cudnn_graph.cpp). Whether it may serve the problem here; its
  // engines' plans in the heuristic's order, at most `limit` (engines kiln refuses, or that
  // cannot be planned, skipped), or only the one at place `only`; the op through one of them.
  bool graph_allowed() const;
  // The layout the graph path writes its result in: channels-last when the image operand it
  // reads (x; y for the data gradient) lies so, as torch's convolutions keep a channels-last
  // input's layout, else channels-first. Mixed layouts cost cuDNN's engines transposes.
  Layout graph_written_layout() const;
  std::vector<Algorithm> graph_plans(int limit, int only = -1);
  // After either API's call returned status: the op's result (the operand the direction writes,
  // the bias added), or nullopt where cuDNN refused the call.
  std::optional<TensorPtr> finish(Status status, const Operands& o);
  std::optional<TensorPtr> run_graph(const Algorithm& algorithm);
  std::optional<std::size_t> workspace_bytes(const Descriptors& descriptors, int algo);
  std::vector<AlgoPerf> candidates(const Descriptors& descriptors, const Operands* operands,
                                   void* workspace, std::size_t workspace_bytes);
  bool allowed(MathType math) const;

  CudaBackend& backend_;
  DeviceCudnn& cudnn_;
  const ConvProblem& problem_;
  bool expressible_ = false;
  bool tf32_ = false;
  int dims_ = 0;  // of the tensors cuDNN sees: 4 or 5
  std::vector<int> x_sizes_, w_sizes_, y_sizes_;
  std::vector<int> stride_, padding_, dilation_;
};

}  // namespace cudnn
}  // namespace kiln::cuda
