// Runs the generated scatter and spatial kernels on the host (single-threaded, through shim.h)
// with parameters filled as cuda_scatter.cpp / cuda_spatial.cpp fill them, and compares every
// result with the CPU backend: f64/f32/bf16 pooling and interpolation, scatter in every mode
// (both strategies) for f64, i8, i16, i32, u64, bf16, Bool. A check of index math, windows,
// taps and the CAS loops' logic without a GPU (not of concurrency or NVRTC's rounding).
#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "backends/cpu/cpu_tensor.h"
#include "backends/cuda/scatter.h"
#include "backends/cuda/spatial.h"
#include "contract/spatial_shape.h"
#include "kiln/detail/tensor_ops.h"
#include "runtime/registry.h"
namespace kiln::cuda {
using CudaTensor = kiln::cpu::CpuTensor;
#include "helpers.inc"  // the anonymous-namespace helpers of cuda_spatial.cpp
}  // namespace kiln::cuda
using namespace kiln;
using namespace kiln::cuda;
using kiln::cpu::as_cpu;
static int failures = 0, checks = 0;
template <class P>
void run(const std::string& name, const char* entry, const P& p) {
  void* h = dlopen((std::string(std::getenv("EMU_DIR")) + "/k_" + name + ".so").c_str(),
                   RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("dlopen %s: %s\n", name.c_str(), dlerror());
    exit(1);
  }
  auto f = (void (*)(P))dlsym(h, entry);
  if (!f) {
    printf("no %s in %s\n", entry, name.c_str());
    exit(1);
  }
  f(p);
}
Primitive rnd(const Shape& shape, DType dtype, std::uint64_t seed, double lo, double hi,
              bool round = false) {
  Device::cpu().seed(seed);
  Primitive p =
      detail::random(shape, Distribution::uniform(lo, hi), DType::F64, Device::cpu(), Kind::Float);
  auto v = detail::into_data(p).to_f64_vec();
  if (round)
    for (double& x : v) x = std::round(x);
  return detail::from_data(
      TensorData::from_vec(v, shape).convert(dtype), Device::cpu(),
      is_float(dtype) ? Kind::Float : (dtype == DType::Bool ? Kind::Bool : Kind::Int),
      shape.rank());
}
void compare(const Primitive& got, const Primitive& want, double tol, const std::string& what) {
  ++checks;
  auto g = detail::into_data(got).to_f64_vec(), w = detail::into_data(want).to_f64_vec();
  if (got->shape() != want->shape()) {
    printf("FAIL %s shape %s vs %s\n", what.c_str(), got->shape().to_string().c_str(),
           want->shape().to_string().c_str());
    ++failures;
    return;
  }
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool nan = std::isnan(g[i]) && std::isnan(w[i]);
    if (!nan && !(std::fabs(g[i] - w[i]) <= tol * (1 + std::fabs(w[i])))) {
      if (bad++ < 3) printf("FAIL %s [%zu] %g vs %g\n", what.c_str(), i, g[i], w[i]);
    }
  }
  if (bad) ++failures;
}
u_int64_t ptr(const Primitive& p) { return (u_int64_t)as_cpu(p).data(); }
Backend& cpub() { return backend_for(Device::cpu()); }
unsigned err_word = 0;

int main() {
  std::uint64_t seed = 1;
  for (DType SD : {DType::F64, DType::F32, DType::BF16}) {
    const DType CD = SD == DType::F64 ? DType::F64 : DType::F32;
    const std::string SUF = dtype_name(SD).data();
    const double TOL = SD == DType::F64 ? 1e-12 : (SD == DType::F32 ? 1e-6 : 1e-2);
    auto body = [&]<class CT>() {
      struct Case {
        Shape shape;
        PoolOptions o;
      };
      std::vector<Case> cases = {
          {Shape{2, 3, 17}, {{3}, {2}, {1}, {1}, false, true}},
          {Shape{2, 3, 17}, {{4}, {3}, {2}, {2}, true, false}},
          {Shape{2, 3, 9, 11}, {{3, 2}, {2, 1}, {1, 0}, {1, 1}, false, false}},
          {Shape{1, 2, 10, 9}, {{3, 3}, {2, 2}, {1, 1}, {2, 1}, true, true}},
          {Shape{2, 2, 5, 6, 7}, {{2, 3, 2}, {2, 2, 1}, {1, 1, 0}, {1, 1, 2}, true, false}},
          {Shape{1, 1, 4, 4},
           {{3, 3}, {1, 1}, {1, 1}, {3, 3}, false, true}},  // windows in the padding
      };
      for (size_t c = 0; c < cases.size(); ++c) {
        auto& k = cases[c];
        std::string nm = "case " + std::to_string(c);
        PoolOptions avg = k.o;
        avg.dilation.assign(avg.dilation.size(), 1);
        Primitive x = rnd(k.shape, SD, seed++, -3, 3);
        Primitive xv = detail::flip(x, {(std::int64_t)k.shape.rank() - 1});
        for (int cip = 0; cip < 2; ++cip) {
          avg.count_include_pad = cip;
          // avg_pool
          {
            SpatialParams p{};
            auto out = pool_window(p, xv->shape(), avg);
            auto r = cpu::make_tensor(SD, with_spatial(xv->shape(), out));
            strides5(as_cpu(xv), p.xs);
            p.x = ptr(xv);
            p.out_ptr = ptr(r);
            p.n = r->shape().num_elements();
            run("avg_pool" + SUF, "kiln_spatial", p);
            compare(r, cpub().avg_pool(xv, avg), TOL, nm + " avg_pool");
          }
          // avg_pool_backward
          {
            Shape os = cpub().avg_pool(x, avg)->shape();
            Primitive g = detail::flip(rnd(os, SD, seed++, -1, 1), {0});
            SpatialParams p{};
            pool_window(p, x->shape(), avg);
            set3(p.out, spatial3(g->shape()));
            auto r = cpu::make_tensor(SD, x->shape());
            strides5(as_cpu(g), p.gs);
            p.g = ptr(g);
            p.out_ptr = ptr(r);
            p.n = r->shape().num_elements();
            run("avg_pool_backward" + SUF, "kiln_spatial", p);
            compare(r, cpub().avg_pool_backward(x, g, avg), TOL, nm + " avg_pool_backward");
          }
        }
        // max pool
        {
          SpatialParams p{};
          auto out = pool_window(p, xv->shape(), k.o);
          Shape os = with_spatial(xv->shape(), out);
          auto r = cpu::make_tensor(SD, os);
          auto ix = cpu::make_tensor(DType::I64, os);
          strides5(as_cpu(xv), p.xs);
          p.x = ptr(xv);
          p.out_ptr = ptr(r);
          p.idx = ptr(ix);
          p.n = os.num_elements();
          run("max_pool_with_indices" + SUF, "kiln_spatial", p);
          auto want = cpub().max_pool_with_indices(xv, k.o, DType::I64);
          compare(r, want.first, 0, nm + " max_pool values");
          compare(ix, want.second, 0, nm + " max_pool indices");
          Primitive g = rnd(os, SD, seed++, -1, 1);
          SpatialParams q{};
          set3(q.in, spatial3(x->shape()));
          set3(q.out, spatial3(g->shape()));
          q.channels = x->shape()[1];
          strides5(as_cpu(g), q.gs);
          strides5(as_cpu(want.second), q.is);
          auto sum = cpu::make_tensor(CD, x->shape());
          std::fill_n(sum->data_as<CT>(), x->shape().num_elements(), 0.0);
          q.g = ptr(g);
          q.idx = ptr(want.second);
          q.out_ptr = ptr(sum);
          q.n = g->shape().num_elements();
          q.error_word = (u_int64_t)&err_word;
          q.error_token = 7;
          run("max_pool_with_indices_backward" + SUF, "kiln_spatial", q);
          compare(cpub().cast(sum, SD),
                  cpub().max_pool_with_indices_backward(x, g, want.second, k.o), TOL,
                  nm + " max_pool backward");
          if (err_word) {
            printf("FAIL err set\n");
            ++failures;
          }
        }
      }
      // adaptive
      std::vector<std::pair<Shape, std::vector<std::int64_t>>> ac = {
          {Shape{2, 3, 13}, {5}},
          {Shape{2, 3, 4}, {7}},
          {Shape{2, 2, 7, 9}, {3, 4}},
          {Shape{1, 3, 5, 6}, {8, 6}},
          {Shape{1, 2, 4, 5, 6}, {3, 2, 4}},
          {Shape{1, 1, 10}, {1}},
          {Shape{1, 1, 3}, {10}}};
      for (size_t c = 0; c < ac.size(); ++c) {
        auto& [shape, osz] = ac[c];
        std::string nm = "adaptive " + std::to_string(c);
        Primitive x = rnd(shape, SD, seed++, -3, 3);
        Primitive xv = detail::flip(x, {1});
        {
          SpatialParams p{};
          const auto out = align3(osz, 1);
          set3(p.in, spatial3(xv->shape()));
          set3(p.out, out);
          p.channels = shape[1];
          auto r = cpu::make_tensor(SD, with_spatial(shape, out));
          strides5(as_cpu(xv), p.xs);
          p.x = ptr(xv);
          p.out_ptr = ptr(r);
          p.n = r->shape().num_elements();
          run("adaptive_avg_pool" + SUF, "kiln_spatial", p);
          compare(r, cpub().adaptive_avg_pool(xv, osz), TOL, nm);
        }
        {
          Shape os = cpub().adaptive_avg_pool(x, osz)->shape();
          Primitive g = detail::flip(rnd(os, SD, seed++, -1, 1), {1});
          SpatialParams p{};
          set3(p.in, spatial3(x->shape()));
          set3(p.out, spatial3(g->shape()));
          p.channels = shape[1];
          auto r = cpu::make_tensor(SD, shape);
          strides5(as_cpu(g), p.gs);
          p.g = ptr(g);
          p.out_ptr = ptr(r);
          p.n = r->shape().num_elements();
          run("adaptive_avg_pool_backward" + SUF, "kiln_spatial", p);
          compare(r, cpub().adaptive_avg_pool_backward(x, g), TOL, nm + " backward");
        }
      }
      // interpolate
      std::vector<std::pair<Shape, std::vector<std::int64_t>>> ic = {{Shape{2, 3, 5, 7}, {11, 4}},
                                                                     {Shape{1, 2, 8, 6}, {3, 13}},
                                                                     {Shape{1, 1, 1, 4}, {3, 1}},
                                                                     {Shape{1, 1, 6, 6}, {6, 6}},
                                                                     {Shape{1, 1, 3, 5}, {7, 10}}};
      int mi = 0;
      for (auto mode :
           {InterpolateMode::Nearest, InterpolateMode::Bilinear, InterpolateMode::Bicubic}) {
        for (bool align : {false, true}) {
          InterpolateOptions o{mode, align};
          for (size_t c = 0; c < ic.size(); ++c) {
            auto& [shape, size] = ic[c];
            std::string nm =
                "interp m" + std::to_string(mi) + (align ? "a" : "") + " " + std::to_string(c);
            Primitive x = rnd(shape, SD, seed++, -3, 3);
            Primitive xv = detail::flip(x, {2});
            {
              SpatialParams p{};
              set3(p.in, {1, shape[2], shape[3]});
              set3(p.out, {1, size[0], size[1]});
              p.channels = shape[1];
              p.align_corners = align;
              auto r = cpu::make_tensor(SD, Shape{shape[0], shape[1], size[0], size[1]});
              strides5(as_cpu(xv), p.xs);
              p.x = ptr(xv);
              p.out_ptr = ptr(r);
              p.n = r->shape().num_elements();
              run("interpolate" + std::to_string(mi) + SUF, "kiln_spatial", p);
              compare(r, cpub().interpolate(xv, size, o), TOL, nm);
            }
            {
              Primitive g = detail::flip(
                  rnd(Shape{shape[0], shape[1], size[0], size[1]}, SD, seed++, -1, 1), {3});
              SpatialParams p{};
              set3(p.in, {1, shape[2], shape[3]});
              set3(p.out, {1, size[0], size[1]});
              p.channels = shape[1];
              p.align_corners = align;
              auto r = cpu::make_tensor(CD, shape);
              std::fill_n(r->data_as<CT>(), shape.num_elements(), 0.0);
              strides5(as_cpu(g), p.gs);
              p.g = ptr(g);
              p.out_ptr = ptr(r);
              p.n = g->shape().num_elements();
              run("interpolate_backward" + std::to_string(mi) + SUF, "kiln_spatial", p);
              compare(cpub().cast(r, SD), cpub().interpolate_backward(x, g, size, o), TOL,
                      nm + " backward");
            }
          }
        }
        ++mi;
      }
    };
    if (SD == DType::F64)
      body.template operator()<double>();
    else
      body.template operator()<float>();
  }
  // scatter: mirror CudaBackend::scatter with a given strategy
  auto scatter = [&](std::string kname, bool lines, std::int64_t dim, Primitive x, Primitive idx,
                     Primitive val, IndexingUpdate u) {
    auto out = cpu::copy(as_cpu(x));
    const Shape& shape = idx->shape();
    const size_t d = dim;
    ScatterParams p{};
    p.line = shape[d];
    p.dim_size = out->shape()[d];
    p.out_step = out->strides()[d];
    p.index_step = as_cpu(idx).strides()[d];
    p.value_step = as_cpu(val).strides()[d];
    p.rank = shape.rank();
    p.dim = dim;
    for (size_t k = 0; k < shape.rank(); ++k) {
      p.sizes[k] = shape[k];
      p.out_strides[k] = k == d ? 0 : out->strides()[k];
      p.index_strides[k] = as_cpu(idx).strides()[k];
      p.value_strides[k] = as_cpu(val).strides()[k];
    }
    p.out = ptr(out);
    p.index = ptr(idx);
    p.values = ptr(val);
    p.error_word = (u_int64_t)&err_word;
    p.error_token = 9;
    const std::int64_t n = shape.num_elements();
    std::vector<std::uint64_t> winner(out->shape().num_elements(), 0);
    if (lines) {
      p.n = n / p.line;
      run(kname, "kiln_scatter_lines", p);
    } else if (u != IndexingUpdate::Assign) {
      p.n = n;
      run(kname, "kiln_scatter_atomic", p);
    } else {
      p.n = n;
      p.winner = (u_int64_t)winner.data();
      run(kname, "kiln_scatter_claim", p);
      run(kname, "kiln_scatter_assign", p);
    }
    return Primitive(out);
  };
  for (DType dt :
       {DType::F64, DType::I8, DType::I16, DType::I32, DType::U64, DType::BF16, DType::Bool}) {
    for (int um = 0; um < 5; ++um) {
      IndexingUpdate u = IndexingUpdate(um);
      DType kd = dt;
      if (u == IndexingUpdate::Assign) {
        if (dt == DType::I16 || dt == DType::BF16)
          kd = DType::U16;
        else if (dt == DType::I8 || dt == DType::Bool)
          kd = DType::U8;
        else
          kd = DType::U64;
        if (dt == DType::I32) continue;
      }
      std::string kname =
          std::string("scatter_") + dtype_name(kd).data() + "_" + std::to_string(um);
      auto vals = [&](const Shape& s) {
        if (dt == DType::Bool) return rnd(s, dt, seed++, 0, 1, true);
        if (is_float(dt)) return rnd(s, dt, seed++, 0.5, 1.5);
        return rnd(s, dt, seed++, is_unsigned_int(dt) ? 0 : -100, 100, true);
      };
      Primitive x = vals({6, 7, 5});
      Primitive xv = detail::permute(x, {0, 2, 1});
      Primitive idx = detail::flip(rnd({6, 9, 7}, DType::I64, seed++, 0, 4, true), {2});
      Primitive v = detail::slice(vals({6, 18, 7}), {Slice::all(), Slice(0, std::nullopt, 2)});
      Primitive want = cpub().scatter(1, xv, idx, v, u);
      const double tol = is_float(dt) ? 1e-2 : 0;
      for (bool lines : {true, false})
        compare(scatter(kname, lines, 1, xv, idx, v, u), want, lines ? 0 : tol,
                kname + (lines ? " lines" : " atomic"));
      Primitive x1 = vals({40});
      Primitive i1 = rnd({2000}, DType::I64, seed++, 0, 39, true);
      Primitive v1 = vals({2000});
      Primitive w1 = cpub().scatter(0, x1, i1, v1, u);
      for (bool lines : {true, false})
        compare(scatter(kname, lines, 0, x1, i1, v1, u), w1, lines ? 0 : (is_float(dt) ? 0.1 : 0),
                kname + " 1d" + (lines ? " lines" : " atomic"));
    }
  }
  printf("%d checks, %d failures, err_word %u\n", checks, failures, err_word);
  return failures != 0;
}
