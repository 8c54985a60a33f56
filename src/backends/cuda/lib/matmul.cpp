// cuBLASLt matmul on strided operands. cuBLASLt is column-major: a row-major C is computed as
// C^T = B^T · A^T, which makes cuBLASLt's M our n, so its bias (one value per row of D) is our
// per-column bias. Each operand becomes a column-major stored matrix with op N or op T.
#include "backends/cuda/lib/matmul.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/lib/lt_autotune.h"
#include "backends/cuda/lib/matmul_epilogue.h"
#include "runtime/autotune.h"

namespace kiln::cuda::lib {

namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // NVIDIA's advice for Hopper
constexpr int kAutotuneCandidates = kLtAutotuneCandidates;

// Autotuning: lt_autotune.h.
bool autotune_enabled() { return autotune::enabled(); }

// One operand as cuBLASLt sees it: a column-major stored matrix and whether to transpose it.
struct Stored {
  bool transposed = false;  // op T: the stored matrix is the operand's transpose
  std::int64_t rows = 0;    // of the stored matrix
  std::int64_t cols = 0;
  std::int64_t ld = 0;
};

// Logical r×c matrix with strides (rs, cs): stored column-major as itself (rows contiguous) or
// as its transpose (columns contiguous). Empty when neither axis is contiguous.
std::optional<Stored> as_stored(std::int64_t r, std::int64_t c, std::int64_t rs, std::int64_t cs,
                                bool prefer_transposed) {
  const auto as_is = [&]() -> std::optional<Stored> {
    if (r > 1 && rs != 1) return std::nullopt;
    const std::int64_t ld = c > 1 ? cs : std::max<std::int64_t>(r, 1);
    if (ld < std::max<std::int64_t>(r, 1)) return std::nullopt;
    return Stored{false, r, c, ld};
  };
  const auto transposed = [&]() -> std::optional<Stored> {
    if (c > 1 && cs != 1) return std::nullopt;
    const std::int64_t ld = r > 1 ? rs : std::max<std::int64_t>(c, 1);
    if (ld < std::max<std::int64_t>(c, 1)) return std::nullopt;
    return Stored{true, c, r, ld};
  };
  if (prefer_transposed) {
    if (auto t = transposed()) return t;
    return as_is();
  }
  if (auto s = as_is()) return s;
  return transposed();
}

bool has_bias(Epilogue e) {
  return e == Epilogue::Bias || e == Epilogue::BiasRelu || e == Epilogue::BiasGelu ||
         e == Epilogue::BiasGeluTanh;
}

Activation activation_of(Epilogue e) {
  switch (e) {
    case Epilogue::Relu:
    case Epilogue::BiasRelu:
      return Activation::Relu;
    case Epilogue::Gelu:
    case Epilogue::BiasGelu:
      return Activation::Gelu;
    case Epilogue::GeluTanh:
    case Epilogue::BiasGeluTanh:
      return Activation::GeluTanh;
    default:
      return Activation::None;
  }
}

// The cuBLASLt problem: D (M×N, column-major) = op(first) · op(second).
struct Problem {
  std::int64_t M = 0, N = 0, K = 0;
  Stored first, second, out;
  std::int64_t first_batch = 0, second_batch = 0, out_batch = 0;
  bool swapped = false;  // C^T = B^T A^T: B is the first cuBLASLt operand
};

// Maps desc onto cuBLASLt, or explains why it cannot.
std::optional<Problem> map_problem(const MatmulDesc& d, std::string* why) {
  auto say = [&](const char* text) {
    if (why != nullptr) *why = text;
    return std::nullopt;
  };
  if (d.batch > 1 && d.c.batch_stride == 0) return say("C is broadcast over the batch");
  // Nothing for cuBLASLt to do: C (if any) is written by the epilogue pass, which takes any
  // strides, and A and B are never read, so their (degenerate) layouts do not matter.
  if (d.m == 0 || d.n == 0 || d.k == 0 || d.batch == 0) return Problem{};
  // Row-major C first (C^T = B^T A^T); it is the only way a bias maps onto cuBLASLt's.
  if (auto ct = as_stored(d.m, d.n, d.c.row_stride, d.c.col_stride, true); ct && ct->transposed) {
    // B^T (n×k) from B (k×n) and A^T (k×m) from A (m×k): a stored transpose flips the op.
    auto b = as_stored(d.k, d.n, d.b.row_stride, d.b.col_stride, true);
    auto a = as_stored(d.m, d.k, d.a.row_stride, d.a.col_stride, true);
    if (!a) return say("A has no contiguous axis (or a leading dimension below its extent)");
    if (!b) return say("B has no contiguous axis (or a leading dimension below its extent)");
    Problem p{d.n, d.m, d.k, *b, *a, *ct, d.b.batch_stride, d.a.batch_stride, d.c.batch_stride};
    p.first.transposed = !b->transposed;  // op(stored) must be B^T
    p.second.transposed = !a->transposed;
    p.out.transposed = false;
    p.swapped = true;
    return p;
  }
  auto c = as_stored(d.m, d.n, d.c.row_stride, d.c.col_stride, false);
  if (!c) return say("C has no contiguous axis (or a leading dimension below its extent)");
  if (has_bias(d.epilogue)) return say("a bias epilogue needs C with contiguous rows");
  auto a = as_stored(d.m, d.k, d.a.row_stride, d.a.col_stride, false);
  auto b = as_stored(d.k, d.n, d.b.row_stride, d.b.col_stride, false);
  if (!a) return say("A has no contiguous axis (or a leading dimension below its extent)");
  if (!b) return say("B has no contiguous axis (or a leading dimension below its extent)");
  return Problem{d.m, d.n, d.k, *a, *b, *c, d.a.batch_stride, d.b.batch_stride, d.c.batch_stride};
}

void check_desc(const MatmulDesc& d) {
  if (d.m < 0 || d.n < 0 || d.k < 0 || d.batch < 0) {
    detail::fail<InvalidArgument>("matmul", "sizes m ", d.m, ", n ", d.n, ", k ", d.k, ", batch ",
                                  d.batch, " must not be negative");
  }
  if (d.dtype != DType::F32 && d.dtype != DType::F16 && d.dtype != DType::BF16 &&
      d.dtype != DType::F64) {
    detail::fail<UnsupportedDType>("matmul", "dtype ", dtype_name(d.dtype),
                                   " (cuBLASLt path takes f32, f16, bf16, f64)");
  }
  if (d.compute == MatmulCompute::Tf32 && d.dtype != DType::F32) {
    detail::fail<InvalidArgument>("matmul", "tf32 compute needs f32 operands, got ",
                                  dtype_name(d.dtype));
  }
  if (static_cast<int>(d.epilogue) > static_cast<int>(Epilogue::BiasGeluTanh)) {
    detail::fail<InvalidArgument>("matmul", "unknown epilogue ", static_cast<int>(d.epilogue));
  }
}

cudaDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return CUDA_R_64F;
    case DType::F16:
      return CUDA_R_16F;
    case DType::BF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// The largest power of two (up to 256) dividing the address: cuBLASLt picks kernels by it.
std::int64_t alignment_of(const void* p) {
  const auto bits = reinterpret_cast<std::uintptr_t>(p);
  std::int64_t a = 256;
  while (a > 1 && bits % static_cast<std::uintptr_t>(a) != 0) a /= 2;
  return a;
}

// Everything a plan depends on, as plain integers so equality and hashing are bytewise.
struct PlanKey {
  std::int64_t device, dtype, compute, epilogue, m, n, k, batch;
  std::int64_t a_rs, a_cs, a_bs, b_rs, b_cs, b_bs, c_rs, c_cs, c_bs;
  std::int64_t align_a, align_b, align_c, align_bias;
  bool operator==(const PlanKey& o) const { return std::memcmp(this, &o, sizeof(*this)) == 0; }
};
static_assert(std::has_unique_object_representations_v<PlanKey>);

struct PlanKeyHash {
  std::size_t operator()(const PlanKey& k) const {
    return std::hash<std::string_view>{}(
        std::string_view(reinterpret_cast<const char*>(&k), sizeof(k)));
  }
};

template <class T, cublasStatus_t (*Destroy)(T)>
struct LtDeleter {
  void operator()(T p) const { Destroy(p); }
};
using MatmulDescPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>,
                                      LtDeleter<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>>;
using LayoutPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>,
                                  LtDeleter<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>>;
using PreferencePtr =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                    LtDeleter<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>>;

struct Plan {
  Problem problem;
  MatmulDescPtr op;
  LayoutPtr first, second, out;
  LtChoice choice;                      // the algorithm, autotuned (lt_autotune.h)
  bool fused_bias = false;              // bias handled by cuBLASLt
  Activation after = Activation::None;  // activation left for apply_epilogue
  bool bias_after = false;              // bias left for apply_epilogue
  std::mutex call;                      // the bias pointer is an attribute of `op`
};

// One cuBLASLt handle per device and one workspace per (device, stream), created on first use
// and kept for the process (the driver reclaims them at exit).
struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  std::unordered_map<cudaStream_t, void*> workspaces;
};

struct Registry {
  std::mutex mutex;
  std::unordered_map<int, DeviceState> devices;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: CUDA may be gone at static exit
  return *r;
}

LayoutPtr make_layout(cudaDataType_t type, const Stored& s, std::int64_t batch,
                      std::int64_t batch_stride) {
  cublasLtMatrixLayout_t raw = nullptr;
  KILN_CUDA_CHECK("matmul",
                  cublasLtMatrixLayoutCreate(&raw, type, static_cast<std::uint64_t>(s.rows),
                                             static_cast<std::uint64_t>(s.cols), s.ld));
  LayoutPtr layout(raw);
  if (batch > 1) {
    const std::int32_t count = static_cast<std::int32_t>(batch);
    KILN_CUDA_CHECK("matmul", cublasLtMatrixLayoutSetAttribute(
                                  raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    KILN_CUDA_CHECK(
        "matmul", cublasLtMatrixLayoutSetAttribute(raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                   &batch_stride, sizeof(batch_stride)));
  }
  return layout;
}

cublasLtEpilogue_t lt_epilogue(bool bias, Activation activation) {
  if (activation == Activation::Relu)
    return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  if (activation == Activation::GeluTanh) {
    return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// Builds the descriptor for one epilogue choice and asks the heuristic; false if it has none.
bool try_plan(Plan& plan, cublasLtHandle_t handle, const MatmulDesc& d, const PlanKey& key,
              bool fuse_bias, Activation fused_activation) {
  const bool f64 = d.dtype == DType::F64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F
                                      : d.compute == MatmulCompute::Tf32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  cublasLtMatmulDesc_t raw = nullptr;
  KILN_CUDA_CHECK("matmul", cublasLtMatmulDescCreate(&raw, compute, f64 ? CUDA_R_64F : CUDA_R_32F));
  plan.op.reset(raw);
  const cublasOperation_t op_first = plan.problem.first.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = plan.problem.second.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  KILN_CUDA_CHECK("matmul", cublasLtMatmulDescSetAttribute(raw, CUBLASLT_MATMUL_DESC_TRANSA,
                                                           &op_first, sizeof(op_first)));
  KILN_CUDA_CHECK("matmul", cublasLtMatmulDescSetAttribute(raw, CUBLASLT_MATMUL_DESC_TRANSB,
                                                           &op_second, sizeof(op_second)));
  const cublasLtEpilogue_t epilogue = lt_epilogue(fuse_bias, fused_activation);
  KILN_CUDA_CHECK("matmul", cublasLtMatmulDescSetAttribute(raw, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                           &epilogue, sizeof(epilogue)));
  if (fuse_bias) {
    const cudaDataType_t bias_type = data_type(d.dtype);
    KILN_CUDA_CHECK("matmul",
                    cublasLtMatmulDescSetAttribute(raw, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &bias_type, sizeof(bias_type)));
  }

  PreferencePtr preference;
  {
    cublasLtMatmulPreference_t p = nullptr;
    KILN_CUDA_CHECK("matmul", cublasLtMatmulPreferenceCreate(&p));
    preference.reset(p);
  }
  const std::uint64_t workspace = kWorkspaceBytes;
  KILN_CUDA_CHECK("matmul", cublasLtMatmulPreferenceSetAttribute(
                                preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                &workspace, sizeof(workspace)));
  // The operands' actual alignment: the default assumes 256 bytes, which views may not have.
  const bool swapped = plan.problem.swapped;
  const std::array<std::pair<cublasLtMatmulPreferenceAttributes_t, std::int64_t>, 4> aligns{{
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, swapped ? key.align_b : key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, swapped ? key.align_a : key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c},
  }};
  for (const auto& [attribute, bytes] : aligns) {
    const std::uint32_t value = static_cast<std::uint32_t>(bytes);
    KILN_CUDA_CHECK("matmul", cublasLtMatmulPreferenceSetAttribute(preference.get(), attribute,
                                                                   &value, sizeof(value)));
  }
  std::array<cublasLtMatmulHeuristicResult_t, kAutotuneCandidates> results{};
  const int wanted = autotune_enabled() ? kAutotuneCandidates : 1;
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, raw, plan.first.get(), plan.second.get(), plan.out.get(), plan.out.get(),
      preference.get(), wanted, results.data(), &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) return false;
  KILN_CUDA_CHECK("matmul", status);
  const std::vector<cublasLtMatmulHeuristicResult_t> offered =
      with_split_variants(handle, raw, plan.first.get(), plan.second.get(), plan.out.get(),
                          plan.out.get(), results.data(), found, kWorkspaceBytes);
  plan.choice.offer(offered.data(), static_cast<int>(offered.size()));
  return true;
}

std::string tune_key_of(const PlanKey& key) {
  const std::string machine = lt_machine_key(static_cast<int>(key.device), "matmul");
  return detail::concat("matmul ", dtype_name(static_cast<DType>(key.dtype)), " compute ",
                        key.compute, " epilogue ", key.epilogue, " m ", key.m, " n ", key.n, " k ",
                        key.k, " batch ", key.batch, " a ", key.a_rs, ",", key.a_cs, ",", key.a_bs,
                        " b ", key.b_rs, ",", key.b_cs, ",", key.b_bs, " c ", key.c_rs, ",",
                        key.c_cs, ",", key.c_bs, " align ", key.align_a, ",", key.align_b, ",",
                        key.align_c, ",", key.align_bias, " | ", machine);
}

std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, const MatmulDesc& d, const Problem& p,
                                const PlanKey& key) {
  auto plan = std::make_unique<Plan>();
  plan->problem = p;
  const cudaDataType_t type = data_type(d.dtype);
  plan->first = make_layout(type, p.first, d.batch, p.first_batch);
  plan->second = make_layout(type, p.second, d.batch, p.second_batch);
  plan->out = make_layout(type, p.out, d.batch, p.out_batch);

  const bool bias = has_bias(d.epilogue);
  const Activation activation = activation_of(d.epilogue);
  // kiln's gelu (erf) has no cuBLASLt epilogue: fuse the bias, apply gelu afterwards. In f64,
  // cuBLASLt's fused tanh-gelu is only accurate to about 1e-10, so f64 keeps it in the pass too.
  const bool separate = activation == Activation::Gelu ||
                        (d.dtype == DType::F64 && activation == Activation::GeluTanh);
  const Activation fusable = separate ? Activation::None : activation;
  if (autotune_enabled()) plan->choice.key = tune_key_of(key);
  if (try_plan(*plan, handle, d, key, bias, fusable)) {
    plan->fused_bias = bias;
    plan->after = separate ? activation : Activation::None;
    return plan;
  }
  // No algorithm with that epilogue (f64 has few): the plain product, then the epilogue pass.
  if ((bias || fusable != Activation::None) &&
      try_plan(*plan, handle, d, key, false, Activation::None)) {
    plan->bias_after = bias;
    plan->after = activation;
    return plan;
  }
  detail::fail<UnsupportedOperation>("matmul", "cuBLASLt has no algorithm for ",
                                     dtype_name(d.dtype), " m ", d.m, " n ", d.n, " k ", d.k,
                                     " batch ", d.batch);
}

}  // namespace

bool matmul_supported(const MatmulDesc& desc, std::string* why) {
  check_desc(desc);
  return map_problem(desc, why).has_value();
}

std::size_t matmul_plan_count() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.plans.size();
}

void matmul(const MatmulDesc& d, const MatmulArgs& args, cudaStream_t stream) {
  check_desc(d);
  std::string why;
  const std::optional<Problem> problem = map_problem(d, &why);
  if (!problem) {
    detail::fail<InvalidArgument>("matmul", "layout not supported by cuBLASLt: ", why,
                                  " (make the operand contiguous)");
  }
  if (d.batch == 0 || d.m == 0 || d.n == 0) return;
  if (args.c == nullptr || (d.k > 0 && (args.a == nullptr || args.b == nullptr))) {
    detail::fail<InvalidArgument>("matmul", "null operand pointer");
  }
  const bool bias = has_bias(d.epilogue);
  if (bias && args.bias == nullptr) {
    detail::fail<InvalidArgument>("matmul", "the epilogue needs a bias pointer");
  }
  const bool scaled = args.addend != nullptr || args.alpha != 1.0;
  if (scaled && (d.epilogue != Epilogue::None || d.k == 0)) {
    detail::fail<InvalidArgument>("matmul", "alpha ", args.alpha,
                                  " and an addend need Epilogue::None and k > 0 (epilogue ",
                                  static_cast<int>(d.epilogue), ", k ", d.k, ")");
  }
  if (d.k == 0) {
    // An empty sum: C = act(bias) (or 0); cuBLASLt does not take k = 0.
    apply_epilogue(d, args.c, bias ? args.bias : nullptr, activation_of(d.epilogue), true, stream);
    return;
  }

  int device = 0;
  KILN_CUDA_CHECK("matmul", cudaGetDevice(&device));
  const PlanKey key{device,
                    static_cast<std::int64_t>(d.dtype),
                    static_cast<std::int64_t>(d.compute),
                    static_cast<std::int64_t>(d.epilogue),
                    d.m,
                    d.n,
                    d.k,
                    d.batch,
                    d.a.row_stride,
                    d.a.col_stride,
                    d.a.batch_stride,
                    d.b.row_stride,
                    d.b.col_stride,
                    d.b.batch_stride,
                    d.c.row_stride,
                    d.c.col_stride,
                    d.c.batch_stride,
                    alignment_of(args.a),
                    alignment_of(args.b),
                    alignment_of(args.c),
                    bias ? alignment_of(args.bias) : 0};

  Registry& r = registry();
  Plan* plan = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  {
    std::lock_guard lock(r.mutex);
    DeviceState& state = r.devices[device];
    if (state.handle == nullptr) KILN_CUDA_CHECK("matmul", cublasLtCreate(&state.handle));
    handle = state.handle;
    void*& ws = state.workspaces[stream];
    if (ws == nullptr) KILN_CUDA_CHECK("matmul", cudaMalloc(&ws, kWorkspaceBytes));
    workspace = ws;
    auto& slot = r.plans[key];
    if (!slot) {
      try {
        slot = make_plan(handle, d, *problem, key);
      } catch (...) {
        r.plans.erase(key);
        throw;
      }
    }
    plan = slot.get();
  }

  const void* first = plan->problem.swapped ? args.b : args.a;
  const void* second = plan->problem.swapped ? args.a : args.b;
  const bool f64 = d.dtype == DType::F64;
  // The scale type is the compute type's: f64 for f64 products, f32 otherwise.
  const double alpha64 = args.alpha, beta64 = args.addend != nullptr ? args.beta : 0.0;
  const float alpha32 = static_cast<float>(alpha64), beta32 = static_cast<float>(beta64);
  const void* alpha = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&beta64) : &beta32;
  // cuBLASLt reads C (the addend, laid out as D) only where beta is not 0.
  const void* addend = args.addend != nullptr ? args.addend : args.c;
  {
    std::lock_guard lock(plan->call);
    auto run = [&](const cublasLtMatmulAlgo_t& algo) {
      KILN_CUDA_CHECK(
          "matmul", cublasLtMatmul(handle, plan->op.get(), alpha, first, plan->first.get(), second,
                                   plan->second.get(), beta, addend, plan->out.get(), args.c,
                                   plan->out.get(), &algo, workspace, kWorkspaceBytes, stream));
    };
    if (plan->fused_bias) {
      KILN_CUDA_CHECK("matmul", cublasLtMatmulDescSetAttribute(plan->op.get(),
                                                               CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                               &args.bias, sizeof(args.bias)));
    }
    // Timing candidates runs the product several times: in place, each run would add to the
    // last one's result, so an in-place call takes the chosen (or the heuristic's) algorithm and
    // leaves the measuring to a call that is not in place.
    const bool in_place = args.addend != nullptr && args.addend == args.c && beta64 != 0.0;
    run(in_place ? plan->choice.algo : plan->choice.settle(run, stream, "matmul"));
  }
  if (plan->bias_after || plan->after != Activation::None) {
    apply_epilogue(d, args.c, plan->bias_after ? args.bias : nullptr, plan->after, false, stream);
  }
}

}  // namespace kiln::cuda::lib
