// Runs the reduction and softmax kernels' generated source on the host: the launches that
// plan_reduce / plan_softmax choose (for a GPU of a few SMs, so lines get cut into chunks), each
// block's threads as real threads (shim.h's emu_launch: barriers, shared memory, warp shuffles),
// grids cut to a few blocks (the grid-stride loops take the rest). Every result is compared
// with the CPU backend: index math, vector heads and tails, chunk boundaries, the partials'
// combination and the NaN / inf rules, without a GPU. Not checked: NVRTC's rounding, speed.
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/cpu_tensor.h"
#include "backends/cuda/reduce.h"
#include "backends/cuda/softmax.h"
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

Primitive cpu_reduce(Reducer r, const Primitive& x, std::int64_t dim) {
  switch (r) {
    case Reducer::Sum:
      return cpub().sum_dim(x, dim);
    case Reducer::Mean:
      return cpub().mean_dim(x, dim);
    case Reducer::Prod:
      return cpub().prod_dim(x, dim);
    case Reducer::Max:
      return cpub().max_dim(x, dim);
    case Reducer::Min:
      return cpub().min_dim(x, dim);
    case Reducer::ArgMax:
      return cpub().argmax(x, dim, DType::I64);
    case Reducer::ArgMin:
      return cpub().argmin(x, dim, DType::I64);
    case Reducer::Any:
      return cpub().any_dim(x, dim);
    case Reducer::All:
      return cpub().all_dim(x, dim);
  }
  return nullptr;
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
  const Reducer float_reducers[] = {Reducer::Sum, Reducer::Mean,   Reducer::Prod,  Reducer::Max,
                                    Reducer::Min, Reducer::ArgMax, Reducer::ArgMin};
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
  auto out = cpu::make_view(*storage, x->shape(),
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

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const std::string which = argc > 1 ? argv[1] : "all";
  if (which == "all" || which == "reduce") reductions();
  if (which == "all" || which == "softmax") softmaxes();
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
