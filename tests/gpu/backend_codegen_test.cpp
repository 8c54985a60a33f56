// Every generated kernel family compiles with NVRTC for sm_90a (what the plugin targets on an
// H100 or H200: Context::compile_arch), on any machine with the toolkit
// (no GPU or driver needed): generator or prelude regressions show up in CI, not on the GPU.
// CI compiles a sample of each family to PTX; KILN_CODEGEN=all (scripts/gpu-check) every source
// to a cubin (gpu/nvrtc_compile.h).
// Each kernel packs many prelude functions into one expression, so one compile instantiates
// them all for a dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/attention.h"
#include "backends/cuda/conv_source.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/fused_kernel.h"
#include "backends/cuda/index_kernels.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/norm.h"
#include "backends/cuda/reduce.h"
#include "backends/cuda/scan.h"
#include "backends/cuda/scatter.h"
#include "backends/cuda/softmax.h"
#include "backends/cuda/spatial.h"
#include "backends/cuda/topk.h"
#include "contract/strided.h"
#include "gpu/gpu_test_support.h"
#include "gpu/nvrtc_compile.h"

using namespace kiln;
using namespace kiln::cuda;

namespace {

const std::vector<DType> kInts = {DType::I64, DType::I32, DType::I16, DType::I8,
                                  DType::U64, DType::U32, DType::U16, DType::U8};

std::vector<DType> every_dtype() {
  std::vector<DType> all(std::begin(test::kFloatDTypes), std::end(test::kFloatDTypes));
  all.insert(all.end(), kInts.begin(), kInts.end());
  all.push_back(DType::Bool);
  return all;
}

using Compiled = test::NvrtcCompiled;

bool every_instance() { return test::every_codegen_instance(); }

// Whether compile() compiles its next source: the first of each test and every fifth after it,
// or every one with KILN_CODEGEN=all (as the GPU check runs it). The sources are still generated
// and checked as text. Every fifth keeps each family's first source and about 27 s of NVRTC on
// two cores (every third took 45 s).
constexpr int kSampleStride = 5;
bool sampled() {
  static std::string test;
  static int calls = 0;
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  if (name != test) {
    test = name;
    calls = 0;
  }
  return calls++ % kSampleStride == 0 || every_instance();
}

// Compiles source (when sampled); returns NVRTC's log on failure (empty on success).
std::string compile(const std::string& source) {
  if (!sampled()) return std::string();
  Compiled c = test::nvrtc_compile(source);
  return c.ok ? std::string() : c.log;
}

// Every kernel of op, each a module of its own: the strided one, the flat one and, unless an input
// is gathered, the wide-load ones the aligned flat and strided paths launch.
void expect_compiles(const ElementwiseOp& op, std::string_view what) {
  const std::string vec = "void __launch_bounds__(" + std::to_string(vector_shape().threads) +
                          ") kiln_elementwise_vec(const PF p)";
  const std::pair<KernelLayout, std::string> layouts[] = {
      {KernelLayout::Strided, "void __launch_bounds__(256) kiln_elementwise(const P p)"},
      {KernelLayout::Flat, "void __launch_bounds__(256) kiln_elementwise_flat(const PF p)"},
      {KernelLayout::Wide, vec},
      {KernelLayout::StridedWide,
       "void __launch_bounds__(256) kiln_elementwise_strided_vec(const P p)"}};
  for (const auto& [layout, signature] : layouts) {
    const bool vectors = layout == KernelLayout::Wide || layout == KernelLayout::StridedWide;
    if (vectors && op.gathered_input >= 0) continue;
    const std::string source = elementwise_source(op, layout);
    EXPECT_NE(source.find(signature), std::string::npos) << what;
    // One kernel per module.
    EXPECT_EQ(source.find("__global__"), source.rfind("__global__")) << what;
    const std::string log = compile(source);
    EXPECT_TRUE(log.empty()) << what << ":\n" << log.substr(0, 4000);
  }
}

}  // namespace

TEST(GpuCodegen, ElementwiseFamiliesCompile) {
  const std::string numeric =
      "(k_add(a, b), k_sub(a, b), k_mul(a, b), k_div(a, b, err), k_rem(a, b, err), "
      "k_pow(a, b, err), k_max(a, b), k_min(a, b), k_abs(a), k_neg(a), k_sign(a), "
      "k_clamp(a, s0, s1), a < s0 ? s0 : a)";
  const std::string floats =
      "(k_recip(a), k_exp(a), k_expm1(a), k_exp2(a), k_log(a), k_log1p(a), k_log2(a), k_log10(a), "
      "k_sqrt(a), k_rsqrt(a), k_sin(a), k_cos(a), k_tan(a), k_asin(a), k_acos(a), k_atan(a), "
      "k_sinh(a), k_cosh(a), k_tanh(a), k_asinh(a), k_acosh(a), k_atanh(a), k_erf(a), k_round(a), "
      "k_floor(a), k_ceil(a), k_trunc(a), k_atan2(a, b), k_hypot(a, b), " +
      numeric + ")";
  const std::string ints =
      "(a & b, a | b, a ^ b, ~a, k_shl(a, b), k_shr(a, s0), k_pow_neg(a, true, err), " + numeric +
      ")";
  for (DType d : test::kFloatDTypes) {
    expect_compiles({"float", floats, {d, d}, d, d, {d, d}, "x"}, dtype_name(d));
    expect_compiles(
        {"float_compare", "(a != a) || k_isinf(a) || a > b", {d, d}, DType::Bool, DType::Bool, {}},
        dtype_name(d));
  }
  for (DType d : kInts) {
    expect_compiles({"int", ints, {d, d}, d, d, {d, d}, "x"}, dtype_name(d));
    expect_compiles({"int_compare",
                     "(double)a >= s0 || a == b",
                     {d, d},
                     DType::Bool,
                     DType::Bool,
                     {DType::F64}},
                    dtype_name(d));
  }
  expect_compiles(
      {"logic", "(!a && b) || (a != b)", {DType::Bool, DType::Bool}, DType::Bool, DType::Bool, {}},
      "bool");
  for (DType raw : {DType::U64, DType::U32, DType::U16, DType::U8}) {
    expect_compiles({"mask_where", "b ? c : a", {raw, DType::Bool, raw}, raw, raw, {}},
                    dtype_name(raw));
    expect_compiles({"mask_fill", "b ? s0 : a", {raw, DType::Bool}, raw, raw, {raw}},
                    dtype_name(raw));
    ElementwiseOp gather{"gather",
                         "[&]() { i64 j = (i64)b; if (j < 0 || j >= s1) { err = true; j = 0; } "
                         "return GATHER(j * s0); }()",
                         {raw, DType::I32},
                         raw,
                         raw,
                         {DType::I64, DType::I64},
                         "index out of range"};
    gather.gathered_input = 0;
    expect_compiles(gather, dtype_name(raw));
  }
  // Casts: each dtype to another five places on (float/int/bool classes all meet).
  const std::vector<DType> all = every_dtype();
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (std::size_t step : {5}) {
      const DType from = all[i], to = all[(i + step) % all.size()];
      expect_compiles({"cast", "a", {from}, from, to, {}},
                      std::string(dtype_name(from)) + "->" + std::string(dtype_name(to)));
    }
  }
  for (std::size_t i = 0; i < all.size(); i += 3) {
    expect_compiles(
        {"random",
         "(k_uniform01(s0, s1 + (u64)i) < s2 ? floor(s3) : s2 + s3 * k_normal(s0, s1 + (u64)i))",
         {},
         DType::F64,
         all[i],
         {DType::U64, DType::U64, DType::F64, DType::F64}},
        dtype_name(all[i]));
  }
}

// Float-to-integer casts saturate at the target's limits, compared as the CPU does (as doubles,
// src/core/dtype_dispatch.h). NVRTC accepts any bounds, and only a GPU run would see wrong ones:
// the text is pinned here, 64-bit limits (hex bits and 17 significant digits) included.
namespace fused_codegen {

FusedKernelOp fused_op(ElementwiseOp op, std::array<std::int32_t, 3> operands,
                       std::int32_t first_scalar = 0, std::int32_t failure = -1) {
  return FusedKernelOp{std::move(op), operands, first_scalar, failure};
}

// chain8's ops on three f32 inputs, as the capture records them (cuda_arith.cpp's expressions).
FusedKernel chain8() {
  const DType f = DType::F32;
  FusedKernel k;
  k.inputs = {f, f, f};
  k.ops.push_back(fused_op({"mul", "k_mul(a, b)", {f, f}, f, f, {}}, {0, 1}));
  k.ops.push_back(fused_op({"add", "k_add(a, b)", {f, f}, f, f, {}}, {3, 2}));
  k.ops.push_back(fused_op({"neg", "k_neg(a)", {f}, f, f, {}}, {4}));
  k.ops.push_back(fused_op({"exp", "k_exp(a)", {f}, f, f, {}}, {5}));
  k.ops.push_back(fused_op({"mul_scalar", "k_mul(a, s0)", {f}, f, f, {f}}, {6}, 0));
  k.ops.push_back(fused_op({"add_scalar", "k_add(a, s0)", {f}, f, f, {f}}, {7}, 1));
  k.ops.push_back(fused_op({"tanh", "k_tanh(a)", {f}, f, f, {}}, {8}));
  k.ops.push_back(fused_op({"mul", "k_mul(a, b)", {f, f}, f, f, {}}, {9, 0}));
  k.outputs = {{10, f}};
  return k;
}

// Every storage form at once: f16 and bf16 words, an integer op that can fail, a comparison to
// bool, mask_where moving raw bits (an f32 value read as u32), two outputs.
FusedKernel mixed() {
  FusedKernel k;
  k.inputs = {DType::F16, DType::BF16, DType::I32, DType::Bool, DType::F32};
  k.ops.push_back(fused_op({"cast", "a", {DType::F16}, DType::F16, DType::F32, {}}, {0}));    // 5
  k.ops.push_back(fused_op({"cast", "a", {DType::BF16}, DType::BF16, DType::F32, {}}, {1}));  // 6
  k.ops.push_back(
      fused_op({"mul", "k_mul(a, b)", {DType::F32, DType::F32}, DType::F32, DType::F16, {}},
               {5, 6}));  // 7: f16 result
  k.ops.push_back(fused_op({"div_scalar",
                            "k_div(a, s0, err)",
                            {DType::I32},
                            DType::I32,
                            DType::I32,
                            {DType::I32},
                            "integer division by zero"},
                           {2}, 0, 0));  // 8
  k.ops.push_back(fused_op(
      {"lower", "a < b", {DType::F16, DType::F16}, DType::Bool, DType::Bool, {}}, {7, 0}));  // 9
  k.ops.push_back(fused_op({"mask_where",
                            "b ? c : a",
                            {DType::U32, DType::Bool, DType::U32},
                            DType::U32,
                            DType::U32,
                            {}},
                           {4, 9, 6}));  // 10: f32 words moved as u32
  k.outputs = {{7, DType::F16}, {8, DType::I32}, {10, DType::F32}};
  return k;
}

// nn::Dropout's product as the capture records it: a bernoulli mask drawn in the kernel
// (random_op: the counter is the flat index), scaled, times x; the mask is written too.
FusedKernel dropout() {
  const DType f = DType::F32;
  FusedKernel k;
  k.inputs = {f};
  k.ops.push_back(fused_op(random_op(Distribution::Kind::Bernoulli, f), {}, 0));      // 1
  k.ops.push_back(fused_op({"mul_scalar", "k_mul(a, s0)", {f}, f, f, {f}}, {1}, 4));  // 2
  k.ops.push_back(fused_op({"mul", "k_mul(a, b)", {f, f}, f, f, {}}, {0, 2}));        // 3
  k.outputs = {{1, f}, {3, f}};
  return k;
}

// A chain of three d inputs as the capture records it, read by a reduction or softmax (the
// capture's tail): floats exp((x * y + z) * s0), integers (x * y + z) / s0 + s1 (which can
// fail). Its first op's value is written too (a value held after the group).
FusedLoad tail_load(DType d, bool flat) {
  FusedLoad load;
  load.dtype = d;
  load.flat = flat;
  FusedKernel& k = load.kernel;
  k.inputs = {d, d, d};
  k.ops.push_back(fused_op({"mul", "k_mul(a, b)", {d, d}, d, d, {}}, {0, 1}));  // 3
  k.ops.push_back(fused_op({"add", "k_add(a, b)", {d, d}, d, d, {}}, {3, 2}));  // 4
  if (is_float(d)) {
    k.ops.push_back(fused_op({"mul_scalar", "k_mul(a, s0)", {d}, d, d, {d}}, {4}, 0));  // 5
    k.ops.push_back(fused_op({"exp", "k_exp(a)", {d}, d, d, {}}, {5}));                 // 6
  } else {
    k.ops.push_back(fused_op(
        {"div_scalar", "k_div(a, s0, err)", {d}, d, d, {d}, "integer division by zero"}, {4}, 0,
        0));                                                                            // 5
    k.ops.push_back(fused_op({"add_scalar", "k_add(a, s0)", {d}, d, d, {d}}, {5}, 1));  // 6
  }
  k.outputs = {{3, d}};
  load.value = 6;
  return load;
}

// An SGD update after a reduction (an epilogue, kernel_capture.h): value 0 is the reduction's
// result r (of dtype out), value 1 a parameter b: b - r * s0, and r * s0 written too. Integers
// (an argmax's indices): r / s0 + b, which can fail.
FusedKernel epilogue(DType out) {
  FusedKernel k;
  k.inputs = {out, out};
  if (is_float(out)) {
    k.ops.push_back(fused_op({"mul_scalar", "k_mul(a, s0)", {out}, out, out, {out}}, {0}, 0));
    k.ops.push_back(fused_op({"sub", "k_sub(a, b)", {out, out}, out, out, {}}, {1, 2}));
  } else {
    k.ops.push_back(fused_op(
        {"div_scalar", "k_div(a, s0, err)", {out}, out, out, {out}, "integer division by zero"},
        {0}, 0, 0));
    k.ops.push_back(fused_op({"add", "k_add(a, b)", {out, out}, out, out, {}}, {2, 1}));
  }
  k.outputs = {{3, out}, {2, out}};
  return k;
}

}  // namespace fused_codegen

// The fused kernel of a group (cuda_fused.cpp) in its four launch forms, compiled every time:
// there are only two, and every fused group of the GPU goes through this generator.
TEST(GpuCodegen, FusedKernelsCompile) {
  for (const FusedKernel& kernel :
       {fused_codegen::chain8(), fused_codegen::mixed(), fused_codegen::dropout()}) {
    const std::string key = fused_kernel_key(kernel);
    // One kernel per module, each layout compiled.
    for (const auto& [layout, name] : {std::pair{KernelLayout::Strided, "kiln_fused(const FP p)"},
                                       {KernelLayout::Flat, "kiln_fused_flat(const FF p)"},
                                       {KernelLayout::Wide, "kiln_fused_vec(const FF p)"}}) {
      const std::string source = fused_kernel_source(kernel, layout);
      EXPECT_NE(source.find(name), std::string::npos) << key << ": " << name;
      EXPECT_EQ(source.find("__global__"), source.rfind("__global__")) << key << ": " << name;
      const Compiled c = test::nvrtc_compile(source);
      EXPECT_TRUE(c.ok) << key << " " << name << ":\n" << c.log.substr(0, 4000);
    }
    // The rows form: the first input a broadcast row, the second a value per row, any others
    // whole.
    std::string modes(kernel.inputs.size(), 'f');
    if (!modes.empty()) modes[0] = 'r';
    if (modes.size() > 1) modes[1] = 'c';
    for (const std::int64_t width : {fused_vector_width(kernel), fused_rows_width(kernel, modes)}) {
      const std::string rows = fused_rows_source(kernel, modes, width);
      EXPECT_NE(rows.find("kiln_fused_rows(const FP p)"), std::string::npos) << key;
      const Compiled c = test::nvrtc_compile(rows);
      EXPECT_TRUE(c.ok) << key << " rows " << modes << " width " << width << ":\n"
                        << c.log.substr(0, 4000);
    }
  }
  // The key tells apart what the source depends on: wiring, dtypes, outputs.
  FusedKernel rewired = fused_codegen::chain8();
  rewired.ops[7].operands = {9, 1};
  FusedKernel more = fused_codegen::chain8();
  more.outputs.push_back({5, DType::F32});
  EXPECT_NE(fused_kernel_key(rewired), fused_kernel_key(fused_codegen::chain8()));
  EXPECT_NE(fused_kernel_key(more), fused_kernel_key(fused_codegen::chain8()));
  EXPECT_EQ(fused_vector_width(fused_codegen::chain8()), 4);
  EXPECT_EQ(fused_vector_width(fused_codegen::mixed()), 4);
  // The rows kernel's vectors: 16 bytes of what is read or written whole, not of the values per
  // row (a bf16 gradient scaled by f32 row statistics: 8 elements).
  FusedKernel scaled;
  scaled.inputs = {DType::BF16, DType::F32};
  scaled.outputs = {{1, DType::BF16}};
  EXPECT_EQ(fused_rows_width(scaled, "fc"), 8);
  EXPECT_EQ(fused_rows_width(scaled, "ff"), 4);
  EXPECT_EQ(fused_vector_width(scaled), 4);
}

// A reduction as the tail of a fused chain: every kernel that reads the input, with the chain
// as its load, flat and strided, over floats of each width and integers. These compile every
// time (the first list); the other reducers and dtypes are sampled.
TEST(GpuCodegen, FusedReductionsCompile) {
  using fused_codegen::tail_load;
  struct Case {
    ReduceKernel kernel;
    Reducer reducer;
    DType dtype, out;
    bool flat;
  };
  const Case always[] = {
      {ReduceKernel::LinesWarp, Reducer::Sum, DType::F32, DType::F32, true},
      {ReduceKernel::LinesBlock, Reducer::Mean, DType::F16, DType::F16, false},
      {ReduceKernel::Columns, Reducer::Max, DType::BF16, DType::BF16, true},
      {ReduceKernel::ColumnsVector, Reducer::Sum, DType::F64, DType::F64, false},
      {ReduceKernel::LinesWarp, Reducer::ArgMax, DType::F16, DType::I64, false},
      {ReduceKernel::ColumnsVector, Reducer::Min, DType::I32, DType::I32, true},
      {ReduceKernel::LinesBlock, Reducer::Sum, DType::U8, DType::U8, true},
      {ReduceKernel::LinesBlock, Reducer::LogSumExp, DType::F32, DType::F32, true},
      {ReduceKernel::ColumnsVector, Reducer::LogSumExp, DType::BF16, DType::BF16, false},
      {ReduceKernel::LinesWarp, Reducer::LogSumExp, DType::F64, DType::F64, false},
  };
  for (const Case& c : always) {
    const FusedLoad load = tail_load(c.dtype, c.flat);
    const std::string source = reduce_kernel_source(c.kernel, c.reducer, c.dtype, c.out, &load);
    const std::string what = std::string(reducer_name(c.reducer)) + " " +
                             reduce_kernel_name(c.kernel) + " " + std::string(dtype_name(c.dtype)) +
                             (c.flat ? " flat" : " strided");
    EXPECT_NE(source.find("chain_line(p.t, base)"), std::string::npos) << what;
    EXPECT_EQ(source.find("(const S*)p.in"), std::string::npos) << what;  // x is never read
    // The wait for the launch ahead is the entry point's alone: in the chain's per-element load
    // its "memory" clobber serialised a thread's loads.
    std::size_t waits = 0;
    for (std::size_t at = source.find("k_grid_dependency();"); at != std::string::npos;
         at = source.find("k_grid_dependency();", at + 1))
      ++waits;
    EXPECT_EQ(waits, 1u) << what;
    const Compiled compiled = test::nvrtc_compile(source);
    EXPECT_TRUE(compiled.ok) << what << ":\n" << compiled.log.substr(0, 4000);
  }
  const ReduceKernel readers[] = {ReduceKernel::LinesWarp, ReduceKernel::LinesBlock,
                                  ReduceKernel::Columns, ReduceKernel::ColumnsVector};
  const Reducer reducers[] = {Reducer::Sum, Reducer::Mean,   Reducer::Prod,   Reducer::Max,
                              Reducer::Min, Reducer::ArgMax, Reducer::ArgMin, Reducer::LogSumExp};
  std::vector<DType> numeric(std::begin(test::kFloatDTypes), std::end(test::kFloatDTypes));
  numeric.insert(numeric.end(), kInts.begin(), kInts.end());
  std::size_t i = 0;
  for (const Reducer& r : reducers) {
    for (ReduceKernel k : readers) {
      const bool mean = r == Reducer::Mean || r == Reducer::LogSumExp;  // float only
      const DType d = mean ? test::kFloatDTypes[i % 4] : numeric[i % numeric.size()];
      const bool arg = r == Reducer::ArgMax || r == Reducer::ArgMin;
      const FusedLoad load = tail_load(d, i % 3 == 0);
      const std::string log = compile(reduce_kernel_source(k, r, d, arg ? DType::I64 : d, &load));
      EXPECT_TRUE(log.empty()) << reducer_name(r) << " " << reduce_kernel_name(k) << " "
                               << dtype_name(d) << ":\n"
                               << log.substr(0, 4000);
      ++i;
    }
  }
}

// A reduction of a tensor with elementwise ops on each result (its epilogue): every kernel of
// the family, the finishing ones included (they write the results of split lines), compiles with
// the epilogue's parameters after the reduction's and the epilogue applied where a result is
// written.
TEST(GpuCodegen, ReductionEpiloguesCompile) {
  struct Case {
    ReduceKernel kernel;
    Reducer reducer;
    DType dtype, out;
  };
  const Case cases[] = {
      {ReduceKernel::LinesWarp, Reducer::Sum, DType::F32, DType::F32},
      {ReduceKernel::LinesBlock, Reducer::Mean, DType::F16, DType::F16},
      {ReduceKernel::Columns, Reducer::Sum, DType::F32, DType::F32},
      {ReduceKernel::ColumnsVector, Reducer::Max, DType::BF16, DType::BF16},
      {ReduceKernel::FinishWarp, Reducer::Sum, DType::F64, DType::F64},
      {ReduceKernel::FinishBlock, Reducer::Prod, DType::F32, DType::F32},
      {ReduceKernel::LinesWarp, Reducer::ArgMax, DType::F32, DType::I64},
      {ReduceKernel::FinishWarp, Reducer::Min, DType::I32, DType::I32},
  };
  for (const Case& c : cases) {
    const FusedKernel epilogue = fused_codegen::epilogue(c.out);
    const std::string source =
        reduce_kernel_source(c.kernel, c.reducer, c.dtype, c.out, nullptr, &epilogue);
    const std::string what = std::string(reducer_name(c.reducer)) + " " +
                             reduce_kernel_name(c.kernel) + " " + std::string(dtype_name(c.dtype));
    EXPECT_NE(source.find("FP e;"), std::string::npos) << what;
    EXPECT_NE(source.find("fused_epilogue(p.e, o,"), std::string::npos) << what;
    const Compiled compiled = test::nvrtc_compile(source);
    EXPECT_TRUE(compiled.ok) << what << ":\n" << compiled.log.substr(0, 4000);
  }
  // Without an epilogue a result is only written.
  EXPECT_EQ(reduce_kernel_source(ReduceKernel::LinesWarp, Reducer::Sum, DType::F32, DType::F32)
                .find("fused_epilogue"),
            std::string::npos);
}

// Softmax as the tail of a fused chain: every kernel that reads the input (Combine reads only
// partials); the write passes of long rows and lines recompute the chain without storing.
TEST(GpuCodegen, FusedSoftmaxCompiles) {
  using fused_codegen::tail_load;
  const SoftmaxKernel readers[] = {
      SoftmaxKernel::Lines,          SoftmaxKernel::RowsWarp,        SoftmaxKernel::RowsWarpVector,
      SoftmaxKernel::RowsBlock,      SoftmaxKernel::RowsBlockVector, SoftmaxKernel::RowsWide,
      SoftmaxKernel::RowsWideVector, SoftmaxKernel::RowStats,        SoftmaxKernel::RowStatsVector,
      SoftmaxKernel::RowWrite,       SoftmaxKernel::RowWriteVector,  SoftmaxKernel::LineStats,
      SoftmaxKernel::LineWrite};
  for (std::size_t i = 0; i < std::size(readers); ++i) {
    const SoftmaxKernel k = readers[i];
    const DType d = test::kFloatDTypes[i % 4];
    const bool log = i % 2 == 1;
    const FusedLoad load = tail_load(d, i % 3 != 0);
    const std::string source = softmax_kernel_source(k, d, log, &load);
    const std::string what = std::string(softmax_kernel_name(k)) + " " + std::string(dtype_name(d));
    EXPECT_EQ(source.find("(const S*)p.in"), std::string::npos) << what;
    EXPECT_NE(source.find("chain_at(p.t, l, j, p.in_step, first)"), std::string::npos) << what;
    // Three kernels always compile (a row kept in registers, a long row's first and second
    // reads); the others are sampled.
    const bool always = k == SoftmaxKernel::RowsWarpVector || k == SoftmaxKernel::RowStats ||
                        k == SoftmaxKernel::LineWrite;
    std::string failure;
    if (always) {
      const Compiled compiled = test::nvrtc_compile(source);
      if (!compiled.ok) failure = compiled.log;
    } else {
      failure = compile(source);
    }
    EXPECT_TRUE(failure.empty()) << what << (log ? " log" : "") << ":\n" << failure.substr(0, 4000);
  }
}

// The tail kernels' keys tell apart what their source depends on besides the chain's own key.
TEST(GpuCodegen, FusedLoadKeysCoverTheLoad) {
  using fused_codegen::tail_load;
  const FusedLoad flat = tail_load(DType::F32, true);
  const FusedLoad strided = tail_load(DType::F32, false);
  FusedLoad other_value = flat;
  other_value.value = 5;
  FusedLoad as_u32 = flat;
  as_u32.dtype = DType::U32;
  FusedLoad fewer_outputs = flat;
  fewer_outputs.kernel.outputs.clear();
  const std::string key = fused_load_key(flat);
  const FusedLoad* others[] = {&strided, &other_value, &as_u32, &fewer_outputs};
  for (const FusedLoad* load : others) EXPECT_NE(fused_load_key(*load), key);
  EXPECT_EQ(fused_load_key(tail_load(DType::F32, true)), key);
  // The element function: stores of the held value only on a first read, the chain's error
  // flag reported on every read.
  const std::string ints = fused_load_source(tail_load(DType::I32, true));
  const std::size_t first = ints.find("if (first) {");
  ASSERT_NE(first, std::string::npos);
  EXPECT_NE(ints.find("p.out[0])[i] =", first), std::string::npos);
  EXPECT_NE(ints.find("if (e0) *p.err_word = p.tok[0];"), std::string::npos);
  EXPECT_NE(fused_load_source(strided).find("p.strides[2][d]"), std::string::npos);
  EXPECT_EQ(fused_load_source(flat).find("p.strides"), std::string::npos);
}

TEST(GpuCodegen, AttentionKernelCompiles) {
  // The forward pass at every head dim, mask and bias; the backward pass's four kernels at the
  // smallest, a middle and the largest head dim, bare and with both a mask and a bias; the
  // Hopper kernels at their two head dims, bare and with both.
  for (DType dtype : {DType::BF16, DType::F16}) {
    for (std::int64_t depth : {16, 32, 64, 96, 128}) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool mask = variant & 1, bias = variant & 2;
        for (AttentionKernel kernel :
             {AttentionKernel::Forward, AttentionKernel::Stats, AttentionKernel::Query,
              AttentionKernel::KeyValue, AttentionKernel::HopperForward,
              AttentionKernel::HopperStats, AttentionKernel::HopperQuery,
              AttentionKernel::HopperKeyValue, AttentionKernel::HopperPipelined,
              AttentionKernel::Delta, AttentionKernel::HopperQueryKeyValue}) {
          const bool hopper = (kernel >= AttentionKernel::HopperForward &&
                               kernel <= AttentionKernel::HopperPipelined) ||
                              kernel == AttentionKernel::HopperQueryKeyValue;
          const bool backward = kernel != AttentionKernel::Forward &&
                                kernel != AttentionKernel::HopperForward &&
                                kernel != AttentionKernel::HopperPipelined;
          if (backward && (depth == 32 || depth == 96 || mask != bias)) continue;
          // The Hopper kernels bare and with both a mask and a bias.
          if (hopper && (depth % 64 != 0 || mask != bias)) continue;
          const std::string log =
              compile(attention_kernel_source(kernel, dtype, depth, mask, bias));
          EXPECT_TRUE(log.empty())
              << dtype_name(dtype) << " D" << depth << " mask " << mask << " bias " << bias
              << " kernel " << static_cast<int>(kernel) << ":\n"
              << log.substr(0, 4000);
        }
      }
    }
  }
}

TEST(GpuCodegen, AttentionDropoutBodiesCompile) {
  // Every kernel that has a dropout body, at a head dim of each family, bare and with both a mask
  // and a bias; those that have none refuse to make one; the f32 kernels' dropout bodies.
  for (DType dtype : {DType::BF16, DType::F16}) {
    for (int variant = 0; variant < 2; ++variant) {
      const bool both = variant == 1;
      for (int k = 0; k <= static_cast<int>(AttentionKernel::HopperQueryKeyValue); ++k) {
        const auto kernel = static_cast<AttentionKernel>(k);
        if (!attention_kernel_drops(kernel)) {
          EXPECT_THROW((void)attention_kernel_source(kernel, dtype, 64, both, both, true),
                       UnsupportedOperation);
          continue;
        }
        const std::string log =
            compile(attention_kernel_source(kernel, dtype, 64, both, both, true));
        EXPECT_TRUE(log.empty()) << dtype_name(dtype) << " kernel " << k << " mask and bias "
                                 << both << ":\n"
                                 << log.substr(0, 4000);
      }
    }
  }
  for (std::int64_t depth : {4, 64}) {
    for (const bool tiled : {false, true}) {
      if (tiled && depth != 64) continue;
      const std::string log = compile(attention_simt_source(
          attention_simt_kernel(depth, tiled, tiled ? 0 : 16), depth, true, true, true));
      EXPECT_TRUE(log.empty()) << "f32 D" << depth << " tiled " << tiled << ":\n"
                               << log.substr(0, 4000);
    }
  }
}

TEST(GpuCodegen, AttentionKernelAppliesToHalfTypesAndTileDepths) {
  EXPECT_TRUE(attention_kernel_applies(DType::BF16, 64));
  EXPECT_TRUE(attention_kernel_applies(DType::F16, 128));
  EXPECT_FALSE(attention_kernel_applies(DType::F32, 64));
  EXPECT_FALSE(attention_kernel_applies(DType::BF16, 72));
  EXPECT_FALSE(attention_kernel_applies(DType::BF16, 256));
  EXPECT_FALSE(attention_kernel_applies(DType::BF16, 0));
  // The Hopper kernels: sm_90 exactly (sm_90a's wgmma), whole 64-wide panels.
  EXPECT_TRUE(attention_hopper_applies(9, 0, 64));
  EXPECT_TRUE(attention_hopper_applies(9, 0, 128));
  EXPECT_FALSE(attention_hopper_applies(9, 0, 96));
  EXPECT_FALSE(attention_hopper_applies(8, 0, 128));
  EXPECT_FALSE(attention_hopper_applies(10, 0, 128));
  // The f32 kernel: head dims that are multiples of 4 up to 64.
  EXPECT_TRUE(attention_simt_applies(DType::F32, 4));
  EXPECT_TRUE(attention_simt_applies(DType::F32, 64));
  EXPECT_FALSE(attention_simt_applies(DType::F32, 66));
  EXPECT_FALSE(attention_simt_applies(DType::F32, 72));
  EXPECT_FALSE(attention_simt_applies(DType::F32, 0));
  EXPECT_FALSE(attention_simt_applies(DType::F64, 64));
  EXPECT_FALSE(attention_simt_applies(DType::BF16, 64));
}

TEST(GpuCodegen, AttentionF32KernelCompiles) {
  // The row-a-thread kernel in every variant with tiles of 16 keys (the default); tiles of 32
  // and 64 bare. The tiled kernel for head dims 32 and 64 in every variant, the default there.
  EXPECT_EQ(attention_simt_keys(), 16);
  EXPECT_TRUE(attention_simt_kernel(64).tiled);
  EXPECT_TRUE(attention_simt_kernel(32).tiled);
  EXPECT_FALSE(attention_simt_kernel(60).tiled);
  EXPECT_FALSE(attention_simt_kernel(16).tiled);
  for (std::int64_t depth : {4, 32, 60, 64}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool mask = variant & 1, bias = variant & 2;
      const std::string log = compile(
          attention_simt_source(attention_simt_kernel(depth, false, 16), depth, mask, bias));
      EXPECT_TRUE(log.empty()) << "D" << depth << " mask " << mask << " bias " << bias << ":\n"
                               << log.substr(0, 4000);
    }
    for (int keys : {32, 64}) {
      const std::string log = compile(
          attention_simt_source(attention_simt_kernel(depth, false, keys), depth, false, false));
      EXPECT_TRUE(log.empty()) << "D" << depth << " keys " << keys << ":\n" << log.substr(0, 4000);
    }
  }
  for (std::int64_t depth : {32, 64}) {
    const SimtKernel tiled = attention_simt_kernel(depth, true, 0);
    EXPECT_LE(tiled.shared_bytes, 227u * 1024u);
    for (int variant = 0; variant < 4; ++variant) {
      const bool mask = variant & 1, bias = variant & 2;
      const std::string log = compile(attention_simt_source(tiled, depth, mask, bias));
      EXPECT_TRUE(log.empty()) << "tiled D" << depth << " mask " << mask << " bias " << bias
                               << ":\n"
                               << log.substr(0, 4000);
    }
  }
}

TEST(GpuCodegen, LayerNormCompiles) {
  for (DType dtype : test::kFloatDTypes) {
    const std::string log = compile(layer_norm_source(dtype, dtype, dtype));
    EXPECT_TRUE(log.empty()) << dtype_name(dtype) << ":\n" << log.substr(0, 4000);
    const std::string backward = layer_norm_backward_source(dtype);
    EXPECT_NE(backward.find("kiln_layer_norm_backward(const P p)"), std::string::npos);
    const std::string backward_log = test::nvrtc_compile(backward).log;
    EXPECT_TRUE(test::nvrtc_compile(backward).ok) << dtype_name(dtype) << " backward:\n"
                                                  << backward_log.substr(0, 4000);
    // Register plans: a warp per row with scalar loads, wide loads with wide parameters, 1,024
    // threads per row.
    for (const auto& [width, aligned] : {std::pair<std::int64_t, bool>{7, true},
                                         {768, true},
                                         {8192, true},
                                         {8192, false},
                                         {16384, true}}) {
      const LayerNormRows rows = layer_norm_rows(dtype, width, aligned, aligned);
      ASSERT_TRUE(rows.fits()) << dtype_name(dtype) << " width " << width;
      const std::string rows_log = compile(layer_norm_rows_source(dtype, dtype, dtype, rows));
      EXPECT_TRUE(rows_log.empty()) << dtype_name(dtype) << " width " << width << ":\n"
                                    << rows_log.substr(0, 4000);
    }
  }
  // The plan: as many threads per row as keep a thread's values in registers.
  const LayerNormRows f32 = layer_norm_rows(DType::F32, 8192, true, true);
  EXPECT_EQ(f32.vector, 4);
  EXPECT_EQ(f32.threads_per_row, 256);
  EXPECT_EQ(f32.chunks, 8);
  EXPECT_EQ(layer_norm_rows(DType::F32, 8192, false, false).vector, 1);
  EXPECT_EQ(layer_norm_rows(DType::F16, 768, true, true).block, 256);
  EXPECT_EQ(layer_norm_rows(DType::F16, 768, true, true).threads_per_row, 32);
  EXPECT_FALSE(layer_norm_rows(DType::F32, 40000, true, true).fits());
  EXPECT_FALSE(layer_norm_rows(DType::F64, 20000, true, true).fits());
}

TEST(GpuCodegen, FloatToIntCastsSaturateAtTheLimits) {
  EXPECT_EQ(convert_expression(DType::F32, DType::I8, "x"),
            "([&]() -> signed char { const double v_ = (double)(x); if (!(v_ == v_)) return "
            "(signed char)0; if (v_ <= -128) return (signed char)0x80ull; if (v_ >= 127) return "
            "(signed char)0x7full; return (signed char)v_; }())");
  EXPECT_EQ(convert_expression(DType::F64, DType::I64, "x"),
            "([&]() -> long long { const double v_ = (double)(x); if (!(v_ == v_)) return (long "
            "long)0; if (v_ <= -9.2233720368547758e+18) return (long long)0x8000000000000000ull; "
            "if (v_ >= 9.2233720368547758e+18) return (long long)0x7fffffffffffffffull; return "
            "(long long)v_; }())");
  EXPECT_EQ(convert_expression(DType::F16, DType::U64, "x"),
            "([&]() -> unsigned long long { const double v_ = (double)(x); if (!(v_ == v_)) "
            "return (unsigned long long)0; if (v_ <= 0) return (unsigned long long)0x0ull; if (v_ "
            ">= 1.8446744073709552e+19) return (unsigned long long)0xffffffffffffffffull; return "
            "(unsigned long long)v_; }())");
  EXPECT_EQ(convert_expression(DType::I32, DType::F16, "x"), "(float)(x)");
  EXPECT_EQ(convert_expression(DType::F64, DType::Bool, "x"), "((x) != 0)");
}

TEST(GpuCodegen, IndexKernelsCompile) {
  // arange writes every float and integer dtype; argwhere's coordinates every integer dtype.
  for (DType d : test::kFloatDTypes)
    expect_compiles(arange_op(d), "arange " + std::string(dtype_name(d)));
  for (DType d : kInts) {
    expect_compiles(arange_op(d), "arange " + std::string(dtype_name(d)));
    expect_compiles(unravel_op(d), "argwhere " + std::string(dtype_name(d)));
  }
  // random: every distribution into every dtype it draws.
  for (Distribution::Kind kind : {Distribution::Kind::Default, Distribution::Kind::Uniform,
                                  Distribution::Kind::Normal, Distribution::Kind::Bernoulli}) {
    for (DType d : test::kFloatDTypes)
      expect_compiles(random_op(kind, d), "random " + std::string(dtype_name(d)));
    for (DType d : kInts)
      expect_compiles(random_op(kind, d), "random " + std::string(dtype_name(d)));
  }
}

TEST(GpuCodegen, ReductionFamiliesCompile) {
  // Each kernel of each reducer, the dtypes rotating so that every kernel meets six dtypes and
  // every dtype several reducers (accumulator layouts, shuffles, vector widths differ by dtype).
  const ReduceKernel kernels[] = {ReduceKernel::LinesWarp,  ReduceKernel::LinesBlock,
                                  ReduceKernel::Columns,    ReduceKernel::ColumnsVector,
                                  ReduceKernel::FinishWarp, ReduceKernel::FinishBlock};
  auto check = [&](ReduceKernel k, Reducer r, DType d, DType out) {
    const std::string log = compile(reduce_kernel_source(k, r, d, out));
    EXPECT_TRUE(log.empty()) << reducer_name(r) << " " << reduce_kernel_name(k) << " "
                             << dtype_name(d) << ":\n"
                             << log.substr(0, 4000);
  };
  std::vector<DType> numeric(std::begin(test::kFloatDTypes), std::end(test::kFloatDTypes));
  numeric.insert(numeric.end(), kInts.begin(), kInts.end());
  const Reducer reducers[] = {Reducer::Sum, Reducer::Prod,   Reducer::Max,
                              Reducer::Min, Reducer::ArgMax, Reducer::ArgMin};
  for (std::size_t r = 0; r < std::size(reducers); ++r) {
    for (std::size_t k = 0; k < std::size(kernels); ++k) {
      const DType d = numeric[(r * 7 + k) % numeric.size()];
      const bool arg = reducers[r] == Reducer::ArgMax || reducers[r] == Reducer::ArgMin;
      check(kernels[k], reducers[r], d, arg ? (k % 2 == 0 ? DType::I64 : DType::I32) : d);
    }
  }
  for (DType d : test::kFloatDTypes) {
    check(ReduceKernel::LinesBlock, Reducer::Mean, d, d);
    check(ReduceKernel::ColumnsVector, Reducer::Mean, d, d);
  }
  // logsumexp: float partials settled into a double sum (f32, f16, bf16), double throughout
  // (f64), in every kernel.
  for (std::size_t k = 0; k < std::size(kernels); ++k) {
    const DType d = test::kFloatDTypes[k % std::size(test::kFloatDTypes)];
    check(kernels[k], Reducer::LogSumExp, d, d);
  }
  for (ReduceKernel k : kernels) {
    check(k, Reducer::Any, DType::Bool, DType::Bool);
    check(k, Reducer::All, k == ReduceKernel::LinesBlock ? DType::F32 : DType::Bool, DType::Bool);
  }
}

TEST(GpuCodegen, SoftmaxFamiliesCompile) {
  // Every kernel in f32 (softmax and log_softmax) and in each other float dtype.
  const SoftmaxKernel kernels[] = {
      SoftmaxKernel::Lines,          SoftmaxKernel::RowsWarp,        SoftmaxKernel::RowsWarpVector,
      SoftmaxKernel::RowsBlock,      SoftmaxKernel::RowsBlockVector, SoftmaxKernel::RowsWide,
      SoftmaxKernel::RowsWideVector, SoftmaxKernel::RowStats,        SoftmaxKernel::RowStatsVector,
      SoftmaxKernel::RowWrite,       SoftmaxKernel::RowWriteVector,  SoftmaxKernel::LineStats,
      SoftmaxKernel::LineWrite,      SoftmaxKernel::Combine};
  auto check = [&](SoftmaxKernel k, DType d, bool log) {
    const std::string text = compile(softmax_kernel_source(k, d, log));
    EXPECT_TRUE(text.empty()) << softmax_kernel_name(k) << " " << dtype_name(d)
                              << (log ? " log" : "") << ":\n"
                              << text.substr(0, 4000);
  };
  for (std::size_t i = 0; i < std::size(kernels); ++i) {
    check(kernels[i], DType::F32, false);
    check(kernels[i], DType::F32, true);
    for (DType d : {DType::F64, DType::F16, DType::BF16}) check(kernels[i], d, i % 2 == 1);
  }
}

// The launch plans: which kernel each shape takes and how lines are cut (pure host arithmetic).
TEST(GpuCodegen, ReducePlansPickTheExpectedPaths) {
  auto plan = [](const Shape& shape, std::int64_t dim, DType dtype = DType::F32) {
    const auto strides = strided::contiguous_strides(shape);
    return plan_reduce(shape, strides.span(), 256, dim, dtype, 132, "test");
  };
  // The whole 8192² tensor as one line: ~1000 chunks of 16-byte-aligned length, then one
  // block combining them.
  ReducePlan full = plan(Shape{8192 * 8192}, 0);
  ASSERT_EQ(full.launches.size(), 2u);
  EXPECT_EQ(full.launches[0].kernel, ReduceKernel::LinesBlock);
  EXPECT_EQ(full.launches[1].kernel, ReduceKernel::FinishBlock);
  EXPECT_GE(full.params.chunks, 528);
  EXPECT_EQ(full.params.chunk_length % 64, 0);
  EXPECT_GE(full.params.chunks * full.params.chunk_length, 8192 * 8192);
  EXPECT_LT((full.params.chunks - 1) * full.params.chunk_length, 8192 * 8192);
  // Last dim: a block per row, no chunks; first dim: vector columns in chunks.
  ReducePlan rows = plan(Shape{8192, 8192}, 1);
  ASSERT_EQ(rows.launches.size(), 1u);
  EXPECT_EQ(rows.launches[0].kernel, ReduceKernel::LinesBlock);
  EXPECT_EQ(rows.launches[0].blocks, 8192u);
  ReducePlan columns = plan(Shape{8192, 8192}, 0);
  ASSERT_EQ(columns.launches.size(), 2u);
  EXPECT_EQ(columns.launches[0].kernel, ReduceKernel::ColumnsVector);
  EXPECT_EQ(columns.launches[1].kernel, ReduceKernel::FinishWarp);
  EXPECT_GE(columns.launches[0].blocks, 2u * 132u);
  // Short rows: a warp each; odd column counts: scalar columns.
  EXPECT_EQ(plan(Shape{4096, 1000}, 1).launches[0].kernel, ReduceKernel::LinesWarp);
  EXPECT_EQ(plan(Shape{300, 33}, 0).launches[0].kernel, ReduceKernel::Columns);
  EXPECT_EQ(plan(Shape{300, 8}, 1).launches[0].kernel, ReduceKernel::Columns);
  // Lines shorter than 16 elements per lane are not split into chunks: one launch, no finish.
  EXPECT_EQ(plan(Shape{4096, 10}, 1).launches.size(), 1u);
  EXPECT_EQ(plan(Shape{4096, 10}, 0).launches.size(), 2u);  // long columns are
  // A bias's gradient over a batch of 128 (16 rows per lane): one launch.
  EXPECT_EQ(plan(Shape{128, 512}, 0).launches.size(), 1u);
  EXPECT_EQ(plan(Shape{128, 10}, 0).launches.size(), 1u);
  EXPECT_EQ(plan(Shape{4096, 512}, 0).launches.size(), 2u);
  // Misaligned first element: no vector columns.
  const auto strides = strided::contiguous_strides(Shape{256, 64});
  EXPECT_EQ(plan_reduce(Shape{256, 64}, strides.span(), 260, 0, DType::F32, 132, "test")
                .launches[0]
                .kernel,
            ReduceKernel::Columns);
  // Empty outputs launch nothing; an empty dim writes the identity from the columns kernel.
  EXPECT_TRUE(plan(Shape{0, 5}, 1).launches.empty());
  EXPECT_EQ(plan(Shape{5, 0}, 1).launches.size(), 1u);
}

TEST(GpuCodegen, SoftmaxPlansPickTheExpectedPaths) {
  auto plan = [](const Shape& shape, std::int64_t dim, DType dtype = DType::F32) {
    const auto strides = strided::contiguous_strides(shape);
    return plan_softmax(shape, strides.span(), 256, dim, dtype, 132, "test");
  };
  // 8192 f32 per row: a block of 256 per row, 32 values per thread, 16-byte accesses.
  SoftmaxPlan square = plan(Shape{8192, 8192}, 1);
  ASSERT_EQ(square.launches.size(), 1u);
  EXPECT_EQ(square.launches[0].kernel, SoftmaxKernel::RowsBlockVector);
  EXPECT_EQ(square.out_strides, (std::vector<std::int64_t>{8192, 1}));
  EXPECT_EQ(plan(Shape{64, 1000}, 1).launches[0].kernel, SoftmaxKernel::RowsWarpVector);
  EXPECT_EQ(plan(Shape{64, 1001}, 1).launches[0].kernel, SoftmaxKernel::RowsWarp);
  EXPECT_EQ(plan(Shape{64, 10}, 1).launches[0].kernel, SoftmaxKernel::Lines);
  // Short lines, a thread each, spread over every SM: [4096, 10] in 128 blocks of a warp, not 16
  // blocks of 256; many lines in blocks of 256.
  const SoftmaxLaunch few = plan(Shape{4096, 10}, 1).launches[0];
  EXPECT_EQ(few.kernel, SoftmaxKernel::Lines);
  EXPECT_EQ(few.threads, 32u);
  EXPECT_EQ(few.blocks, 128u);
  const SoftmaxLaunch many = plan(Shape{1 << 20, 10}, 1).launches[0];
  EXPECT_EQ(many.threads, 256u);
  EXPECT_EQ(many.blocks, 4096u);
  EXPECT_EQ(plan(Shape{4, 20000}, 1).launches[0].kernel, SoftmaxKernel::RowsWideVector);
  const SoftmaxPlan long_rows = plan(Shape{4, 100000}, 1);
  ASSERT_EQ(long_rows.launches.size(), 3u);
  EXPECT_EQ(long_rows.launches[1].kernel, SoftmaxKernel::Combine);
  const SoftmaxPlan columns = plan(Shape{8192, 8192}, 0);
  ASSERT_EQ(columns.launches.size(), 3u);
  EXPECT_EQ(columns.launches[0].kernel, SoftmaxKernel::LineStats);
  // A transposed input keeps its layout: the output is written where rows are contiguous.
  const Shape t{300, 50};
  const std::vector<std::int64_t> transposed = {1, 300};
  const SoftmaxPlan along = plan_softmax(t, transposed, 256, 0, DType::F32, 132, "test");
  EXPECT_EQ(along.out_strides, (std::vector<std::int64_t>{1, 300}));
  EXPECT_EQ(along.launches[0].kernel, SoftmaxKernel::RowsWarpVector);
}

TEST(GpuCodegen, ScatterFamiliesCompile) {
  // Every dtype with every combining mode (native atomics and the compare-and-swap loops on
  // 8/16/32/64-bit words); Assign moves raw bits, one module per width.
  for (DType d : every_dtype()) {
    for (IndexingUpdate u :
         {IndexingUpdate::Add, IndexingUpdate::Mul, IndexingUpdate::Min, IndexingUpdate::Max}) {
      const std::string log = compile(scatter_source(d, DType::I64, u));
      EXPECT_TRUE(log.empty()) << dtype_name(d) << " mode " << static_cast<int>(u) << ":\n"
                               << log.substr(0, 4000);
    }
  }
  for (DType raw : {DType::U64, DType::U32, DType::U16, DType::U8}) {
    for (DType index : {DType::I64, DType::I32, DType::U8, DType::U64}) {
      const std::string log = compile(scatter_source(raw, index, IndexingUpdate::Assign));
      EXPECT_TRUE(log.empty()) << dtype_name(raw) << "/" << dtype_name(index) << ":\n"
                               << log.substr(0, 4000);
    }
  }
}

TEST(GpuCodegen, SpatialFamiliesCompile) {
  const SpatialKernel pools[] = {
      SpatialKernel::AvgPool,         SpatialKernel::AvgPoolBackward,
      SpatialKernel::MaxPool,         SpatialKernel::MaxPoolBackward,
      SpatialKernel::AdaptiveAvgPool, SpatialKernel::AdaptiveAvgPoolBackward};
  for (DType d : test::kFloatDTypes) {
    for (SpatialKernel k : pools) {
      const std::string log = compile(spatial_source(k, d, DType::I64, InterpolateMode::Nearest));
      EXPECT_TRUE(log.empty()) << spatial_kernel_name(k) << " " << dtype_name(d) << ":\n"
                               << log.substr(0, 4000);
    }
    for (SpatialKernel k : {SpatialKernel::Interpolate, SpatialKernel::InterpolateBackward}) {
      for (InterpolateMode m :
           {InterpolateMode::Nearest, InterpolateMode::Bilinear, InterpolateMode::Bicubic}) {
        const std::string log = compile(spatial_source(k, d, DType::I64, m));
        EXPECT_TRUE(log.empty()) << spatial_kernel_name(k) << " " << dtype_name(d) << " mode "
                                 << static_cast<int>(m) << ":\n"
                                 << log.substr(0, 4000);
      }
    }
  }
  for (DType index : kInts) {
    for (SpatialKernel k : {SpatialKernel::MaxPool, SpatialKernel::MaxPoolBackward}) {
      const std::string log =
          compile(spatial_source(k, DType::F32, index, InterpolateMode::Nearest));
      EXPECT_TRUE(log.empty()) << spatial_kernel_name(k) << " index " << dtype_name(index) << ":\n"
                               << log.substr(0, 4000);
    }
  }
}

TEST(GpuCodegen, ConvFamiliesCompile) {
  for (DType d : test::kFloatDTypes) {
    std::string log = compile(im2col_source(d));
    EXPECT_TRUE(log.empty()) << "im2col " << dtype_name(d) << ":\n" << log.substr(0, 4000);
    log = compile(col2im_source(d));
    EXPECT_TRUE(log.empty()) << "col2im " << dtype_name(d) << ":\n" << log.substr(0, 4000);
  }
  // conv's bias: an elementwise add broadcast along the channels, in place.
  for (DType d : test::kFloatDTypes)
    expect_compiles({"conv", "a + b", {d, d}, d, d, {}}, dtype_name(d));
}

TEST(GpuCodegen, TopkFamiliesCompile) {
  // The select kernel per key type (each width with the kinds of its dtypes) and list length,
  // the merge per width and list length; each to a cubin (PTX in CI) with an empty log (no
  // warning). Compiled on several threads; the CPU times printed are what a first use pays (the
  // disk cache spares the next process). The long lists take NVRTC up to half a minute each,
  // several minutes in all: CI compiles lists of 1 and 4 of every key type, and KILN_CODEGEN=all
  // (scripts/gpu-check) every instance the plugin may ask for.
  const bool every_list = every_instance();
  struct Instance {
    TopkKernel kernel;
    DType dtype;
    int list;
    Compiled result;
  };
  std::vector<Instance> instances;
  const DType dtypes[] = {DType::U8,  DType::I8,  DType::U16, DType::I16, DType::F16, DType::BF16,
                          DType::U32, DType::I32, DType::F32, DType::U64, DType::I64, DType::F64};
  for (DType dtype : dtypes) {
    for (int list = 1; list <= max_select_k(dtype); list *= 2) {
      if (!every_list && list != 1 && list != 4) continue;
      instances.push_back({TopkKernel::Select, dtype, list, {}});
      // The merge depends on the width only: once per width, with its unsigned dtype.
      if (dtype == DType::U8 || dtype == DType::U16 || dtype == DType::U32 || dtype == DType::U64) {
        instances.push_back({TopkKernel::Merge, dtype, list, {}});
      }
    }
  }
  ASSERT_EQ(instances.size(), every_list ? 67u + 22u : 24u + 8u);
  // The slowest first, so the threads finish together.
  std::stable_sort(instances.begin(), instances.end(), [](const Instance& a, const Instance& b) {
    return a.list * 8 / dtype_size(a.dtype) > b.list * 8 / dtype_size(b.dtype);
  });
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < instances.size(); i = next++) {
      Instance& in = instances[i];
      in.result = test::nvrtc_compile(topk_kernel_source(in.kernel, in.dtype, in.list));
    }
  };
  std::vector<std::thread> threads(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  for (std::thread& t : threads) t = std::thread(work);
  for (std::thread& t : threads) t.join();

  double total = 0;
  for (const Instance& in : instances) {
    const std::string key = topk_kernel_key(in.kernel, in.dtype, in.list);
    const Compiled& c = in.result;
    EXPECT_TRUE(c.ok && c.bytes > 0) << key << ":\n" << c.log.substr(0, 4000);
    EXPECT_TRUE(c.log.empty()) << key << " warns:\n" << c.log.substr(0, 4000);
    total += c.cpu_seconds;
    std::cout << "[ topk     ] " << key << ": " << c.cpu_seconds << " s of CPU, " << c.bytes
              << " bytes\n";
  }
  std::cout << "[ topk     ] " << instances.size() << " NVRTC compiles, " << total
            << " s of CPU in all\n";

  // Keys name the instance; the merge is shared by the kinds of a width.
  const std::string select = topk_kernel_source(TopkKernel::Select, DType::I32, 8);
  EXPECT_NE(select.find("__global__ void __launch_bounds__(256) kiln_topk_select(const P p)"),
            std::string::npos);
  EXPECT_EQ(topk_kernel_name(TopkKernel::Merge), std::string("kiln_topk_merge"));
  EXPECT_EQ(topk_kernel_key(TopkKernel::Select, DType::I32, 8), "topk:select:u32:signed:8");
  EXPECT_EQ(topk_kernel_key(TopkKernel::Select, DType::BF16, 32), "topk:select:u16:bf16:32");
  EXPECT_EQ(topk_kernel_key(TopkKernel::Merge, DType::F64, 16), "topk:merge:u64:16");
  EXPECT_EQ(topk_kernel_source(TopkKernel::Merge, DType::F32, 4),
            topk_kernel_source(TopkKernel::Merge, DType::I32, 4));
  EXPECT_THROW((void)topk_kernel_source(TopkKernel::Select, DType::I64, 32), InvalidArgument);
  EXPECT_THROW((void)topk_kernel_source(TopkKernel::Select, DType::F32, 3), InvalidArgument);
  EXPECT_THROW((void)topk_kernel_key(TopkKernel::Select, DType::Bool, 1), UnsupportedDType);
}

TEST(GpuCodegen, ScanFamiliesCompile) {
  // Every module the scans may load: each kernel of each op, per dtype (integer sums and products
  // per width), 160 in all, to a cubin (PTX in CI) with an empty log. They take NVRTC a few tenths
  // of a second each: CI compiles every fifth in (op, dtype, kernel) order, which meets every op,
  // kernel and dtype; KILN_CODEGEN=all compiles them all.
  const bool every = every_instance();
  struct Instance {
    ScanKernel kernel;
    ScanOp op;
    DType dtype;
    std::string key;
    Compiled result;
  };
  std::vector<Instance> instances;
  std::vector<std::string> keys;
  std::vector<DType> numeric(std::begin(test::kFloatDTypes), std::end(test::kFloatDTypes));
  numeric.insert(numeric.end(), kInts.begin(), kInts.end());
  for (ScanOp op : {ScanOp::Sum, ScanOp::Prod, ScanOp::Min, ScanOp::Max}) {
    for (DType dtype : numeric) {
      for (ScanKernel kernel : {ScanKernel::RowsThread, ScanKernel::RowsWarp, ScanKernel::Chunks,
                                ScanKernel::ChunkTotals}) {
        std::string key = scan_kernel_key(kernel, op, dtype);
        if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
        keys.push_back(key);
        if (every || (keys.size() - 1) % 5 == 0) {
          instances.push_back({kernel, op, dtype, std::move(key), {}});
        }
      }
    }
  }
  ASSERT_EQ(keys.size(), 160u);
  ASSERT_EQ(instances.size(), every ? 160u : 32u);
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < instances.size(); i = next++) {
      Instance& in = instances[i];
      in.result = test::nvrtc_compile(scan_kernel_source(in.kernel, in.op, in.dtype));
    }
  };
  std::vector<std::thread> threads(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  for (std::thread& t : threads) t = std::thread(work);
  for (std::thread& t : threads) t.join();

  double total = 0;
  for (const Instance& in : instances) {
    const Compiled& c = in.result;
    EXPECT_TRUE(c.ok && c.bytes > 0) << in.key << ":\n" << c.log.substr(0, 4000);
    EXPECT_TRUE(c.log.empty()) << in.key << " warns:\n" << c.log.substr(0, 4000);
    total += c.cpu_seconds;
    std::cout << "[ scan     ] " << in.key << ": " << c.cpu_seconds << " s of CPU, " << c.bytes
              << " bytes\n";
  }
  std::cout << "[ scan     ] " << instances.size() << " NVRTC compiles, " << total
            << " s of CPU in all\n";
  const std::string chunks = scan_kernel_source(ScanKernel::Chunks, ScanOp::Max, DType::F16);
  EXPECT_NE(chunks.find("__global__ void __launch_bounds__(256) kiln_scan_chunks(const P p)"),
            std::string::npos);
  EXPECT_EQ(scan_kernel_name(ScanKernel::ChunkTotals), std::string("kiln_scan_chunk_totals"));
}
