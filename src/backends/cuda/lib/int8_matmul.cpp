// int8 × int8 → int32 products through cuBLASLt (int8_matmul.h). A row-major C[m, n] is cuBLASLt's
// column-major n × m result of op(B) = T on B stored k × n (ld ldb) times op(A) = N on A stored
// k × m (ld lda): the TN form of its int8 kernels. Plans (descriptors and the algorithm) are kept
// per shape; one handle per device, one workspace per (device, stream). The algorithm is
// autotuned among the heuristic's best few as the float products' are (lt_autotune.h).
#include "backends/cuda/lib/int8_matmul.h"

#include <cublasLt.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/lib/lt_autotune.h"
#include "runtime/autotune.h"

namespace kiln::cuda::lib {

namespace {

constexpr const char* kOp = "int8_matmul";
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
constexpr std::int64_t kMaxK = std::int64_t{1} << 17;  // 2^17 * 127 * 128 < 2^31

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  LtChoice choice;  // the algorithm, autotuned (lt_autotune.h)
  std::mutex call;
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

using Key = std::tuple<int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                       std::int64_t>;

struct Registry {
  std::mutex mutex;
  std::unordered_map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::map<Key, std::unique_ptr<Plan>> plans;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: CUDA may be gone at static exit
  return *r;
}

std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, const Int8MatmulDesc& d, int device) {
  auto plan = std::make_unique<Plan>();
  KILN_CUDA_CHECK(kOp, cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32I, CUDA_R_32I));
  const cublasOperation_t transposed = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  KILN_CUDA_CHECK(kOp, cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &transposed, sizeof(transposed)));
  KILN_CUDA_CHECK(kOp, cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &plain,
                                                      sizeof(plain)));
  // cuBLASLt's A is our B (k × n stored, transposed), its B our A (k × m), its C ours (n × m).
  const auto rows = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  KILN_CUDA_CHECK(kOp,
                  cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_8I, rows(d.k), rows(d.n), d.ldb));
  KILN_CUDA_CHECK(kOp,
                  cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_8I, rows(d.k), rows(d.m), d.lda));
  KILN_CUDA_CHECK(kOp,
                  cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_32I, rows(d.n), rows(d.m), d.ldc));
  cublasLtMatmulPreference_t preference = nullptr;
  KILN_CUDA_CHECK(kOp, cublasLtMatmulPreferenceCreate(&preference));
  const std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                        cublasStatus_t (*)(cublasLtMatmulPreference_t)>
      owned(preference, cublasLtMatmulPreferenceDestroy);
  const std::uint64_t workspace = kWorkspaceBytes;
  KILN_CUDA_CHECK(kOp, cublasLtMatmulPreferenceSetAttribute(
                           preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                           sizeof(workspace)));
  std::array<cublasLtMatmulHeuristicResult_t, kLtAutotuneCandidates> results{};
  const int wanted = autotune::enabled() ? kLtAutotuneCandidates : 1;
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, plan->op, plan->a, plan->b, plan->c, plan->c,
                                     preference, wanted, results.data(), &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) {
    detail::fail<UnsupportedOperation>(kOp, "cuBLASLt has no int8 algorithm for m ", d.m, ", n ",
                                       d.n, ", k ", d.k, " (leading dims ", d.lda, ", ", d.ldb,
                                       ", ", d.ldc, ")");
  }
  KILN_CUDA_CHECK(kOp, status);
  plan->choice.key = detail::concat("int8_matmul m ", d.m, " n ", d.n, " k ", d.k, " ld ", d.lda,
                                    ",", d.ldb, ",", d.ldc, " | ", lt_machine_key(device, kOp));
  plan->choice.offer(results.data(), found);
  return plan;
}

}  // namespace

bool int8_matmul_supported(const Int8MatmulDesc& d, std::string* why) {
  const auto refuse = [&](const std::string& reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  if (d.m < 0 || d.n < 0 || d.k < 0) return refuse("negative size");
  // cuBLASLt's int8 kernels in the regular (column-major) order: its m (our n) and k, and every
  // leading dim, multiples of 4.
  if (d.n % 4 != 0 || d.k % 4 != 0 || d.lda % 4 != 0 || d.ldb % 4 != 0 || d.ldc % 4 != 0) {
    return refuse("n, k and the leading dims must be multiples of 4");
  }
  if (d.k > kMaxK) return refuse("k above 2^17: int32 sums could overflow");
  if (d.lda < d.k || d.ldb < d.k || d.ldc < d.n) {
    return refuse("a leading dim is smaller than its row");
  }
  return true;
}

void int8_matmul(const Int8MatmulDesc& d, const void* a, const void* b, void* c,
                 cudaStream_t stream) {
  std::string why;
  if (!int8_matmul_supported(d, &why)) {
    detail::fail<InvalidArgument>(kOp, why, " (m ", d.m, ", n ", d.n, ", k ", d.k,
                                  ", leading dims ", d.lda, ", ", d.ldb, ", ", d.ldc, ")");
  }
  if (d.m == 0 || d.n == 0) return;
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  if (!aligned(a) || !aligned(b) || !aligned(c)) {
    detail::fail<InvalidArgument>(kOp, "operands must be 16-byte aligned");
  }
  if (d.k == 0) {
    KILN_CUDA_CHECK(kOp, cudaMemset2DAsync(c, static_cast<std::size_t>(d.ldc) * 4, 0,
                                           static_cast<std::size_t>(d.n) * 4,
                                           static_cast<std::size_t>(d.m), stream));
    return;
  }
  int device = 0;
  KILN_CUDA_CHECK(kOp, cudaGetDevice(&device));
  Registry& r = registry();
  Plan* plan = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  {
    std::lock_guard lock(r.mutex);
    cublasLtHandle_t& h = r.handles[device];
    if (h == nullptr) KILN_CUDA_CHECK(kOp, cublasLtCreate(&h));
    handle = h;
    void*& ws = r.workspaces[{device, stream}];
    if (ws == nullptr) KILN_CUDA_CHECK(kOp, cudaMalloc(&ws, kWorkspaceBytes));
    workspace = ws;
    const Key key{device, d.m, d.n, d.k, d.lda, d.ldb, d.ldc};
    std::unique_ptr<Plan>& slot = r.plans[key];
    if (!slot) {
      try {
        slot = make_plan(handle, d, device);
      } catch (...) {
        r.plans.erase(key);
        throw;
      }
    }
    plan = slot.get();
  }
  const std::int32_t one = 1, zero = 0;
  std::lock_guard lock(plan->call);
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    KILN_CUDA_CHECK(
        kOp, cublasLtMatmul(handle, plan->op, &one, b, plan->a, a, plan->b, &zero, c, plan->c, c,
                            plan->c, &algo, workspace, kWorkspaceBytes, stream));
  };
  run(plan->choice.settle(run, stream, kOp));
}

}  // namespace kiln::cuda::lib
