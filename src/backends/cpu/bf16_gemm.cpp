#include "backends/cpu/bf16_gemm.h"

#if KILN_HAVE_DNNL

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backends/cpu/dnnl_team.h"
#include "backends/cpu/parallel.h"

namespace kiln::cpu {

namespace {

using dnnl::memory;

// Below this many rows per block a product gains nothing from another thread.
constexpr std::int64_t kMinBlockRows = 32;
// Primitives kept; past it the cache starts afresh (a model uses a handful of shapes).
constexpr std::size_t kMaxPlans = 128;

// One product's shape and layout: the key of its primitive.
struct Layout {
  std::int64_t m, n, k, a_rows, a_cols, b_rows, b_cols, ldc;
  bool bias;
  auto tie() const { return std::tie(m, n, k, a_rows, a_cols, b_rows, b_cols, ldc, bias); }
  bool operator<(const Layout& other) const { return tie() < other.tie(); }
};

struct Plan {
  dnnl::matmul primitive;
  memory::desc a, b, c, bias, scratchpad;
};

// Whether the CPU multiplies bf16 natively; without, oneDNN emulates it slower than f32.
bool native_bf16() {
  static const bool native = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return native;
}

// The primitive for layout, made on first use (nullptr when oneDNN refuses it).
std::shared_ptr<const Plan> plan_for(const Layout& l) {
  static std::mutex mutex;
  static std::map<Layout, std::shared_ptr<const Plan>> plans;
  {
    const std::lock_guard lock(mutex);
    if (auto it = plans.find(l); it != plans.end()) return it->second;
  }
  std::shared_ptr<const Plan> made;
  try {
    const auto bf16 = memory::data_type::bf16;
    Plan plan;
    plan.a = memory::desc({l.m, l.k}, bf16, {l.a_rows, l.a_cols});
    plan.b = memory::desc({l.k, l.n}, bf16, {l.b_rows, l.b_cols});
    plan.c = memory::desc({l.m, l.n}, bf16, {l.ldc, 1});
    if (l.bias) plan.bias = memory::desc({1, l.n}, bf16, {l.n, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::desc desc = l.bias ? dnnl::matmul::desc(plan.a, plan.b, plan.bias, plan.c)
                                           : dnnl::matmul::desc(plan.a, plan.b, plan.c);
    const dnnl::matmul::primitive_desc pd(desc, attr, dnnl_cpu_engine());
    plan.scratchpad = pd.scratchpad_desc();
    plan.primitive = dnnl::matmul(pd);
    made = std::make_shared<const Plan>(std::move(plan));
  } catch (const dnnl::error&) {
    made = nullptr;  // remembered: the f32 path takes this layout from now on
  }
  const std::lock_guard lock(mutex);
  if (plans.size() >= kMaxPlans) plans.clear();
  return plans.emplace(l, made).first->second;
}

// Runs plan on one thread with a scratchpad of this thread's.
void execute(const Plan& plan, const bfloat16* a, const bfloat16* b, bfloat16* c,
             const bfloat16* bias) {
  thread_local std::vector<std::byte> scratch;
  thread_local dnnl::stream stream(dnnl_cpu_engine());
  const std::size_t scratch_bytes = plan.scratchpad.get_size();
  if (scratch.size() < scratch_bytes) scratch.resize(scratch_bytes);
  auto wrap = [](const memory::desc& d, const void* p) {
    return memory(d, dnnl_cpu_engine(), const_cast<void*>(p));
  };
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, wrap(plan.a, a)},
      {DNNL_ARG_WEIGHTS, wrap(plan.b, b)},
      {DNNL_ARG_DST, wrap(plan.c, c)},
      {DNNL_ARG_SCRATCHPAD, wrap(plan.scratchpad, scratch.data())}};
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, wrap(plan.bias, bias));
  const SingleThreadedDnnl team;
  plan.primitive.execute(stream, args);
  stream.wait();
}

// oneDNN reads plain layouts with positive strides, one of them 1 (or a single row or column).
bool readable(const MatrixRef<const bfloat16>& x) {
  const bool rows_unit = x.row_stride == 1 || x.rows == 1;
  const bool cols_unit = x.col_stride == 1 || x.cols == 1;
  return x.row_stride > 0 && x.col_stride > 0 && (rows_unit || cols_unit);
}

}  // namespace

bool bf16_gemm(MatrixRef<const bfloat16> a, MatrixRef<const bfloat16> b, bfloat16* c,
               std::int64_t ldc, const bfloat16* bias) {
  const std::int64_t m = a.rows, k = a.cols, n = b.cols;
  if (!native_bf16() || m == 0 || n == 0 || k == 0 || !readable(a) || !readable(b)) return false;
  // Blocks of rows, a few per thread, handed out as threads come free (as gemm's).
  std::int64_t blocks = 1;
  if (!in_parallel_region() && m * n * k >= 2 * kBlasSingleThreadWork) {
    blocks = std::min<std::int64_t>({4 * static_cast<std::int64_t>(thread_count()),
                                     m / kMinBlockRows, m * n * k / kBlasSingleThreadWork});
    blocks = std::max<std::int64_t>(blocks, 1);
  }
  const std::int64_t rows = (m + blocks - 1) / blocks;
  blocks = (m + rows - 1) / rows;
  auto layout = [&](std::int64_t block_rows) {
    return Layout{block_rows,     n, k, a.row_stride, a.col_stride, b.row_stride, b.col_stride, ldc,
                  bias != nullptr};
  };
  // Every block's plan first: a refusal falls back before anything is written.
  const std::shared_ptr<const Plan> full = plan_for(layout(rows));
  const std::int64_t last_rows = m - (blocks - 1) * rows;
  const std::shared_ptr<const Plan> last = last_rows == rows ? full : plan_for(layout(last_rows));
  if (!full || !last) return false;
  auto run = [&](std::int64_t block) {
    const std::int64_t r0 = block * rows;
    execute(block == blocks - 1 ? *last : *full, a.data + r0 * a.row_stride, b.data, c + r0 * ldc,
            bias);
  };
  if (blocks == 1) {
    run(0);
  } else {
    run_tasks(thread_count(), blocks, run);
  }
  return true;
}

}  // namespace kiln::cpu

#else

namespace kiln::cpu {

bool bf16_gemm(MatrixRef<const bfloat16>, MatrixRef<const bfloat16>, bfloat16*, std::int64_t,
               const bfloat16*) {
  return false;
}

}  // namespace kiln::cpu

#endif
