// Capture on cuda (kiln/graph.h): the region's work becomes a CUDA graph through a stream capture
// of the device's one stream, its memory a pool the allocator keeps for the graph alone, and a
// replay is one cuGraphLaunch.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

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

// KILN_GRAPH_NODES=1: each captured graph's nodes by kind on stderr (kernels, copies, memsets),
// to see what a replay launches; =2: each kernel's name and grid too.
void describe_nodes(CUgraph graph) {
  static const int wanted = [] {
    const char* text = std::getenv("KILN_GRAPH_NODES");
    return text == nullptr || *text == '\0' ? 0 : std::atoi(text);
  }();
  if (wanted <= 0) return;
  std::size_t count = 0;
  if (cuGraphGetNodes(graph, nullptr, &count) != CUDA_SUCCESS) return;
  std::vector<CUgraphNode> nodes(count);
  if (cuGraphGetNodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return;
  std::size_t kernels = 0, copies = 0, sets = 0;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type{};
    if (cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) continue;
    kernels += type == CU_GRAPH_NODE_TYPE_KERNEL;
    CUDA_KERNEL_NODE_PARAMS params{};
    const char* name = nullptr;
    if (wanted >= 2 && type == CU_GRAPH_NODE_TYPE_KERNEL &&
        cuGraphKernelNodeGetParams(node, &params) == CUDA_SUCCESS &&
        cuFuncGetName(&name, params.func) == CUDA_SUCCESS && name != nullptr) {
      std::fprintf(stderr, "kiln capture:   kernel %s <<<%u, %u>>>\n", name, params.gridDimX,
                   params.blockDimX);
    }
    copies += type == CU_GRAPH_NODE_TYPE_MEMCPY;
    sets += type == CU_GRAPH_NODE_TYPE_MEMSET;
  }
  std::fprintf(stderr,
               "kiln capture: a CUDA graph of %zu nodes: %zu kernels, %zu copies, %zu memsets\n",
               count, kernels, copies, sets);
}

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
  describe_nodes(graph);
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
