// Source generation of softmax and log_softmax (softmax.h), one module per entry point.
#include <fmt/format.h>

#include <string>

#include "backends/cuda/fused_kernel.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/softmax.h"

namespace kiln::cuda {

using namespace fmt::literals;

namespace {

// The launch parameters (SoftmaxParams in softmax.h mirrors them; a softmax over a fused chain
// has the chain's FT after them).
constexpr const char* kParamMembers = R"CUDA(
  i64 rows, length, in_step, out_step, chunks, chunk_length;
  int rank, pad;
  i64 sizes[12]; i64 in_strides[12]; i64 out_strides[12];
  u64 in, out, partials, totals;
)CUDA";

std::string params_struct(bool fused) {
  return fmt::format("\nstruct P {{{}{}}};\n", kParamMembers, fused ? "  FT t;\n" : "");
}

// Row addressing, the output formula, the running (max, sum) and the warp / block
// combinations. Maxima never hold NaN (they start at -inf and only take x > max), so a NaN
// reaches the output only through the sum, as on the CPU.
constexpr const char* kCommon = R"CUDA(
template <int N> struct alignas(N * sizeof(S)) Pack { S s[N]; };
struct Stat { double max, sum; };
__device__ __forceinline__ void row_bases(const P& p, i64 row, i64& in, i64& out) {
  in = 0; out = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    const i64 q = row / p.sizes[d], i = row - q * p.sizes[d];
    in += i * p.in_strides[d]; out += i * p.out_strides[d]; row = q;
  }
}
// The CPU's rounding: 1 / sum (softmax) or log(sum) (log_softmax) taken in double, then C.
__device__ __forceinline__ C scale_of(double sum) { return kLog ? (C)log(sum) : (C)(1.0 / sum); }
// From the shifted value t = x - max (log_softmax) or its exponential (softmax).
__device__ __forceinline__ S finish(C v, C scale) { return st(kLog ? v - scale : v * scale); }
__device__ __forceinline__ C warp_max(C v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) { const C o = __shfl_xor_sync(0xffffffffu, v, d); v = o > v ? o : v; }
  return v;
}
// Butterflies: every lane ends with the same bits (a + b == b + a).
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}
__shared__ C block_maxima[32];
__shared__ double block_sums[32];
template <int GROUP> __device__ __forceinline__ C group_max(C v) {
  v = warp_max(v);
  if constexpr (GROUP > 32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) block_maxima[warp] = v;
    __syncthreads();
    v = warp_max(lane < GROUP / 32 ? block_maxima[lane] : kNegInf);
    __syncthreads();
  }
  return v;
}
template <int GROUP> __device__ __forceinline__ double group_sum(double v) {
  v = warp_sum(v);
  if constexpr (GROUP > 32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) block_sums[warp] = v;
    __syncthreads();
    v = warp_sum(lane < GROUP / 32 ? block_sums[lane] : 0.0);
    __syncthreads();
  }
  return v;
}
// x into a running (max, sum of exp(x - max)); -inf adds nothing even while the max is -inf.
__device__ __forceinline__ void absorb(C& m, double& s, C x) {
  if (x > m) { s *= exp((double)m - (double)x); m = x; }
  if (x != kNegInf) s += (double)k_exp(x - m);
}
__device__ __forceinline__ void merge_stats(double& m, double& s, double m2, double s2) {
  const double top = m2 > m ? m2 : m;
  if (top == (double)kNegInf) { s += s2; return; }
  s = s * exp(m - top) + s2 * exp(m2 - top);
  m = top;
}
// Every thread of the block ends with the block's (max, sum).
__shared__ Stat block_stats[32];
__device__ __forceinline__ void block_merge(double& m, double& s) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    const double m2 = __shfl_xor_sync(0xffffffffu, m, d), s2 = __shfl_xor_sync(0xffffffffu, s, d);
    merge_stats(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) block_stats[warp] = Stat{m, s};
  __syncthreads();
  m = (double)kNegInf; s = 0;
  if (lane < (int)(blockDim.x >> 5)) { m = block_stats[lane].max; s = block_stats[lane].sum; }
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    const double m2 = __shfl_xor_sync(0xffffffffu, m, d), s2 = __shfl_xor_sync(0xffffffffu, s, d);
    merge_stats(m, s, m2, s2);
  }
  __syncthreads();
}
__device__ __forceinline__ Stat* stat_slot(const P& p, i64 row, i64 chunk) {
  return p.chunks == 1 ? (Stat*)p.totals + row : (Stat*)p.partials + chunk * p.rows + row;
}
)CUDA";

// A thread per line of at most KEPT elements, any steps: read once into registers.
constexpr const char* kLines = R"CUDA(
__device__ __forceinline__ void softmax_lines(const P& p) {
  for (i64 row = blockIdx.x * (i64)blockDim.x + threadIdx.x; row < p.rows; row += (i64)gridDim.x * blockDim.x) {
    i64 ib, ob;
    row_bases(p, row, ib, ob);
    const Line line = line_at(p, ib);
    S* out = (S*)p.out + ob;
    C v[KEPT];
    C m = kNegInf;
#pragma unroll
    for (int k = 0; k < KEPT; ++k) {
      if (k < p.length) { v[k] = ld(element_stepped(p, line, k)); if (v[k] > m) m = v[k]; }
    }
    double s = 0;
#pragma unroll
    for (int k = 0; k < KEPT; ++k) {
      if (k < p.length) { const C t = v[k] - m, e = k_exp(t); s += (double)e; v[k] = kLog ? t : e; }
    }
    const C scale = scale_of(s);
#pragma unroll
    for (int k = 0; k < KEPT; ++k) {
      if (k < p.length) { *out = finish(v[k], scale); out += p.out_step; }
    }
  }
}
)CUDA";

// A GROUP (warp, block of 256 or of 1024) per row of at most GROUP * KEPT elements, each thread
// keeping KEPT of them: slot k of lane l holds elements (k * GROUP + l) * VEC + [0, VEC).
// Slots past the row's end are skipped by the whole group at once.
constexpr const char* kRows = R"CUDA(
template <int GROUP, int VEC> __device__ __forceinline__ void softmax_rows(const P& p) {
  constexpr int SLOTS = KEPT / VEC;
  typedef Pack<VEC> V;
  const int lane = (int)(threadIdx.x % GROUP);
  const i64 per_block = blockDim.x / GROUP;
  const i64 n = p.length;
  for (i64 row = blockIdx.x * per_block + threadIdx.x / GROUP; row < p.rows; row += (i64)gridDim.x * per_block) {
    i64 ib, ob;
    row_bases(p, row, ib, ob);
    const Line line = line_at(p, ib);
    S* out = (S*)p.out + ob;
    C v[KEPT];
    C m = kNegInf;
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {
      const i64 at = ((i64)k * GROUP + lane) * VEC;
      if (at + VEC <= n) {
        const V x = elements<VEC>(p, line, at);
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[k * VEC + e] = ld(x.s[e]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[k * VEC + e] = at + e < n ? ld(element(p, line, at + e)) : kNegInf;
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) m = v[k * VEC + e] > m ? v[k * VEC + e] : m;
    }
    m = group_max<GROUP>(m);
    double s = 0;
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {
      if ((i64)k * GROUP * VEC < n) {
        const i64 at = ((i64)k * GROUP + lane) * VEC;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const C t = v[k * VEC + e] - m, x = k_exp(t);
          if (at + e < n) s += (double)x;
          v[k * VEC + e] = kLog ? t : x;
        }
      }
    }
    s = group_sum<GROUP>(s);
    const C scale = scale_of(s);
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {
      const i64 at = ((i64)k * GROUP + lane) * VEC;
      if (at + VEC <= n) {
        V y;
#pragma unroll
        for (int e = 0; e < VEC; ++e) y.s[e] = finish(v[k * VEC + e], scale);
        *(V*)(out + at) = y;
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          if (at + e < n) out[at + e] = finish(v[k * VEC + e], scale);
        }
      }
    }
  }
}
)CUDA";

// Long rows, a block of 256 per (row, chunk): the chunk's (max, sum), then (after Combine when
// there are several chunks) its outputs. VEC-wide accesses start at the chunk's first element
// (aligned when VEC > 1: rows and chunk lengths are multiples of 16 bytes); the rest one by one.
constexpr const char* kRowChunks = R"CUDA(
template <int VEC> __device__ __forceinline__ void softmax_row_stats(const P& p) {
  typedef Pack<VEC> V;
  for (i64 item = blockIdx.x; item < p.rows * p.chunks; item += gridDim.x) {
    const i64 row = item / p.chunks, chunk = item - row * p.chunks;
    i64 ib, ob;
    row_bases(p, row, ib, ob);
    const i64 first = chunk * p.chunk_length, last = min(p.length, first + p.chunk_length);
    const Line line = line_at(p, ib);
    const i64 vectors = (last - first) / VEC;
    C m = kNegInf;
    double s = 0;
    i64 k = threadIdx.x;
    for (; k + 3 * 256 < vectors; k += 4 * 256) {
      V x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) x[u] = elements<VEC>(p, line, first + (k + u * 256) * VEC);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) absorb(m, s, ld(x[u].s[e]));
      }
    }
    for (; k < vectors; k += 256) {
      const V x = elements<VEC>(p, line, first + k * VEC);
#pragma unroll
      for (int e = 0; e < VEC; ++e) absorb(m, s, ld(x.s[e]));
    }
    const i64 tail = vectors * VEC + threadIdx.x;
    if (tail < last - first) absorb(m, s, ld(element(p, line, first + tail)));
    double dm = (double)m;
    block_merge(dm, s);
    if (threadIdx.x == 0) *stat_slot(p, row, chunk) = Stat{dm, s};
  }
}
template <int VEC> __device__ __forceinline__ void softmax_row_write(const P& p) {
  typedef Pack<VEC> V;
  for (i64 item = blockIdx.x; item < p.rows * p.chunks; item += gridDim.x) {
    const i64 row = item / p.chunks, chunk = item - row * p.chunks;
    i64 ib, ob;
    row_bases(p, row, ib, ob);
    const i64 first = chunk * p.chunk_length, last = min(p.length, first + p.chunk_length);
    const Line line = line_at(p, ib);
    S* out = (S*)p.out + ob + first;
    const Stat total = ((const Stat*)p.totals)[row];
    const C m = (C)total.max, scale = scale_of(total.sum);
    const i64 vectors = (last - first) / VEC;
    for (i64 k = threadIdx.x; k < vectors; k += 256) {
      const V x = elements<VEC>(p, line, first + k * VEC, false);
      V y;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const C t = ld(x.s[e]) - m;
        y.s[e] = finish(kLog ? t : k_exp(t), scale);
      }
      ((V*)out)[k] = y;
    }
    const i64 tail = vectors * VEC + threadIdx.x;
    if (tail < last - first) {
      const C t = ld(element(p, line, first + tail, false)) - m;
      out[tail] = finish(kLog ? t : k_exp(t), scale);
    }
  }
}
)CUDA";

// Long strided lines, a thread per (line, chunk), item = chunk * rows + row so neighbouring
// threads take neighbouring lines; four loads in flight per thread.
constexpr const char* kLineChunks = R"CUDA(
__device__ __forceinline__ void softmax_line_stats(const P& p) {
  for (i64 item = blockIdx.x * (i64)blockDim.x + threadIdx.x; item < p.rows * p.chunks; item += (i64)gridDim.x * blockDim.x) {
    const i64 chunk = item / p.rows, row = item - chunk * p.rows;
    i64 ib, ob;
    row_bases(p, row, ib, ob);
    const Line line = line_at(p, ib);
    const i64 first = chunk * p.chunk_length, last = min(p.length, first + p.chunk_length);
    C m = kNegInf;
    double s = 0;
    i64 j = first;
    for (; j + 3 < last; j += 4) {
      C x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) x[u] = ld(element_stepped(p, line, j + u));
#pragma unroll
      for (int u = 0; u < 4; ++u) absorb(m, s, x[u]);
    }
    for (; j < last; ++j) absorb(m, s, ld(element_stepped(p, line, j)));
    *stat_slot(p, row, chunk) = Stat{(double)m, s};
  }
}
__device__ __forceinline__ void softmax_line_write(const P& p) {
  for (i64 item = blockIdx.x * (i64)blockDim.x + threadIdx.x; item < p.rows * p.chunks; item += (i64)gridDim.x * blockDim.x) {
    const i64 chunk = item / p.rows, row = item - chunk * p.rows;
    i64 ib, ob;
    row_bases(p, row, ib, ob);
    const Line line = line_at(p, ib);
    S* out = (S*)p.out + ob;
    const Stat total = ((const Stat*)p.totals)[row];
    const C m = (C)total.max, scale = scale_of(total.sum);
    const i64 first = chunk * p.chunk_length, last = min(p.length, first + p.chunk_length);
    i64 j = first;
    for (; j + 3 < last; j += 4) {
      C x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) x[u] = ld(element_stepped(p, line, j + u, false));
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const C t = x[u] - m;
        out[(j + u) * p.out_step] = finish(kLog ? t : k_exp(t), scale);
      }
    }
    for (; j < last; ++j) {
      const C t = ld(element_stepped(p, line, j, false)) - m;
      out[j * p.out_step] = finish(kLog ? t : k_exp(t), scale);
    }
  }
}
)CUDA";

// A block of 256 per row: its chunks' (max, sum) merged in a fixed order into totals.
constexpr const char* kCombine = R"CUDA(
__device__ __forceinline__ void softmax_combine(const P& p) {
  const Stat* partials = (const Stat*)p.partials;
  for (i64 row = blockIdx.x; row < p.rows; row += gridDim.x) {
    double m = (double)kNegInf, s = 0;
    for (i64 c = threadIdx.x; c < p.chunks; c += blockDim.x) {
      const Stat t = partials[c * p.rows + row];
      merge_stats(m, s, t.max, t.sum);
    }
    block_merge(m, s);
    if (threadIdx.x == 0) ((Stat*)p.totals)[row] = Stat{m, s};
  }
}
)CUDA";

// How the kernels read x by lines (rows) along the dim: element j of a line of stride 1 (rows;
// j..j+N-1 from an aligned j) or of stride in_step. The write passes of long rows and lines read
// their elements a second time (first = false).
constexpr const char* kLoads = R"CUDA(
struct Line { const S* at; };
__device__ __forceinline__ Line line_at(const P& p, i64 base) { return Line{(const S*)p.in + base}; }
__device__ __forceinline__ S element(const P&, const Line& l, i64 j, bool = true) { return l.at[j]; }
template <int N> __device__ __forceinline__ Pack<N> elements(const P&, const Line& l, i64 j, bool = true) { return *(const Pack<N>*)(l.at + j); }
__device__ __forceinline__ S element_stepped(const P& p, const Line& l, i64 j, bool = true) { return l.at[j * p.in_step]; }
)CUDA";

// From a fused chain instead (fused_kernel.h): bases are flat indices in the iteration shape (x
// is the contiguous tensor the unfused chain would have written). A second read recomputes the
// element without storing the chain's outputs again.
constexpr const char* kFusedLoads = R"CUDA(
__device__ __forceinline__ Line line_at(const P& p, i64 base) { return chain_line(p.t, base); }
__device__ __forceinline__ S element(const P& p, const Line& l, i64 j, bool first = true) { return chain_at(p.t, l, j, 1, first); }
template <int N> __device__ __forceinline__ Pack<N> elements(const P& p, const Line& l, i64 j, bool first = true) {
  Pack<N> x;
#pragma unroll
  for (int e = 0; e < N; ++e) x.s[e] = chain_at(p.t, l, j + e, 1, first);
  return x;
}
__device__ __forceinline__ S element_stepped(const P& p, const Line& l, i64 j, bool first = true) { return chain_at(p.t, l, j, p.in_step, first); }
)CUDA";

// The kernel's body text, its launch bounds and the call its entry point makes (`{}` in the
// call: the elements of a 16-byte access).
struct Entry {
  const char* body;
  const char* bounds;
  fmt::format_string<int> call;
};
Entry entry_of(SoftmaxKernel k) {
  switch (k) {
    case SoftmaxKernel::Lines:
      return {kLines, "256, 4", "softmax_lines(p)"};
    case SoftmaxKernel::RowsWarp:
      return {kRows, "256, 4", "softmax_rows<32, 1>(p)"};
    case SoftmaxKernel::RowsWarpVector:
      return {kRows, "256, 4", "softmax_rows<32, {}>(p)"};
    case SoftmaxKernel::RowsBlock:
      return {kRows, "256, 4", "softmax_rows<256, 1>(p)"};
    case SoftmaxKernel::RowsBlockVector:
      return {kRows, "256, 4", "softmax_rows<256, {}>(p)"};
    case SoftmaxKernel::RowsWide:
      return {kRows, "1024, 1", "softmax_rows<1024, 1>(p)"};
    case SoftmaxKernel::RowsWideVector:
      return {kRows, "1024, 1", "softmax_rows<1024, {}>(p)"};
    case SoftmaxKernel::RowStats:
      return {kRowChunks, "256, 4", "softmax_row_stats<1>(p)"};
    case SoftmaxKernel::RowStatsVector:
      return {kRowChunks, "256, 4", "softmax_row_stats<{}>(p)"};
    case SoftmaxKernel::RowWrite:
      return {kRowChunks, "256, 4", "softmax_row_write<1>(p)"};
    case SoftmaxKernel::RowWriteVector:
      return {kRowChunks, "256, 4", "softmax_row_write<{}>(p)"};
    case SoftmaxKernel::LineStats:
      return {kLineChunks, "256, 4", "softmax_line_stats(p)"};
    case SoftmaxKernel::LineWrite:
      return {kLineChunks, "256, 4", "softmax_line_write(p)"};
    case SoftmaxKernel::Combine:
      return {kCombine, "256, 4", "softmax_combine(p)"};
  }
  return {"", "", ""};
}

}  // namespace

std::string softmax_kernel_source(SoftmaxKernel kernel, DType dtype, bool log,
                                  const FusedLoad* fused) {
  const Entry entry = entry_of(kernel);
  const int vector = static_cast<int>(16 / dtype_size(dtype));
  return fmt::format(
      R"CUDA({prelude}{fused_value}{params}typedef {S} S;
typedef {C} C;
constexpr bool kLog = {log};
constexpr int KEPT = {kept};
#define kNegInf {negative_infinity}
__device__ __forceinline__ C ld(S v) {{ return {load}; }}
__device__ __forceinline__ S st(C v) {{ return {store}; }}
{common}{loads}{body}extern "C" __global__ void __launch_bounds__({bounds}) {name}(const P p) {{ k_grid_dependency(); {call}; }}
)CUDA",
      "prelude"_a = kernel_prelude(),
      "fused_value"_a = fused != nullptr ? fused_load_source(*fused) : std::string(),
      "params"_a = params_struct(fused != nullptr), "S"_a = storage_type(dtype),
      "C"_a = compute_type(dtype), "log"_a = log, "kept"_a = softmax_kept_per_thread(dtype),
      "negative_infinity"_a = dtype == DType::F64 ? "__longlong_as_double(0xfff0000000000000ll)"
                                                  : "__int_as_float((int)0xff800000u)",
      "load"_a = load_expression(dtype, "v"), "store"_a = store_expression(dtype, "v"),
      "common"_a = kCommon, "loads"_a = fused != nullptr ? kFusedLoads : kLoads,
      "body"_a = entry.body, "bounds"_a = entry.bounds, "name"_a = softmax_kernel_name(kernel),
      "call"_a = fmt::vformat(entry.call, fmt::make_format_args(vector)));
}

}  // namespace kiln::cuda
