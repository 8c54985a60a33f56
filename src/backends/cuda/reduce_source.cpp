// Source generation of the reduction family (no driver calls; see elementwise_source.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>

#include "backends/cuda/fused_kernel.h"
#include "backends/cuda/kernel_source.h"
#include "backends/cuda/reduce.h"

namespace kiln::cuda {

using namespace fmt::literals;

namespace {

// The launch parameters (ReduceParams in reduce.h mirrors them; a reduction over a fused chain
// has the chain's FT after them).
constexpr const char* kParamMembers = R"CUDA(
  i64 outputs, length, reduce_stride, chunks, chunk_length;
  int rank, lanes;
  i64 sizes[12]; i64 strides[12];
  u64 in, out, scratch;
  double divisor;
)CUDA";

std::string params_struct(bool fused, bool epilogue) {
  return fmt::format("\nstruct P {{{}{}{}}};\n", kParamMembers, fused ? "  FT t;\n" : "",
                     epilogue ? "  FP e;\n" : "");
}

// emit(): a result written (write(), the reducer's), then, with an epilogue, the epilogue's ops on
// it (fused_epilogue, fused_kernel.h), read back from where write() put it: the same thread's
// store, and every reducer's write() stays as it is.
std::string emit_function(DType out_dtype, bool epilogue) {
  if (!epilogue) {
    return "__device__ __forceinline__ void emit(const P& p, i64 o, const Acc& a) { write(p, o, "
           "a); "
           "}\n";
  }
  return fmt::format(
      "__device__ __forceinline__ void emit(const P& p, i64 o, const Acc& a) {{ write(p, o, a); "
      "fused_epilogue(p.e, o, ((const {}*)p.out)[o]); }}\n",
      storage_type(out_dtype));
}

// The accumulators of the built-in reducers over dtype, written to out_dtype.
const char* nan_of(DType dtype) {
  return dtype == DType::F64 ? "__longlong_as_double(0x7ff8000000000000ll)"
                             : "__int_as_float(0x7fc00000)";
}
const char* infinity_of(DType dtype) {
  return dtype == DType::F64 ? "__longlong_as_double(0x7ff0000000000000ll)"
                             : "__int_as_float(0x7f800000)";
}
// write(): output o is `stored`, an expression of out_dtype's storage type.
std::string write_function(DType out_dtype, const std::string& stored) {
  return fmt::format(
      "__device__ __forceinline__ void write(const P& p, i64 o, const Acc& a) {{ "
      "(({}*)p.out)[o] = {}; }}\n",
      storage_type(out_dtype), stored);
}

// Sums and products in double (floats) or wrapping 64-bit arithmetic (integers).
std::string sum_like(DType dtype, DType out_dtype, bool prod, bool mean) {
  const char* C = compute_type(dtype);
  const bool fl = is_float(dtype);
  const std::string value =
      fl ? fmt::format("({})(a.v{})", C, mean ? " / p.divisor" : "") : fmt::format("({})a.v", C);
  return fmt::format(
      R"CUDA(struct Acc {{ {acc} v; }};
__device__ __forceinline__ Acc init() {{ return Acc{{({acc}){identity}}}; }}
__device__ __forceinline__ void step(Acc& a, {C} x, i64) {{ a.v {op}= {widen}; }}
__device__ __forceinline__ void combine(Acc& a, const Acc& b) {{ a.v {op}= b.v; }}
{write})CUDA",
      "acc"_a = fl ? "double" : "u64", "identity"_a = prod ? "1" : "0", "C"_a = C,
      "op"_a = prod ? "*" : "+",
      "widen"_a = fl ? "(double)x" : (is_signed_int(dtype) ? "(u64)(i64)x" : "(u64)x"),
      "write"_a = write_function(out_dtype, store_expression(out_dtype, value)));
}

std::string extremum(DType dtype, DType out_dtype, bool mx) {
  const char* C = compute_type(dtype);
  const bool fl = is_float(dtype);
  std::string start;
  if (fl) {
    start = fmt::format("{}{}", mx ? "-" : "", infinity_of(dtype));
  } else {
    // Lowest / highest of the integer type from its bit pattern.
    const int bits = static_cast<int>(dtype_size(dtype) * 8);
    unsigned long long low = 0, high = 0;
    if (is_signed_int(dtype)) {
      high = (bits == 64) ? 0x7fffffffffffffffull : ((1ull << (bits - 1)) - 1);
      low = (bits == 64) ? 0x8000000000000000ull : (1ull << (bits - 1));
    } else {
      high = (bits == 64) ? ~0ull : ((1ull << bits) - 1);
    }
    start = fmt::format("({})0x{:x}ull", C, mx ? low : high);
  }
  const std::string value = fl ? fmt::format("(a.nan ? ({}){} : a.v)", C, nan_of(dtype)) : "a.v";
  return fmt::format(R"CUDA(struct Acc {{ {C} v; bool nan; }};
__device__ __forceinline__ Acc init() {{ return Acc{{{start}, false}}; }}
__device__ __forceinline__ void step(Acc& a, {C} x, i64) {{ if ({pick}) a.v = x;{note_nan} }}
__device__ __forceinline__ void combine(Acc& a, const Acc& b) {{ const {C} x = b.v; if ({pick}) a.v = x; a.nan |= b.nan; }}
{write})CUDA",
                     "C"_a = C, "start"_a = start, "pick"_a = mx ? "x > a.v" : "x < a.v",
                     "note_nan"_a = fl ? " a.nan |= (x != x);" : "",
                     "write"_a = write_function(out_dtype, store_expression(out_dtype, value)));
}

// better(v, best): the first NaN wins, then strictly larger (smaller); ties keep the earlier
// index, also when partials of interleaved elements are combined.
std::string arg_extremum(DType dtype, DType out_dtype, bool mx) {
  const std::string index = fmt::format("({})(a.idx < 0 ? 0 : a.idx)", storage_type(out_dtype));
  return fmt::format(R"CUDA(struct Acc {{ {C} v; i64 idx; }};
__device__ __forceinline__ bool better({C} v, {C} best) {{ {nan_first}return v {cmp} best; }}
__device__ __forceinline__ Acc init() {{ return Acc{{({C})0, -1}}; }}
__device__ __forceinline__ void step(Acc& a, {C} x, i64 j) {{ if (a.idx < 0 || better(x, a.v)) {{ a.v = x; a.idx = j; }} }}
__device__ __forceinline__ void combine(Acc& a, const Acc& b) {{
  if (b.idx < 0) return;
  if (a.idx < 0 || better(b.v, a.v) || (!better(a.v, b.v) && b.idx < a.idx)) a = b;
}}
{write})CUDA",
                     "C"_a = compute_type(dtype),
                     "nan_first"_a = is_float(dtype) ? "if (v != v) return best == best; " : "",
                     "cmp"_a = mx ? ">" : "<", "write"_a = write_function(out_dtype, index));
}

std::string truth(DType dtype, DType out_dtype, bool any) {
  return fmt::format(R"CUDA(struct Acc {{ bool v; }};
__device__ __forceinline__ Acc init() {{ return Acc{{{identity}}}; }}
__device__ __forceinline__ void step(Acc& a, {C} x, i64) {{ a.v = a.v {op} (x != ({C})0); }}
__device__ __forceinline__ void combine(Acc& a, const Acc& b) {{ a.v = a.v {op} b.v; }}
{write})CUDA",
                     "identity"_a = any ? "false" : "true", "C"_a = compute_type(dtype),
                     "op"_a = any ? "||" : "&&",
                     "write"_a = write_function(out_dtype, "(unsigned char)(a.v ? 1 : 0)"));
}

// logsumexp's accumulator: the running maximum and the sum of exp(x - max) in double, rescaled
// when the maximum grows (the CPU backend's formulas: a NaN gives NaN, a +inf +inf, nothing or
// only -inf gives -inf).
constexpr const char* kLogSumExpMerge = R"CUDA(
#define LSE_INF __longlong_as_double(0x7ff0000000000000ll)
__device__ __forceinline__ void merge(double& a_max, double& a_sum, double max, double sum) {
  if (a_max != a_max || max == -LSE_INF) return;
  if (max != max || max == LSE_INF || a_max == LSE_INF) { a_max = max != max ? max : LSE_INF; }
  else if (max > a_max) { a_sum = a_sum * exp(a_max - max) + sum; a_max = max; }
  else { a_sum += sum * exp(max - a_max); }
}
)CUDA";

// f64 elements: every one merged in double.
constexpr const char* kLogSumExpDouble = R"CUDA(struct Acc { double max, sum; };
__device__ __forceinline__ Acc init() { return Acc{-LSE_INF, 0.0}; }
__device__ __forceinline__ void step(Acc& a, double x, i64) { merge(a.max, a.sum, x, 1.0); }
__device__ __forceinline__ void combine(Acc& a, const Acc& b) { merge(a.max, a.sum, b.max, b.sum); }
__device__ __forceinline__ double total(const Acc& a) { return a.sum; }
)CUDA";

// Float elements (f32, and f16 and bf16 read as float): exp(x - m) against a float maximum m is
// added to a float partial, which the kernels settle into the double sum after each group of at
// most 16 elements a thread reads (KILN_REDUCE_SETTLE), so no float sum runs long. The lines
// kernel hands a thread's group of elements over at once (step_group, KILN_REDUCE_GROUPS): their
// maximum is taken first (max.NaN: a NaN among them shows), a larger finite one rescales what was
// summed by expf(m - max) once and becomes m, and then every element of the group adds
// expf(x - m) with no branch. Per element, a new maximum was a divergent branch: over a line of
// random values some lane of a warp finds one at about 40% of a thread's first 200 elements (the
// k-th element is a new maximum with probability 1/k), so warps ran it nearly every other element
// (the 8192 x 50304 bf16 logits of GPT-2's cross entropy: 1.85 ms on an H100 with a double exp per
// element, 1.54 with expf per element and a double merge on a new maximum, 1.47 on an H200 with
// float partials and that merge). A group holding an infinity or a NaN, or met before any finite
// element, goes element by element through step, whose first element, NaNs and infinities merge
// in double (the CPU's formulas).
constexpr const char* kLogSumExpFloat = R"CUDA(struct Acc { double max, sum; float m, part; };
#define LSE_INF_F __int_as_float(0x7f800000)
__device__ __forceinline__ Acc init() { return Acc{-LSE_INF, 0.0, -LSE_INF_F, 0.0f}; }
__device__ __forceinline__ void settle(Acc& a) { a.sum += (double)a.part; a.part = 0.0f; }
#define KILN_REDUCE_SETTLE(a) settle(a)
__device__ __forceinline__ void step(Acc& a, float x, i64) {
  if (x <= a.m && a.m > -LSE_INF_F) { a.part += expf(x - a.m); return; }
  if (x > a.m && a.m > -LSE_INF_F && x < LSE_INF_F) {
    a.sum = (a.sum + (double)a.part) * (double)expf(a.m - x);
    a.part = 1.0f;
    a.m = x;
    a.max = (double)x;
    return;
  }
  settle(a);
  merge(a.max, a.sum, (double)x, 1.0);
  a.m = (float)a.max;
}
#define KILN_REDUCE_GROUPS 1
__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a != a || b != b ? __int_as_float(0x7fffffff) : fmaxf(a, b);
#endif
}
// U packs of N elements, settled after every 8 elements and at the end.
template <int U, class V> __device__ __forceinline__ void step_group(Acc& a, const V (&x)[U]) {
  constexpr int N = (int)(sizeof(x[0].s) / sizeof(x[0].s[0]));
  float m = ld(x[0].s[0]);
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int e = 0; e < N; ++e) m = max_nan(m, ld(x[u].s[e]));
  }
  if (m > a.m && m < LSE_INF_F) {
    a.sum = (a.sum + (double)a.part) * (double)expf(a.m - m);
    a.part = 0.0f;
    a.m = m;
    a.max = (double)m;
  }
  if (m <= a.m && a.m > -LSE_INF_F) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int e = 0; e < N; ++e) a.part += expf(ld(x[u].s[e]) - a.m);
      if (N > 4 || u % 2 == 1 || u == U - 1) settle(a);
    }
    return;
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int e = 0; e < N; ++e) step(a, ld(x[u].s[e]), 0);
    if (N > 4 || u % 2 == 1 || u == U - 1) settle(a);
  }
}
__device__ __forceinline__ void combine(Acc& a, const Acc& b) {
  settle(a);
  merge(a.max, a.sum, b.max, b.sum + (double)b.part);
  a.m = (float)a.max;
}
__device__ __forceinline__ double total(const Acc& a) { return a.sum + (double)a.part; }
)CUDA";

std::string logsumexp_accumulator(DType dtype, DType out_dtype) {
  const char* C = compute_type(dtype);
  const bool f64 = std::string_view(C) == "double";
  if (!f64 && std::string_view(C) != "float") {
    throw std::logic_error(std::string("logsumexp_accumulator: compute type ") + C);
  }
  return fmt::format(
      R"CUDA({merge}{acc}__device__ __forceinline__ void write(const P& p, i64 o, const Acc& a) {{
  const double r = a.max - a.max == 0.0 ? a.max + log(total(a)) : a.max;
  (({out}*)p.out)[o] = {store};
}}
)CUDA",
      "merge"_a = kLogSumExpMerge, "acc"_a = f64 ? kLogSumExpDouble : kLogSumExpFloat,
      "out"_a = storage_type(out_dtype),
      "store"_a = store_expression(out_dtype, fmt::format("({})r", C)));
}

// Shared by every entry point: the element type, line addressing, and the warp / block
// combination of accumulators (shuffles move an Acc as 32-bit words, whatever its members).
constexpr const char* kCommon = R"CUDA(
#ifndef KILN_REDUCE_SETTLE
#define KILN_REDUCE_SETTLE(a)
#endif
// An accumulator that defines KILN_REDUCE_GROUPS takes the lines kernel's unrolled groups of
// packs whole: step_group(a, packs), settling as it goes.
__device__ __forceinline__ i64 base_of(const P& p, i64 o) {
  i64 base = 0;
  for (int d = p.rank - 1; d >= 0; --d) { const i64 q = o / p.sizes[d]; base += (o - q * p.sizes[d]) * p.strides[d]; o = q; }
  return base;
}
template <int N> struct alignas(N * sizeof(S)) Pack { S s[N]; };
template <class T> __device__ __forceinline__ T shuffle_down(T v, int delta) {
  constexpr int W = (int)((sizeof(T) + 3) / 4);
  union { T v; unsigned w[W]; } u;
  u.v = v;
#pragma unroll
  for (int i = 0; i < W; ++i) u.w[i] = __shfl_down_sync(0xffffffffu, u.w[i], delta);
  return u.v;
}
// Lane 0 ends with the warp's combination.
__device__ __forceinline__ Acc warp_reduce(Acc a) {
#pragma unroll
  for (int delta = 16; delta > 0; delta >>= 1) { const Acc b = shuffle_down(a, delta); combine(a, b); }
  return a;
}
__shared__ Acc warp_partials[32];
// Thread 0 ends with the block's combination; every thread of the block must call it.
__device__ __forceinline__ Acc block_reduce(Acc a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  a = warp_reduce(a);
  if (lane == 0) warp_partials[warp] = a;
  __syncthreads();
  if (warp == 0) a = warp_reduce(lane < (int)(blockDim.x >> 5) ? warp_partials[lane] : init());
  __syncthreads();
  return a;
}
template <int GROUP> __device__ __forceinline__ Acc group_reduce(Acc a) {
  if constexpr (GROUP == 32) return warp_reduce(a); else return block_reduce(a);
}
__device__ __forceinline__ void finish_or_keep(const P& p, i64 o, i64 chunk, const Acc& a) {
  if (p.chunks == 1) emit(p, o, a);
  else ((Acc*)p.scratch)[chunk * p.outputs + o] = a;
}
)CUDA";

// A GROUP (warp or block) per item = (output, chunk) of a contiguous line. Up to the first
// 16-byte boundary one element per thread, then 16-byte vectors (four in flight per thread),
// then the rest; each thread visits its elements in increasing order (argmax/argmin ties).
constexpr const char* kLines = R"CUDA(
template <int GROUP> __device__ __forceinline__ void reduce_lines(const P& p) {
  constexpr int VEC = (int)(16 / sizeof(S));
  typedef Pack<VEC> V;
  const int lane = (int)(threadIdx.x % GROUP);
  const i64 per_block = blockDim.x / GROUP;
  for (i64 item = blockIdx.x * per_block + threadIdx.x / GROUP; item < p.outputs * p.chunks; item += (i64)gridDim.x * per_block) {
    const i64 o = item / p.chunks, chunk = item - o * p.chunks;
    const Line line = line_at(p, base_of(p, o));
    const i64 first = chunk * p.chunk_length;
    const i64 last = min(p.length, first + p.chunk_length);
    Acc a = init();
    const i64 head = min(last - first, (i64)((16 - (address_of(line, first) & 15)) & 15) / (i64)sizeof(S));
    if (lane < head) step(a, ld(element(p, line, first + lane)), first + lane);
    const i64 start = first + head;
    const i64 vectors = (last - start) / VEC;
    i64 k = lane;
    for (; k + 3 * GROUP < vectors; k += 4 * GROUP) {
      V x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) x[u] = elements<VEC>(p, line, start + (k + u * GROUP) * VEC);
#ifdef KILN_REDUCE_GROUPS
      step_group(a, x);
#else
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) step(a, ld(x[u].s[e]), start + (k + u * GROUP) * VEC + e);
        if (VEC > 4 || u % 2 == 1) KILN_REDUCE_SETTLE(a);
      }
#endif
    }
    for (; k < vectors; k += GROUP) {
      const V x[1] = {elements<VEC>(p, line, start + k * VEC)};
#ifdef KILN_REDUCE_GROUPS
      step_group(a, x);
#else
#pragma unroll
      for (int e = 0; e < VEC; ++e) step(a, ld(x[0].s[e]), start + k * VEC + e);
      KILN_REDUCE_SETTLE(a);
#endif
    }
    const i64 tail = start + vectors * VEC + lane;
    if (tail < last) step(a, ld(element(p, line, tail)), tail);
    a = group_reduce<GROUP>(a);
    if (lane == 0) finish_or_keep(p, o, chunk, a);
  }
}
)CUDA";

// Strided lines. A block is 256 / lanes column threads by `lanes` row lanes (whole warps on
// adjacent columns: coalesced); a thread keeps N adjacent outputs, read with one N-wide load.
// Row lane r takes rows first + r, first + r + lanes, ... of its chunk (increasing), then the
// lanes' partials meet in shared memory and lane 0 combines them in order.
constexpr const char* kColumns = R"CUDA(
template <int N> __device__ __forceinline__ void reduce_columns(const P& p) {
  __shared__ Acc partials[256 * N];  // [row lane][element][column thread]
  const int lanes = p.lanes;
  const int width = (int)blockDim.x / lanes;
  const int column = (int)threadIdx.x % width, row_lane = (int)threadIdx.x / width;
  const i64 groups = p.outputs / N;
  const i64 tiles = (groups + width - 1) / width;
  for (i64 item = blockIdx.x; item < tiles * p.chunks; item += gridDim.x) {
    const i64 chunk = item / tiles, tile = item - chunk * tiles;
    const i64 g = tile * width + column;
    const bool valid = g < groups;
    const i64 first = chunk * p.chunk_length;
    const i64 last = min(p.length, first + p.chunk_length);
    Acc a[N];
#pragma unroll
    for (int e = 0; e < N; ++e) a[e] = init();
    if (valid) {
      const Lines<N> at = lines_at<N>(p, g * N);
      i64 j = first + row_lane;
      for (; j + 3 * lanes < last; j += 4 * lanes) {
        Pack<N> x[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) x[u] = across<N>(p, at, j + u * lanes);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
          for (int e = 0; e < N; ++e) step(a[e], ld(x[u].s[e]), j + u * lanes);
        }
#pragma unroll
        for (int e = 0; e < N; ++e) KILN_REDUCE_SETTLE(a[e]);
      }
      for (; j < last; j += lanes) {
        const Pack<N> x = across<N>(p, at, j);
#pragma unroll
        for (int e = 0; e < N; ++e) step(a[e], ld(x.s[e]), j);
      }
    }
    if (lanes > 1) {
#pragma unroll
      for (int e = 0; e < N; ++e) partials[(row_lane * N + e) * width + column] = a[e];
      __syncthreads();
      if (row_lane == 0) {
        for (int r = 1; r < lanes; ++r) {
#pragma unroll
          for (int e = 0; e < N; ++e) combine(a[e], partials[(r * N + e) * width + column]);
        }
      }
    }
    if (row_lane == 0 && valid) {
#pragma unroll
      for (int e = 0; e < N; ++e) finish_or_keep(p, g * N + e, chunk, a[e]);
    }
    if (lanes > 1) __syncthreads();
  }
}
)CUDA";

// A GROUP per output: its chunks' partials (scratch[chunk][output]) combined in a fixed order.
constexpr const char* kFinish = R"CUDA(
template <int GROUP> __device__ __forceinline__ void reduce_finish(const P& p) {
  const int lane = (int)(threadIdx.x % GROUP);
  const i64 per_block = blockDim.x / GROUP;
  const Acc* partials = (const Acc*)p.scratch;
  for (i64 o = blockIdx.x * per_block + threadIdx.x / GROUP; o < p.outputs; o += (i64)gridDim.x * per_block) {
    Acc a = init();
    for (i64 c = lane; c < p.chunks; c += GROUP) combine(a, partials[c * p.outputs + o]);
    a = group_reduce<GROUP>(a);
    if (lane == 0) emit(p, o, a);
  }
}
)CUDA";

// How the kernels read x by lines along the dim: a line's element j (lines of stride 1: j..j+N-1,
// aligned); element j of N adjacent lines (adjacent in memory, read with one N-wide load).
constexpr const char* kLoads = R"CUDA(
struct Line { const S* at; };
__device__ __forceinline__ Line line_at(const P& p, i64 base) { return Line{(const S*)p.in + base}; }
__device__ __forceinline__ u64 address_of(const Line& l, i64 j) { return (u64)(l.at + j); }
__device__ __forceinline__ S element(const P&, const Line& l, i64 j) { return l.at[j]; }
template <int N> __device__ __forceinline__ Pack<N> elements(const P&, const Line& l, i64 j) { return *(const Pack<N>*)(l.at + j); }
template <int N> struct Lines { Line first; };
template <int N> __device__ __forceinline__ Lines<N> lines_at(const P& p, i64 o) { return Lines<N>{line_at(p, base_of(p, o))}; }
template <int N> __device__ __forceinline__ Pack<N> across(const P& p, const Lines<N>& l, i64 j) { return *(const Pack<N>*)(l.first.at + j * p.reduce_stride); }
)CUDA";

// From a fused chain instead (fused_kernel.h): bases are flat indices in the iteration shape.
// Addresses are those of the fresh (256-byte aligned) tensor the unfused chain would have
// written: the same heads, vectors and order of accumulation.
constexpr const char* kFusedLoads = R"CUDA(
__device__ __forceinline__ Line line_at(const P& p, i64 base) { return chain_line(p.t, base); }
__device__ __forceinline__ u64 address_of(const Line& l, i64 j) { return (u64)(l.base + j) * sizeof(S); }
__device__ __forceinline__ S element(const P& p, const Line& l, i64 j) { return chain_at(p.t, l, j, 1, true); }
template <int N> __device__ __forceinline__ Pack<N> elements(const P& p, const Line& l, i64 j) {
  Pack<N> x;
#pragma unroll
  for (int e = 0; e < N; ++e) x.s[e] = chain_at(p.t, l, j + e, 1, true);
  return x;
}
template <int N> struct Lines { Line l[N]; };
template <int N> __device__ __forceinline__ Lines<N> lines_at(const P& p, i64 o) {
  Lines<N> ls;
#pragma unroll
  for (int e = 0; e < N; ++e) ls.l[e] = line_at(p, base_of(p, o + e));
  return ls;
}
template <int N> __device__ __forceinline__ Pack<N> across(const P& p, const Lines<N>& ls, i64 j) {
  Pack<N> x;
#pragma unroll
  for (int e = 0; e < N; ++e) x.s[e] = chain_at(p.t, ls.l[e], j, p.reduce_stride, true);
  return x;
}
)CUDA";

// The kernel's body text and the call its entry point makes.
struct Entry {
  const char* body;
  const char* call;
};
Entry entry_of(ReduceKernel k) {
  switch (k) {
    case ReduceKernel::LinesWarp:
      return {kLines, "reduce_lines<32>"};
    case ReduceKernel::LinesBlock:
      return {kLines, "reduce_lines<256>"};
    case ReduceKernel::Columns:
      return {kColumns, "reduce_columns<1>"};
    case ReduceKernel::ColumnsVector:
      return {kColumns, "reduce_columns<VECTOR>"};
    case ReduceKernel::FinishWarp:
      return {kFinish, "reduce_finish<32>"};
    case ReduceKernel::FinishBlock:
      return {kFinish, "reduce_finish<256>"};
  }
  return {"", ""};
}

}  // namespace

const Reducer Reducer::Sum{"sum", [](DType d, DType o) { return sum_like(d, o, false, false); }};
const Reducer Reducer::Mean{"mean", [](DType d, DType o) { return sum_like(d, o, false, true); }};
const Reducer Reducer::Prod{"prod", [](DType d, DType o) { return sum_like(d, o, true, false); }};
const Reducer Reducer::Max{"max", [](DType d, DType o) { return extremum(d, o, true); }};
const Reducer Reducer::Min{"min", [](DType d, DType o) { return extremum(d, o, false); }};
const Reducer Reducer::ArgMax{"argmax", [](DType d, DType o) { return arg_extremum(d, o, true); },
                              true};
const Reducer Reducer::ArgMin{"argmin", [](DType d, DType o) { return arg_extremum(d, o, false); },
                              true};
const Reducer Reducer::Any{"any", [](DType d, DType o) { return truth(d, o, true); }};
const Reducer Reducer::All{"all", [](DType d, DType o) { return truth(d, o, false); }};
const Reducer Reducer::LogSumExp{"logsumexp", &logsumexp_accumulator};

std::string reduce_kernel_source(ReduceKernel kernel, const Reducer& r, DType dtype,
                                 DType out_dtype, const FusedLoad* fused,
                                 const FusedKernel* epilogue) {
  if (fused != nullptr && epilogue != nullptr) {
    throw std::logic_error("reduce_kernel_source: an epilogue after a fused chain");
  }
  const Entry entry = entry_of(kernel);
  return fmt::format(
      R"CUDA({prelude}{fused_value}{params}typedef {S} S;
constexpr int VECTOR = {vector};
__device__ __forceinline__ {C} ld(S v) {{ return {load}; }}
{accumulator}{emit}{common}{loads}{body}extern "C" __global__ void __launch_bounds__(256, 4) {name}(const P p) {{ k_grid_dependency(); {call}(p); }}
)CUDA",
      "prelude"_a = kernel_prelude(),
      "fused_value"_a = fused != nullptr      ? fused_load_source(*fused)
                        : epilogue != nullptr ? fused_epilogue_source(*epilogue)
                                              : std::string(),
      "params"_a = params_struct(fused != nullptr, epilogue != nullptr),
      "emit"_a = emit_function(out_dtype, epilogue != nullptr), "S"_a = storage_type(dtype),
      "vector"_a = std::min<std::size_t>(4, 16 / dtype_size(dtype)), "C"_a = compute_type(dtype),
      "load"_a = load_expression(dtype, "v"), "accumulator"_a = r.accumulator(dtype, out_dtype),
      "common"_a = kCommon, "loads"_a = fused != nullptr ? kFusedLoads : kLoads,
      "body"_a = entry.body, "name"_a = reduce_kernel_name(kernel), "call"_a = entry.call);
}

}  // namespace kiln::cuda
