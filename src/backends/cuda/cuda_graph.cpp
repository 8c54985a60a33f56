// Capture on cuda (kiln/graph.h): the region's work becomes a CUDA graph through a stream capture
// of the device's one stream, its memory a pool the allocator keeps for the graph alone, and a
// replay is one cuGraphLaunch.
#include <memory>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/shutdown.h"

namespace kiln::cuda {
namespace {

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(Runtime& runtime, CUgraph graph, CUgraphExec exec,
            std::shared_ptr<Allocator::Pool> pool)
      : runtime_(runtime), graph_(graph), exec_(exec), pool_(std::move(pool)) {}
  ~CudaGraph() override {
    if (shutdown::exiting()) return;  // the driver may be gone; the process takes the memory
    runtime_.context.make_current();
    cuGraphExecDestroy(exec_);
    cuGraphDestroy(graph_);
    runtime_.allocator.release_pool(*pool_);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void launch() override {
    runtime_.context.make_current();
    KILN_CUDA_CHECK("Graph::replay", cuGraphLaunch(exec_, runtime_.context.stream()));
  }

 private:
  Runtime& runtime_;
  CUgraph graph_;
  CUgraphExec exec_;
  std::shared_ptr<Allocator::Pool> pool_;
};

}  // namespace

void CudaBackend::begin_device_capture() {
  runtime_.allocator.begin_pool();
  try {
    runtime_.context.begin_capture("capture");
  } catch (...) {
    runtime_.allocator.release_pool(*runtime_.allocator.end_pool());
    throw;
  }
}

std::unique_ptr<DeviceGraph> CudaBackend::end_device_capture(bool keep) {
  const char* op = "capture";
  CUgraph graph = nullptr;
  try {
    graph = runtime_.context.end_capture(keep, op);
  } catch (...) {
    runtime_.allocator.release_pool(*runtime_.allocator.end_pool());
    throw;
  }
  std::shared_ptr<Allocator::Pool> pool = runtime_.allocator.end_pool();
  if (graph == nullptr) {
    runtime_.allocator.release_pool(*pool);
    return nullptr;
  }
  CUgraphExec exec = nullptr;
  const CUresult status = cuGraphInstantiateWithFlags(&exec, graph, 0);
  if (status != CUDA_SUCCESS) {
    cuGraphDestroy(graph);
    runtime_.allocator.release_pool(*pool);
    check(status, op, "cuGraphInstantiateWithFlags");
  }
  return std::make_unique<CudaGraph>(runtime_, graph, exec, std::move(pool));
}

}  // namespace kiln::cuda
