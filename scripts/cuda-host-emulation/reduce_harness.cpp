// Runs the reduction and softmax kernels' generated source on the host: the launches that
// plan_reduce / plan_softmax choose (for a GPU of a few SMs, so lines get cut into chunks), each
// block's threads as real threads (shim.h's emu_launch: barriers, shared memory, warp shuffles),
// grids cut to a few blocks (the grid-stride loops take the rest). Every result is compared
// with the CPU backend: index math, vector heads and tails, chunk boundaries, the partials'
// combination and the NaN / inf rules, without a GPU. Not checked: NVRTC's rounding, speed.
// "fused": the same kernels as the tail of a fused chain (fused_kernel.h), planned as the capture
// plans them, its inputs strided and broadcast or flat; the result and the chain's held value
// compared with the CPU running the chain, then the op.
// "epilogue": a reduction of a tensor with elementwise ops on each result it writes (a capture's
// tail over a tensor and its epilogue), every kernel of the plan, against the CPU.
// "random": a random op captured into a fused kernel (cuda_creation.cpp's random_op, every
// distribution and several dtypes) in each of the kernel's three layouts, then a product with an
// input (flat, or a transposed view): the values must be the CPU's drawn at the same place of
// the stream, bit for bit (the host's maths on both sides).
#include <dlfcn.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/cpu_tensor.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/fused_kernel.h"
#include "backends/cuda/index_kernels.h"
#include "backends/cuda/reduce.h"
#include "backends/cuda/softmax.h"
#include "contract/random_stream.h"
#include "kiln/detail/tensor_ops.h"
#include "runtime/registry.h"

using namespace kiln;
using namespace kiln::cuda;
using kiln::cpu::as_cpu;

namespace {

int failures = 0, checks = 0;
constexpr unsigned kMaxEmulatedBlocks = 3;

Backend& cpub() { return backend_for(Device::cpu()); }

// The host build of one generated module, compiled on first use; returns its launcher. Without
// -fno-gnu-unique, a function-local static (__shared__ in a template) would be one object across
// every loaded module, sized by the first.
using Launcher = void (*)(const void* params, unsigned grid, unsigned block);
Launcher module(const std::string& key, const char* entry,
                const std::function<std::string()>& source) {
  static std::map<std::string, Launcher> loaded;
  if (auto it = loaded.find(key); it != loaded.end()) return it->second;
  const std::string dir = std::getenv("EMU_DIR"), shim = std::getenv("EMU_SHIM");
  const std::string file = dir + "/m_" + key;
  std::ofstream(file + ".cpp")
      << source() << "\nextern \"C\" void emu_run(const void* p, unsigned grid, unsigned block) {\n"
      << "  emu_launch(" << entry << ", grid, block, *(const P*)p);\n}\n";
  const std::string command = "g++ -std=c++20 -O1 -shared -fPIC -fno-gnu-unique -w -include " +
                              shim + " " + file + ".cpp -o " + file + ".so";
  if (std::system(command.c_str()) != 0) {
    std::printf("compile failed: %s\n", key.c_str());
    std::exit(1);
  }
  void* handle = dlopen((file + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::printf("dlopen %s: %s\n", key.c_str(), dlerror());
    std::exit(1);
  }
  auto run = reinterpret_cast<Launcher>(dlsym(handle, "emu_run"));
  loaded[key] = run;
  return run;
}

Kind kind_of(DType d) {
  return is_float(d) ? Kind::Float : d == DType::Bool ? Kind::Bool : Kind::Int;
}

// Values in [lo, hi] (rounded for integer dtypes), with `specials` written at fixed places.
Primitive values(const Shape& shape, DType dtype, std::uint64_t seed, double lo, double hi,
                 const std::vector<std::pair<std::size_t, double>>& specials = {}) {
  Device::cpu().seed(seed);
  Primitive p =
      detail::random(shape, Distribution::uniform(lo, hi), DType::F64, Device::cpu(), Kind::Float);
  auto v = detail::into_data(p).to_f64_vec();
  if (!is_float(dtype))
    for (double& x : v) x = std::round(x);
  for (auto [at, x] : specials)
    if (at < v.size()) v[at] = x;
  return detail::from_data(TensorData::from_vec(v, shape).convert(dtype), Device::cpu(),
                           kind_of(dtype), shape.rank());
}

std::uint64_t address(const Primitive& p) {
  return reinterpret_cast<std::uint64_t>(as_cpu(p).data());
}

void compare(const Primitive& got, const Primitive& want, double tolerance,
             const std::string& what) {
  ++checks;
  if (got->shape() != want->shape()) {
    std::printf("FAIL %s: shape %s vs %s\n", what.c_str(), got->shape().to_string().c_str(),
                want->shape().to_string().c_str());
    ++failures;
    return;
  }
  const auto g = detail::into_data(got).to_f64_vec(), w = detail::into_data(want).to_f64_vec();
  int bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool both_nan = std::isnan(g[i]) && std::isnan(w[i]);
    const bool same_inf = std::isinf(w[i]) && g[i] == w[i];
    if (!both_nan && !same_inf && !(std::fabs(g[i] - w[i]) <= tolerance * (1 + std::fabs(w[i])))) {
      if (bad++ < 3) std::printf("FAIL %s [%zu]: %.9g vs %.9g\n", what.c_str(), i, g[i], w[i]);
    }
  }
  if (bad > 0) ++failures;
  if (std::getenv("EMU_VERBOSE") != nullptr)
    std::printf("%s %s\n", bad > 0 ? "bad" : "ok ", what.c_str());
}

// EMU_FILTER=text runs only the checks whose description contains text.
bool skipped(const std::string& what) {
  const char* filter = std::getenv("EMU_FILTER");
  return filter != nullptr && what.find(filter) == std::string::npos;
}

std::string describe(const Primitive& x, std::int64_t dim) {
  std::string s = std::string(dtype_name(x->dtype())) + " " + x->shape().to_string() + " strides (";
  for (auto st : as_cpu(x).strides().span()) s += std::to_string(st) + ",";
  return s + ") dim " + std::to_string(dim);
}

// ---- reductions ----

DType out_dtype_of(Reducer r, DType d) {
  if (r == Reducer::ArgMax || r == Reducer::ArgMin) return DType::I64;
  if (r == Reducer::Any || r == Reducer::All) return DType::Bool;
  return d;
}

Primitive cpu_reduce(const Reducer& r, const Primitive& x, std::int64_t dim) {
  if (r == Reducer::Sum) return cpub().sum_dim(x, dim);
  if (r == Reducer::Mean) return cpub().mean_dim(x, dim);
  if (r == Reducer::Prod) return cpub().prod_dim(x, dim);
  if (r == Reducer::Max) return cpub().max_dim(x, dim);
  if (r == Reducer::Min) return cpub().min_dim(x, dim);
  if (r == Reducer::ArgMax) return cpub().argmax(x, dim, DType::I64);
  if (r == Reducer::ArgMin) return cpub().argmin(x, dim, DType::I64);
  if (r == Reducer::Any) return cpub().any_dim(x, dim);
  if (r == Reducer::LogSumExp) return cpub().logsumexp_dim(x, dim);
  return cpub().all_dim(x, dim);
}

void check_reduce(Reducer r, const Primitive& x, std::int64_t dim, int sm_count = 3) {
  const DType dtype = x->dtype(), out_dtype = out_dtype_of(r, dtype);
  const std::string what = std::string(reducer_name(r)) + " " + describe(x, dim);
  if (skipped(what)) return;
  Shape out_shape = x->shape();
  out_shape[static_cast<std::size_t>(dim)] = 1;
  auto out = cpu::make_tensor(out_dtype, out_shape);
  ReducePlan plan =
      plan_reduce(x->shape(), as_cpu(x).strides().span(), address(x), dim, dtype, sm_count, "emu");
  std::vector<unsigned char> scratch(static_cast<std::size_t>(plan.scratch_bytes) + 64);
  ReduceParams p = plan.params;
  p.in = address(x);
  p.out = reinterpret_cast<std::uint64_t>(as_cpu(out).data());
  p.scratch = (reinterpret_cast<std::uint64_t>(scratch.data()) + 31) / 32 * 32;
  std::string kernels;
  for (const ReduceLaunch& launch : plan.launches) {
    const char* name = reduce_kernel_name(launch.kernel);
    kernels += std::string(name) + " ";
    const std::string key =
        std::string(name) + "_" + reducer_name(r) + "_" + std::string(dtype_name(dtype));
    Launcher run =
        module(key, name, [&] { return reduce_kernel_source(launch.kernel, r, dtype, out_dtype); });
    run(&p, std::min(launch.blocks, kMaxEmulatedBlocks), launch.threads);
  }
  const double tolerance = !is_float(dtype) || r == Reducer::Max || r == Reducer::Min ? 0
                           : dtype == DType::BF16                                     ? 1e-2
                           : dtype == DType::F32                                      ? 1e-5
                                                                                      : 1e-12;
  compare(out, cpu_reduce(r, x, dim), tolerance,
          what + " [" + kernels + "chunks " + std::to_string(p.chunks) + "]");
}

void reductions() {
  const Reducer float_reducers[] = {Reducer::Sum,    Reducer::Mean,     Reducer::Prod,
                                    Reducer::Max,    Reducer::Min,      Reducer::ArgMax,
                                    Reducer::ArgMin, Reducer::LogSumExp};
  const Reducer int_reducers[] = {Reducer::Sum, Reducer::Max, Reducer::Min, Reducer::ArgMax,
                                  Reducer::ArgMin};
  std::uint64_t seed = 1;
  struct Case {
    Shape shape;
    std::int64_t dim;
    int layout;  // 0 contiguous, 1 transposed (last two dims), 2 flipped last dim, 3 sliced
  };
  const std::vector<Case> cases = {
      {Shape{5000}, 0, 0},      // one contiguous line, block per chunk, finished by warps
      {Shape{7, 1000}, 1, 0},   // a warp per row
      {Shape{3, 4097}, 1, 0},   // a block per chunk of each row, odd length
      {Shape{3, 4100}, 1, 3},   // rows starting off 16-byte boundaries
      {Shape{300, 33}, 0, 0},   // columns, one output per thread, chunked
      {Shape{200, 64}, 0, 0},   // columns, vector loads of adjacent outputs, chunked
      {Shape{4, 50, 6}, 1, 0},  // a middle dim
      {Shape{40, 60}, 0, 1},    // transposed: contiguous lines with a row stride
      {Shape{40, 60}, 1, 1},    // transposed: columns
      {Shape{10, 100}, 1, 2},   // flipped: negative stride
      {Shape{6, 1}, 1, 0},      // size-1 dim
      {Shape{1, 1}, 0, 0},
  };
  for (const Case& c : cases) {
    for (DType dtype : {DType::F64, DType::F32, DType::BF16, DType::I32, DType::U8, DType::I64}) {
      const bool fl = is_float(dtype);
      // Floats: a NaN and infinities in some lines; integers: few values, so many ties.
      std::vector<std::pair<std::size_t, double>> specials;
      if (fl && seed % 3 == 0) specials = {{5, NAN}, {17, INFINITY}, {29, -INFINITY}};
      Primitive x = values(c.shape, dtype, seed++, fl ? -2 : 0, fl ? 2 : 9, specials);
      if (c.layout == 1) x = detail::transpose(x);
      if (c.layout == 2) x = detail::flip(x, {static_cast<std::int64_t>(x->rank()) - 1});
      if (c.layout == 3) x = detail::narrow(x, 1, 1, c.shape[1] - 3);
      for (Reducer r :
           fl ? std::vector<Reducer>(std::begin(float_reducers), std::end(float_reducers))
              : std::vector<Reducer>(std::begin(int_reducers), std::end(int_reducers))) {
        check_reduce(r, x, c.dim);
      }
      if (dtype == DType::F32 || dtype == DType::U8) {
        check_reduce(Reducer::Any, x, c.dim);
        check_reduce(Reducer::All, x, c.dim);
      }
    }
  }
  // Bool any/all, with all-true and all-false lines.
  Primitive b = cpub().greater_elem(values(Shape{64, 300}, DType::F32, seed++, 0, 1), 0.02);
  for (std::int64_t dim : {0, 1}) {
    check_reduce(Reducer::Any, b, dim);
    check_reduce(Reducer::All, b, dim);
  }
  // A long line finished by blocks (more than 64 chunks), and an empty dim.
  check_reduce(Reducer::Sum, values(Shape{300000}, DType::F32, seed++, -1, 1), 0, 16);
  // logsumexp over long lines: float partials settled into double sums, a growing maximum.
  for (DType d : {DType::F32, DType::BF16}) {
    check_reduce(Reducer::LogSumExp, values(Shape{300000}, d, seed++, -30, 30), 0, 16);
    check_reduce(Reducer::LogSumExp, values(Shape{4, 50304}, d, seed++, -20, 20), 1, 16);
    check_reduce(Reducer::LogSumExp, values(Shape{20000, 8}, d, seed++, -20, 20), 0, 16);
  }
  check_reduce(Reducer::ArgMax, values(Shape{300000}, DType::U8, seed++, 0, 50), 0, 16);
  for (Reducer r : {Reducer::Sum, Reducer::Prod, Reducer::Any, Reducer::All}) {
    check_reduce(r, values(Shape{5, 0}, DType::F32, seed++, 0, 1), 1);
  }
}

// ---- softmax ----

void check_softmax(const Primitive& x, std::int64_t dim, bool log, int sm_count = 3) {
  const DType dtype = x->dtype();
  const std::string what = std::string(log ? "log_softmax " : "softmax ") + describe(x, dim);
  if (skipped(what)) return;
  SoftmaxPlan plan =
      plan_softmax(x->shape(), as_cpu(x).strides().span(), address(x), dim, dtype, sm_count, "emu");
  Shape stored = x->shape();
  for (std::size_t i = 0; i < x->rank(); ++i) stored[i] = x->shape()[plan.out_order[i]];
  auto storage = cpu::make_tensor(dtype, stored);
  auto out = make_view(*storage, x->shape(),
                       cpu::Strides(std::span<const std::int64_t>(plan.out_strides)), 0);
  std::vector<unsigned char> partials(static_cast<std::size_t>(plan.partial_bytes) + 64),
      totals(static_cast<std::size_t>(plan.total_bytes) + 64);
  SoftmaxParams p = plan.params;
  p.in = address(x);
  p.out = address(out);
  p.partials = (reinterpret_cast<std::uint64_t>(partials.data()) + 31) / 32 * 32;
  p.totals = (reinterpret_cast<std::uint64_t>(totals.data()) + 31) / 32 * 32;
  std::string kernels;
  for (const SoftmaxLaunch& launch : plan.launches) {
    const char* name = softmax_kernel_name(launch.kernel);
    kernels += std::string(name) + " ";
    const std::string key =
        std::string(name) + "_" + std::string(dtype_name(dtype)) + (log ? "_log" : "");
    Launcher run =
        module(key, name, [&] { return softmax_kernel_source(launch.kernel, dtype, log); });
    run(&p, std::min(launch.blocks, kMaxEmulatedBlocks), launch.threads);
  }
  const Primitive want = log ? cpub().log_softmax(x, dim) : cpub().softmax(x, dim);
  const double tolerance = dtype == DType::BF16 ? 1e-2 : dtype == DType::F32 ? 1e-5 : 1e-12;
  compare(out, want, tolerance, what + " [" + kernels + "chunks " + std::to_string(p.chunks) + "]");
}

void softmaxes() {
  std::uint64_t seed = 500;
  struct Case {
    Shape shape;
    std::int64_t dim;
    int layout;  // 0 contiguous, 1 transposed, 3 sliced (odd row starts)
  };
  const std::vector<Case> cases = {
      {Shape{5, 10}, 1, 0},     // a thread per short row
      {Shape{3, 40}, 1, 0},     // a warp per row, vector
      {Shape{3, 33}, 1, 0},     // a warp per row, scalar
      {Shape{3, 44}, 1, 3},     // rows off 16-byte boundaries
      {Shape{2, 1500}, 1, 0},   // a block per row
      {Shape{1, 9000}, 1, 0},   // a block of 1024 per row
      {Shape{2, 40000}, 1, 0},  // long rows: stats per chunk, combine, write
      {Shape{1, 9001}, 1, 0},   // a block of 1024 per row, scalar
      {Shape{2, 40001}, 1, 0},  // long rows, scalar
      {Shape{40, 3}, 0, 0},     // strided lines in chunks
      {Shape{20, 7}, 0, 0},     // short strided lines in registers
      {Shape{50, 30}, 1, 1},    // transposed, along the strided dim
      {Shape{50, 30}, 0, 1},    // transposed, along the contiguous dim
      {Shape{4, 5, 6}, 0, 0},  {Shape{4, 5, 6}, 1, 0}, {Shape{4, 5, 6}, 2, 0},
      {Shape{7, 1}, 1, 0},     {Shape{1, 7}, 0, 0},
  };
  for (const Case& c : cases) {
    for (DType dtype : {DType::F64, DType::F32, DType::BF16}) {
      // A NaN, +inf and -inf entries, and (second row, when long enough) a row of -inf.
      std::vector<std::pair<std::size_t, double>> specials = {
          {3, NAN}, {9, INFINITY}, {0, -INFINITY}};
      const std::int64_t n = c.shape.num_elements();
      if (c.shape.rank() == 2 && c.layout == 0 && c.dim == 1 && c.shape[0] > 1) {
        for (std::int64_t k = 0; k < c.shape[1]; ++k)
          specials.push_back({static_cast<std::size_t>(c.shape[1] + k), -INFINITY});
      }
      if (n < 12) specials.clear();
      Primitive x = values(c.shape, dtype, seed++, -8, 8, specials);
      if (c.layout == 1) x = detail::transpose(x);
      if (c.layout == 3) x = detail::narrow(x, 1, 1, c.shape[1] - 2);
      for (bool log : {false, true}) check_softmax(x, c.dim, log);
    }
  }
  // Many chunks per long row (the combine pass's block reduction over chunks).
  check_softmax(values(Shape{1, 300000}, DType::F32, seed++, -30, 30), 1, false, 64);
  check_softmax(values(Shape{200, 2}, DType::F32, seed++, -3, 3), 0, true, 4);
}

// ---- a reduction or softmax as the tail of a fused chain ----

// A chain over x, y and b as the capture records it (cuda_arith.cpp's expressions): exp((x - b) *
// y * 0.05) for sums and softmax; (x - b) * y for extrema (exact on both sides), + 3 on integers.
struct Chain {
  FusedLoad load;
  std::vector<std::uint64_t> scalars;
};
Chain chain_of(DType d, bool exp) {
  Chain c;
  FusedKernel& k = c.load.kernel;
  auto op = [&](ElementwiseOp e, std::array<std::int32_t, 3> operands, std::int32_t scalar = 0) {
    k.ops.push_back(FusedKernelOp{std::move(e), operands, scalar, -1});
  };
  k.inputs = {d, d, d};
  op({"sub", "k_sub(a, b)", {d, d}, d, d, {}}, {0, 2});  // 3
  op({"mul", "k_mul(a, b)", {d, d}, d, d, {}}, {3, 1});  // 4
  if (!is_float(d)) {
    op({"add_scalar", "k_add(a, s0)", {d}, d, d, {d}}, {4});
    c.scalars = {scalar_bits(3, d)};
  } else if (exp) {
    op({"mul_scalar", "k_mul(a, s0)", {d}, d, d, {d}}, {4});  // 5
    op({"exp", "k_exp(a)", {d}, d, d, {}}, {5});              // 6
    c.scalars = {scalar_bits(0.05, d)};
  }
  k.outputs = {{k.value_of_op(k.ops.size() - 1), d}};  // the value the tail reads, held too
  c.load.value = k.value_of_op(k.ops.size() - 1);
  c.load.dtype = d;
  return c;
}

Primitive cpu_chain(const Chain& c, const Primitive& x, const Primitive& y, const Primitive& b) {
  Primitive t = cpub().mul(cpub().sub(x, b), y);
  if (!is_float(x->dtype())) return cpub().add_scalar(t, Scalar(3));
  if (c.load.kernel.ops.size() == 2) return t;
  return cpub().exp(cpub().mul_scalar(t, Scalar(0.05)));
}

struct Tail {
  Shape shape;
  std::int64_t dim;
  bool strided;  // y transposed and b broadcast along dim 0; else both of x's shape (flat)
};

// The inputs and the chain's parameters as KernelCapture::run_with_tail fills them (dims not
// merged: merging only saves divisions); held receives the chain's value.
struct FusedInputs {
  Primitive x, y, b, held;
  FusedTailParams params;
  unsigned error = 0;
};
void fill(FusedInputs& in, const Chain& c, const Tail& t, DType d, std::uint64_t seed) {
  Shape y_shape = t.shape, b_shape = t.shape;
  if (t.strided) {
    for (std::size_t k = 0; k < t.shape.rank(); ++k) y_shape[k] = t.shape[t.shape.rank() - 1 - k];
    b_shape[0] = 1;
  }
  const bool fl = is_float(d);
  in.x = values(t.shape, d, seed, fl ? -2 : -3, fl ? 2 : 3);
  in.y = values(y_shape, d, seed + 1, fl ? -2 : -3, fl ? 2 : 3);
  if (t.strided) {
    std::vector<std::int64_t> axes(t.shape.rank());
    for (std::size_t k = 0; k < axes.size(); ++k)
      axes[k] = static_cast<std::int64_t>(axes.size() - 1 - k);
    in.y = detail::permute(in.y, axes);
  }
  in.b = values(b_shape, d, seed + 2, fl ? -2 : -3, fl ? 2 : 3);
  in.held = cpu::make_tensor(d, t.shape);
  std::memset(&in.params, 0, sizeof in.params);
  FusedParams& f = in.params.chain;
  f.n = t.shape.num_elements();
  f.rank = static_cast<std::int32_t>(t.shape.rank());
  const Primitive* inputs[] = {&in.x, &in.y, &in.b};
  for (std::size_t k = 0; k < 3; ++k) {
    const auto& tensor = as_cpu(*inputs[k]);
    for (std::size_t dim = 0; dim < t.shape.rank(); ++dim) {
      const bool broadcast = tensor.shape()[dim] == 1 && t.shape[dim] != 1;
      f.strides[k][dim] = broadcast ? 0 : tensor.strides()[dim];
    }
    f.in[k] = address(*inputs[k]);
    in.params.along[k] = f.strides[k][static_cast<std::size_t>(t.dim)];
  }
  for (std::size_t dim = 0; dim < t.shape.rank(); ++dim) f.sizes[dim] = t.shape[dim];
  f.out[0] = address(in.held);
  std::copy(c.scalars.begin(), c.scalars.end(), f.s);
  f.error_word = reinterpret_cast<std::uint64_t>(&in.error);
}

std::string describe_tail(const char* op, DType d, const Tail& t) {
  return std::string(op) + " fused " + std::string(dtype_name(d)) + " " + t.shape.to_string() +
         " dim " + std::to_string(t.dim) + (t.strided ? " strided" : " flat");
}

void check_fused_reduce(const Reducer& r, DType d, const Tail& t, std::uint64_t seed) {
  const std::string what = describe_tail(reducer_name(r), d, t);
  if (skipped(what)) return;
  const bool extremum =
      r == Reducer::Max || r == Reducer::Min || r == Reducer::ArgMax || r == Reducer::ArgMin;
  Chain c = chain_of(d, !extremum);
  FusedInputs in;
  fill(in, c, t, d, seed);
  c.load.flat = !t.strided;
  const DType out_dtype = out_dtype_of(r, d);
  Shape out_shape = t.shape;
  out_shape[static_cast<std::size_t>(t.dim)] = 1;
  auto out = cpu::make_tensor(out_dtype, out_shape);
  // As reduce_dim plans x under a capture: a placeholder, contiguous at address 0.
  const auto contiguous = strided::contiguous_strides(t.shape);
  ReducePlan plan = plan_reduce(t.shape, contiguous.span(), 0, t.dim, d, 3, "emu");
  std::vector<unsigned char> scratch(static_cast<std::size_t>(plan.scratch_bytes) + 64);
  struct {
    ReduceParams reduce;
    FusedTailParams chain;
  } p{plan.params, in.params};
  p.reduce.out = address(out);
  p.reduce.scratch = (reinterpret_cast<std::uint64_t>(scratch.data()) + 31) / 32 * 32;
  std::string kernels;
  for (const ReduceLaunch& launch : plan.launches) {
    const char* name = reduce_kernel_name(launch.kernel);
    kernels += std::string(name) + " ";
    const bool finish =
        launch.kernel == ReduceKernel::FinishWarp || launch.kernel == ReduceKernel::FinishBlock;
    const std::string key = std::string(name) + "_" + reducer_name(r) + "_" +
                            std::string(dtype_name(d)) +
                            (finish ? ""
                                    : std::string("_fused_") + (c.load.flat ? "f" : "s") +
                                          std::to_string(c.load.kernel.ops.size()));
    Launcher run = module(key, name, [&] {
      return reduce_kernel_source(launch.kernel, r, d, out_dtype, finish ? nullptr : &c.load);
    });
    const void* params = finish ? static_cast<const void*>(&p.reduce) : &p;
    run(params, std::min(launch.blocks, kMaxEmulatedBlocks), launch.threads);
  }
  const Primitive value = cpu_chain(c, in.x, in.y, in.b);
  const double tolerance = !is_float(d) || extremum ? 0
                           : d == DType::BF16       ? 1e-2
                           : d == DType::F32        ? 1e-5
                                                    : 1e-12;
  const std::string how = " [" + kernels + "chunks " + std::to_string(p.reduce.chunks) + "]";
  compare(out, cpu_reduce(r, value, t.dim), tolerance, what + how);
  compare(in.held, value, tolerance, what + " (held)" + how);
}

void check_fused_softmax(DType d, const Tail& t, bool log, std::uint64_t seed) {
  const std::string what = describe_tail(log ? "log_softmax" : "softmax", d, t);
  if (skipped(what)) return;
  Chain c = chain_of(d, true);
  FusedInputs in;
  fill(in, c, t, d, seed);
  c.load.flat = !t.strided;
  const auto contiguous = strided::contiguous_strides(t.shape);
  SoftmaxPlan plan = plan_softmax(t.shape, contiguous.span(), 0, t.dim, d, 3, "emu");
  Shape stored = t.shape;
  for (std::size_t i = 0; i < t.shape.rank(); ++i) stored[i] = t.shape[plan.out_order[i]];
  auto storage = cpu::make_tensor(d, stored);
  auto out = make_view(*storage, t.shape,
                       cpu::Strides(std::span<const std::int64_t>(plan.out_strides)), 0);
  std::vector<unsigned char> partials(static_cast<std::size_t>(plan.partial_bytes) + 64),
      totals(static_cast<std::size_t>(plan.total_bytes) + 64);
  struct {
    SoftmaxParams softmax;
    FusedTailParams chain;
  } p{plan.params, in.params};
  p.softmax.out = address(out);
  p.softmax.partials = (reinterpret_cast<std::uint64_t>(partials.data()) + 31) / 32 * 32;
  p.softmax.totals = (reinterpret_cast<std::uint64_t>(totals.data()) + 31) / 32 * 32;
  std::string kernels;
  for (const SoftmaxLaunch& launch : plan.launches) {
    const char* name = softmax_kernel_name(launch.kernel);
    kernels += std::string(name) + " ";
    const bool combine = launch.kernel == SoftmaxKernel::Combine;
    const std::string key = std::string(name) + "_" + std::string(dtype_name(d)) +
                            (log ? "_log" : "") +
                            (combine ? "" : std::string("_fused_") + (c.load.flat ? "f" : "s"));
    Launcher run = module(key, name, [&] {
      return softmax_kernel_source(launch.kernel, d, log, combine ? nullptr : &c.load);
    });
    const void* params = combine ? static_cast<const void*>(&p.softmax) : &p;
    run(params, std::min(launch.blocks, kMaxEmulatedBlocks), launch.threads);
  }
  const Primitive value = cpu_chain(c, in.x, in.y, in.b);
  const Primitive want = log ? cpub().log_softmax(value, t.dim) : cpub().softmax(value, t.dim);
  const double tolerance = d == DType::BF16 ? 1e-2 : d == DType::F32 ? 1e-5 : 1e-12;
  const std::string how = " [" + kernels + "chunks " + std::to_string(p.softmax.chunks) + "]";
  compare(out, want, tolerance, what + how);
  compare(in.held, value, tolerance, what + " (held)" + how);
}

void fused_tails() {
  std::uint64_t seed = 900;
  const std::vector<Tail> reduce_tails = {
      {Shape{7, 1000}, 1, false},  // a warp per row
      {Shape{3, 4097}, 1, true},   // a block per chunk of each row
      {Shape{300, 33}, 0, true},   // columns, one output per thread
      {Shape{200, 64}, 0, false},  // columns, vector loads of adjacent outputs
      {Shape{200, 64}, 0, true},
      {Shape{4, 50, 6}, 1, true},  // a middle dim
      {Shape{6, 40, 50}, 2, true},
      {Shape{6, 40, 52}, 0, true},  // columns over lines of the two inner dims
      {Shape{6, 1}, 1, true},       // size-1 dim
  };
  for (const Tail& t : reduce_tails) {
    for (DType d : {DType::F32, DType::BF16, DType::F64}) {
      for (const Reducer& r :
           {Reducer::Sum, Reducer::Mean, Reducer::Max, Reducer::ArgMax, Reducer::LogSumExp})
        check_fused_reduce(r, d, t, seed++);
    }
    for (const Reducer& r : {Reducer::Sum, Reducer::Min, Reducer::ArgMin})
      check_fused_reduce(r, DType::I32, t, seed++);
  }
  const std::vector<Tail> softmax_tails = {
      {Shape{5, 10}, 1, true},      // a thread per short row
      {Shape{3, 40}, 1, false},     // a warp per row, vector
      {Shape{3, 33}, 1, true},      // a warp per row, scalar
      {Shape{2, 1500}, 1, true},    // a block per row
      {Shape{2, 40000}, 1, false},  // long rows: stats, combine, a second read to write
      {Shape{2, 40001}, 1, true},  {Shape{40, 3}, 0, true},  // strided lines in chunks
      {Shape{20, 7}, 0, false},                              // short strided lines in registers
      {Shape{4, 5, 6}, 0, true},   {Shape{4, 5, 6}, 1, true}, {Shape{4, 5, 6}, 2, false},
  };
  for (const Tail& t : softmax_tails) {
    for (DType d : {DType::F32, DType::BF16}) {
      for (bool log : {false, true}) check_fused_softmax(d, t, log, seed++);
    }
  }
}

// ---- random as a step of a fused kernel ----

void check_fused_random(Distribution d, DType dtype, KernelLayout layout, bool product) {
  const Shape shape{7, 143};  // 1001 elements: the wide kernel's scalar tail runs too
  const RandomStream at{42, 123456789};
  const std::string what = "random kind " + std::to_string(static_cast<int>(d.kind)) + " " +
                           std::string(dtype_name(dtype)) + " layout " +
                           std::string(1, static_cast<char>(layout)) + (product ? " * x" : "");
  if (skipped(what)) return;
  FusedKernel k;
  k.inputs = {dtype};
  k.ops.push_back(FusedKernelOp{random_op(d.kind, dtype), {}, 0, -1});  // value 1
  k.outputs = {{1, dtype}};
  if (product) {  // value 2: x * r (x of r's dtype), x transposed in the strided layout
    k.ops.push_back(
        FusedKernelOp{{"mul", "k_mul(a, b)", {dtype, dtype}, dtype, dtype, {}}, {0, 1}, 4, -1});
    k.outputs.push_back({2, dtype});
  }
  const bool strided = layout == KernelLayout::Strided;
  Primitive x = values(strided ? Shape{shape[1], shape[0]} : shape, dtype, 5, -2, 2);
  if (strided) x = detail::permute(x, {1, 0});
  auto r = cpu::make_tensor(dtype, shape), y = cpu::make_tensor(dtype, shape);
  const std::uint64_t scalars[] = {at.seed, at.first, scalar_bits(d.a, DType::F64),
                                   scalar_bits(d.b, DType::F64)};
  unsigned error = 0;
  const char* entry = strided                        ? "kiln_fused"
                      : layout == KernelLayout::Flat ? "kiln_fused_flat"
                                                     : "kiln_fused_vec";
  // The key as a file name: its hash (the key's text has characters a shell would read).
  const std::string file_key = "random_" + std::string(1, static_cast<char>(layout)) + "_" +
                               std::to_string(std::hash<std::string>{}(fused_kernel_key(k)));
  Launcher run = module(file_key, entry, [&] {
    return fused_kernel_source(k, layout) + (strided ? "typedef FP P;\n" : "typedef FF P;\n");
  });
  FusedParams fp{};
  FusedFlatParams ff{};
  fp.n = ff.n = shape.num_elements();
  fp.rank = 2;
  for (std::size_t dim = 0; dim < 2; ++dim) {
    fp.sizes[dim] = shape[dim];
    fp.strides[0][dim] = as_cpu(x).strides()[dim];
  }
  fp.in[0] = ff.in[0] = address(x);
  fp.out[0] = ff.out[0] = address(r);
  fp.out[1] = ff.out[1] = address(y);
  std::copy(std::begin(scalars), std::end(scalars), fp.s);
  std::copy(std::begin(scalars), std::end(scalars), ff.s);
  fp.error_word = ff.error_word = reinterpret_cast<std::uint64_t>(&error);
  run(strided ? static_cast<const void*>(&fp) : &ff, kMaxEmulatedBlocks, 64);
  Primitive want;
  {
    const DrawRandomAt pin(at);
    want = cpub().random(shape, d, dtype, Device::cpu());
  }
  compare(r, want, 0, what);
  if (product) compare(y, cpub().mul(x, want), 0, what + " (product)");
}

// ---- the strided fused kernel: runs along the last dim, wraps, broadcasts, transposes ----

void check_fused_strided(const Shape& shape, bool transposed) {
  const std::string what =
      "strided fused " + shape.to_string() + (transposed ? " (z transposed)" : "");
  if (skipped(what)) return;
  const DType f = DType::F32;
  FusedKernel k;
  k.inputs = {f, f, f};
  k.ops.push_back(FusedKernelOp{{"mul", "k_mul(a, b)", {f, f}, f, f, {}}, {0, 1}, 0, -1});  // 3
  k.ops.push_back(FusedKernelOp{{"add", "k_add(a, b)", {f, f}, f, f, {}}, {3, 2}, 0, -1});  // 4
  k.outputs = {{4, f}, {3, f}};
  const std::size_t rank = shape.rank();
  Shape row(std::vector<std::int64_t>(rank, 1));
  row[rank - 1] = shape[rank - 1];  // broadcast over every dim but the last
  Primitive x = values(shape, f, 11, -2, 2), y = values(row, f, 12, -2, 2);
  Shape reversed = shape;
  for (std::size_t d = 0; d < rank; ++d) reversed[d] = shape[rank - 1 - d];
  std::vector<std::int64_t> order(rank);
  for (std::size_t d = 0; d < rank; ++d) order[d] = static_cast<std::int64_t>(rank - 1 - d);
  Primitive z = transposed ? detail::permute(values(reversed, f, 13, -2, 2), order)
                           : values(shape, f, 13, -2, 2);
  auto out = cpu::make_tensor(f, shape), product = cpu::make_tensor(f, shape);
  unsigned error = 0;
  const std::string file_key =
      "strided_" + std::to_string(std::hash<std::string>{}(fused_kernel_key(k)));
  Launcher run = module(file_key, "kiln_fused", [&] {
    return fused_kernel_source(k, KernelLayout::Strided) + "typedef FP P;\n";
  });
  FusedParams fp{};
  fp.n = shape.num_elements();
  fp.rank = static_cast<int>(rank);
  const Primitive inputs[] = {x, detail::expand(y, shape), z};
  for (std::size_t d = 0; d < rank; ++d) {
    fp.sizes[d] = shape[d];
    for (std::size_t j = 0; j < 3; ++j) fp.strides[j][d] = as_cpu(inputs[j]).strides()[d];
  }
  for (std::size_t j = 0; j < 3; ++j) fp.in[j] = address(inputs[j]);
  fp.out[0] = address(out);
  fp.out[1] = address(product);
  fp.error_word = reinterpret_cast<std::uint64_t>(&error);
  run(&fp, kMaxEmulatedBlocks, 64);
  const Primitive want_product = cpub().mul(x, detail::expand(y, shape));
  compare(product, want_product, 0, what + " (x * y)");
  compare(out, cpub().add(want_product, z), 1e-6, what);
}

void fused_strided() {
  // Rows longer than a warp's run, a row of 143 (wraps inside a run), rows shorter than a warp.
  for (const Shape& shape : {Shape{9, 512}, Shape{7, 143}, Shape{3, 5, 301}, Shape{40, 10},
                             Shape{2, 3, 4, 5}, Shape{1, 1000}}) {
    for (bool transposed : {false, true}) check_fused_strided(shape, transposed);
  }
}

// ---- the rows kernel: x (whole) * bias row + per-row value (a column, or every other element)
// ----

// kiln_fused_rows's parameters over [rows, cols] for the inputs "frc" (whole, a row, a value per
// row), each already expanded to the shape; the error word in error.
FusedParams rows_params(const Shape& shape, const Primitive (&inputs)[3], unsigned& error) {
  FusedParams fp{};
  fp.n = shape.num_elements();
  fp.rank = 2;
  fp.sizes[0] = shape[0];
  fp.sizes[1] = shape[1];
  for (std::size_t j = 0; j < 3; ++j) {
    for (std::size_t d = 0; d < 2; ++d) fp.strides[j][d] = as_cpu(inputs[j]).strides()[d];
    fp.in[j] = address(inputs[j]);
  }
  fp.error_word = reinterpret_cast<std::uint64_t>(&error);
  return fp;
}

void check_fused_rows(std::int64_t rows, std::int64_t cols, bool strided_column) {
  const std::string what = "rows fused [" + std::to_string(rows) + ", " + std::to_string(cols) +
                           "]" + (strided_column ? " (column every other element)" : "");
  if (skipped(what)) return;
  const DType f = DType::F32;
  FusedKernel k;
  k.inputs = {f, f, f};
  k.ops.push_back(FusedKernelOp{{"mul", "k_mul(a, b)", {f, f}, f, f, {}}, {0, 1}, 0, -1});  // 3
  k.ops.push_back(FusedKernelOp{{"add", "k_add(a, b)", {f, f}, f, f, {}}, {3, 2}, 0, -1});  // 4
  k.outputs = {{4, f}, {3, f}};
  const Shape shape{rows, cols};
  Primitive x = values(shape, f, 21, -2, 2), bias = values(Shape{1, cols}, f, 22, -2, 2);
  Primitive column = strided_column
                         ? detail::slice(values(Shape{rows, 2}, f, 23, -2, 2), {{0, rows}, {0, 1}})
                         : values(Shape{rows, 1}, f, 23, -2, 2);
  auto out = cpu::make_tensor(f, shape), product = cpu::make_tensor(f, shape);
  unsigned error = 0;
  const std::string file_key =
      "rows_" + std::to_string(std::hash<std::string>{}(fused_kernel_key(k)));
  Launcher run = module(file_key, "kiln_fused_rows", [&] {
    return fused_rows_source(k, "frc", fused_rows_width(k, "frc")) + "typedef FP P;\n";
  });
  const Primitive inputs[] = {x, detail::expand(bias, shape), detail::expand(column, shape)};
  FusedParams fp = rows_params(shape, inputs, error);
  fp.out[0] = address(out);
  fp.out[1] = address(product);
  run(&fp, kMaxEmulatedBlocks, 64);
  const Primitive want_product = cpub().mul(x, inputs[1]);
  compare(product, want_product, 0, what + " (x * bias)");
  compare(out, cpub().add(want_product, inputs[2]), 1e-6, what);
}

// bf16 rows scaled by a bf16 row plus an f32 value per row, written as bf16: the 'c' input does
// not narrow the vectors (fused_rows_width: 8 elements), and the values are the CPU's bits.
void check_fused_rows_bf16(std::int64_t rows, std::int64_t cols) {
  const std::string what =
      "rows fused bf16 [" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
  if (skipped(what)) return;
  const DType f = DType::F32, h = DType::BF16;
  FusedKernel k;
  k.inputs = {h, h, f};
  k.ops.push_back(FusedKernelOp{{"cast", "a", {h}, h, f, {}}, {0}, 0, -1});                 // 3
  k.ops.push_back(FusedKernelOp{{"cast", "a", {h}, h, f, {}}, {1}, 0, -1});                 // 4
  k.ops.push_back(FusedKernelOp{{"mul", "k_mul(a, b)", {f, f}, f, f, {}}, {3, 4}, 0, -1});  // 5
  k.ops.push_back(FusedKernelOp{{"add", "k_add(a, b)", {f, f}, f, h, {}}, {5, 2}, 0, -1});  // 6
  k.outputs = {{6, h}};
  if (fused_rows_width(k, "frc") != 8) {
    std::printf("FAIL %s: width %lld, not 8\n", what.c_str(),
                static_cast<long long>(fused_rows_width(k, "frc")));
    ++failures;
    return;
  }
  const Shape shape{rows, cols};
  const Primitive x = values(shape, h, 31, -2, 2), bias = values(Shape{1, cols}, h, 32, -2, 2);
  const Primitive column = values(Shape{rows, 1}, f, 33, -2, 2);
  auto out = cpu::make_tensor(h, shape);
  unsigned error = 0;
  Launcher run =
      module("rows_bf16_" + std::to_string(std::hash<std::string>{}(fused_kernel_key(k))),
             "kiln_fused_rows", [&] { return fused_rows_source(k, "frc", 8) + "typedef FP P;\n"; });
  const Primitive inputs[] = {x, detail::expand(bias, shape), detail::expand(column, shape)};
  FusedParams fp = rows_params(shape, inputs, error);
  fp.out[0] = address(out);
  run(&fp, kMaxEmulatedBlocks, 64);
  const Primitive product = cpub().mul(cpub().cast(x, f), cpub().cast(inputs[1], f));
  compare(out, cpub().cast(cpub().add(product, inputs[2]), h), 0, what);
}

void fused_rows() {
  for (const auto& [rows, cols] :
       {std::pair<std::int64_t, std::int64_t>{9, 512}, {33, 8}, {1, 4}, {300, 12}}) {
    for (bool strided_column : {false, true}) check_fused_rows(rows, cols, strided_column);
  }
  for (const auto& [rows, cols] :
       {std::pair<std::int64_t, std::int64_t>{9, 512}, {33, 8}, {1, 16}, {300, 24}}) {
    check_fused_rows_bf16(rows, cols);
  }
}

void fused_randoms() {
  const Distribution kinds[] = {Distribution::standard(), Distribution::uniform(-3, 5),
                                Distribution::normal(1, 2), Distribution::bernoulli(0.3)};
  for (const Distribution& d : kinds) {
    for (KernelLayout layout : {KernelLayout::Flat, KernelLayout::Strided, KernelLayout::Wide}) {
      // (f16 converts through PTX instructions the host cannot run)
      for (DType dtype : {DType::F32, DType::F64, DType::BF16})
        check_fused_random(d, dtype, layout, true);
      for (DType dtype : {DType::I32, DType::U8, DType::I64})
        check_fused_random(d, dtype, layout, false);
    }
  }
}

// ---- a reduction of a tensor with elementwise ops on each result (kernel_capture.h) ----

// The epilogue's scalar s0 as the kernel reads it (its compute type's bits).
std::uint64_t scalar_word(double value, DType d) {
  if (d == DType::F64) return std::bit_cast<std::uint64_t>(value);
  return std::bit_cast<std::uint32_t>(static_cast<float>(value));
}

// Every kernel of the plan with the epilogue b - (r * s0 + c) (r the result, b of the result's
// shape, c a [1, 1] broadcast to it) and r * s0 also written; against the CPU's reduction, then
// those ops.
void check_epilogue(const Reducer& r, DType d, const Shape& shape, std::int64_t dim,
                    std::uint64_t seed) {
  const std::string what = std::string(reducer_name(r)) + " epilogue " +
                           std::string(dtype_name(d)) + " " + shape.to_string() + " dim " +
                           std::to_string(dim);
  if (skipped(what)) return;
  const Primitive x = values(shape, d, seed, -2, 2);
  Shape out_shape = shape;
  out_shape[static_cast<std::size_t>(dim)] = 1;
  const Primitive b = values(out_shape, d, seed + 1, -2, 2);
  const Primitive c = values(Shape{1, 1}, d, seed + 2, -2, 2);
  auto result = cpu::make_tensor(d, out_shape);
  auto updated = cpu::make_tensor(d, out_shape), scaled = cpu::make_tensor(d, out_shape);
  FusedKernel k;
  k.inputs = {d, d, d};                                                       // r, b, c
  k.ops.push_back({{"mul_scalar", "k_mul(a, s0)", {d}, d, d, {d}}, {0}, 0});  // 3
  k.ops.push_back({{"add", "k_add(a, b)", {d, d}, d, d, {}}, {3, 2}});        // 4
  k.ops.push_back({{"sub", "k_sub(a, b)", {d, d}, d, d, {}}, {1, 4}});        // 5
  k.outputs = {{5, d}, {3, d}};
  const double s0 = 0.375;
  ReducePlan plan = plan_reduce(shape, as_cpu(x).strides().span(), address(x), dim, d, 3, "emu");
  std::vector<unsigned char> scratch(static_cast<std::size_t>(plan.scratch_bytes) + 64);
  struct {
    ReduceParams reduce;
    FusedParams epilogue;
  } p{};
  p.reduce = plan.params;
  p.reduce.in = address(x);
  p.reduce.out = address(result);
  p.reduce.scratch = (reinterpret_cast<std::uint64_t>(scratch.data()) + 31) / 32 * 32;
  FusedParams& e = p.epilogue;
  e.n = out_shape.num_elements();
  e.rank = static_cast<std::int32_t>(out_shape.rank());
  const auto contiguous = strided::contiguous_strides(out_shape);
  for (std::size_t j = 0; j < out_shape.rank(); ++j) {
    e.sizes[j] = out_shape[j];
    e.strides[0][j] = contiguous[j];
    e.strides[1][j] = as_cpu(b).strides()[j];
    e.strides[2][j] = 0;  // c: one value for all
  }
  e.in[1] = address(b);
  e.in[2] = address(c);
  e.out[0] = address(updated);
  e.out[1] = address(scaled);
  e.s[0] = scalar_word(s0, d);
  std::string kernels;
  for (const ReduceLaunch& launch : plan.launches) {
    const char* name = reduce_kernel_name(launch.kernel);
    kernels += std::string(name) + " ";
    const std::string key =
        std::string(name) + "_" + reducer_name(r) + "_" + std::string(dtype_name(d)) + "_epilogue";
    Launcher run = module(
        key, name, [&] { return reduce_kernel_source(launch.kernel, r, d, d, nullptr, &k); });
    run(&p, std::min(launch.blocks, kMaxEmulatedBlocks), launch.threads);
  }
  const Primitive want = cpu_reduce(r, x, dim);
  const Primitive want_scaled = cpub().mul_scalar(want, Scalar(s0));
  const Primitive want_updated = cpub().sub(b, cpub().add(want_scaled, c));
  const bool extremum = r == Reducer::Max || r == Reducer::Min;
  const double tolerance = extremum           ? 0
                           : d == DType::BF16 ? 1e-2
                           : d == DType::F16  ? 1e-3
                           : d == DType::F32  ? 1e-5
                                              : 1e-12;
  const std::string how = " [" + kernels + "chunks " + std::to_string(p.reduce.chunks) + "]";
  compare(result, want, tolerance, what + how);
  compare(scaled, want_scaled, tolerance, what + " (r * s0)" + how);
  compare(updated, want_updated, tolerance, what + " (b - (r * s0 + c))" + how);
}

void epilogues() {
  std::uint64_t seed = 500;
  for (const Reducer& r : {Reducer::Sum, Reducer::Mean, Reducer::Max}) {
    // (f16 converts with PTX instructions the host cannot run.)
    for (DType d : {DType::F32, DType::BF16, DType::F64}) {
      // Columns, lines, columns split into chunks and finished, long lines split and finished.
      check_epilogue(r, d, Shape{37, 300}, 0, seed++);
      check_epilogue(r, d, Shape{37, 300}, 1, seed++);
      check_epilogue(r, d, Shape{6000, 7}, 0, seed++);
      check_epilogue(r, d, Shape{3, 20000}, 1, seed++);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const std::string which = argc > 1 ? argv[1] : "all";
  if (which == "all" || which == "reduce") reductions();
  if (which == "all" || which == "softmax") softmaxes();
  if (which == "all" || which == "fused") fused_tails();
  if (which == "all" || which == "random") fused_randoms();
  if (which == "all" || which == "strided") fused_strided();
  if (which == "all" || which == "rows") fused_rows();
  if (which == "all" || which == "epilogue") epilogues();
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
