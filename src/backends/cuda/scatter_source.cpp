// Source generation of the scatter family (no driver calls; see elementwise_source.cpp).
#include <fmt/format.h>

#include "backends/cuda/kernel_source.h"
#include "backends/cuda/scatter.h"

namespace kiln::cuda {

using namespace fmt::literals;

namespace {

constexpr const char* kParams = R"CUDA(
struct P {
  i64 n;
  i64 line, dim_size, out_step, index_step, value_step;
  int rank, dim;
  i64 sizes[12]; i64 os[12]; i64 is[12]; i64 vs[12];
  u64 out, index, values, winner;
  unsigned* err_word; unsigned err_token;
};
// The offsets in out (without the dim coordinate), indices and values of item i; k is the
// coordinate along dim (0 when the dim is skipped: the line path walks it itself).
__device__ __forceinline__ void k_locate(const P& p, i64 i, bool skip_dim, i64& o, i64& x, i64& v, i64& k) {
  o = 0; x = 0; v = 0; k = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    if (skip_dim && d == p.dim) continue;
    const i64 size = p.sizes[d]; const i64 q = i / size; const i64 c = i - q * size; i = q;
    o += c * p.os[d]; x += c * p.is[d]; v += c * p.vs[d];
    if (d == p.dim) k = c;
  }
}
template <int N> struct kraw;
template <> struct kraw<1> { typedef unsigned char type; };
template <> struct kraw<2> { typedef unsigned short type; };
template <> struct kraw<4> { typedef unsigned type; };
template <> struct kraw<8> { typedef u64 type; };
template <class To, class From> __device__ __forceinline__ To k_same_bits(From v) {
  union { From f; To t; } u; u.f = v; return u.t;
}
// *addr = f(*addr) atomically: a compare-and-swap loop on the element's own word (4 or 8 bytes)
// or on the aligned 32-bit word holding it (1 or 2 bytes; the other bytes are kept).
template <class S, class F> __device__ __forceinline__ void k_atomic_apply(S* addr, F f) {
  typedef typename kraw<sizeof(S)>::type R;
  if constexpr (sizeof(S) >= 4) {
    R* word = (R*)addr;
    R old = *(volatile R*)word, assumed;
    do {
      assumed = old;
      const R next = k_same_bits<R>(f(k_same_bits<S>(assumed)));
      if (next == assumed) return;
      old = atomicCAS(word, assumed, next);
    } while (old != assumed);
  } else {
    unsigned* word = (unsigned*)((u64)addr & ~(u64)3);
    const unsigned shift = (unsigned)((u64)addr & 3) * 8u;
    const unsigned mask = ((1u << (8 * sizeof(S))) - 1u) << shift;
    unsigned old = *(volatile unsigned*)word, assumed;
    do {
      assumed = old;
      const R current = (R)((assumed & mask) >> shift);
      const R next = k_same_bits<R>(f(k_same_bits<S>(current)));
      const unsigned replaced = (assumed & ~mask) | ((unsigned)next << shift);
      if (replaced == assumed) return;
      old = atomicCAS(word, assumed, replaced);
    } while (old != assumed);
  }
}
)CUDA";

// k_combine(a, b) in the compute type C: the value already there (a) and the new one (b).
std::string combine_source(DType dtype, IndexingUpdate update) {
  std::string body;
  using U = IndexingUpdate;
  if (update == U::Assign) {
    body = "return b;";
  } else if (dtype == DType::Bool) {
    body = (update == U::Add || update == U::Max) ? "return a || b;" : "return a && b;";
  } else if (is_int(dtype)) {
    switch (update) {
      case U::Add:
        body = "return k_add(a, b);";
        break;
      case U::Mul:
        body = "return k_mul(a, b);";
        break;
      case U::Min:
        body = "return b < a ? b : a;";
        break;
      case U::Max:
        body = "return b > a ? b : a;";
        break;
      default:
        break;
    }
  } else {
    switch (update) {
      case U::Add:
        body = "return a + b;";
        break;
      case U::Mul:
        body = "return a * b;";
        break;
      // A NaN already there stays; a NaN value replaces what is there.
      case U::Min:
        body = "return !(a != a) && ((b != b) || b < a) ? b : a;";
        break;
      case U::Max:
        body = "return !(a != a) && ((b != b) || b > a) ? b : a;";
        break;
      default:
        break;
    }
  }
  return fmt::format("__device__ __forceinline__ {C} k_combine({C} a, {C} b) {{ {body} }}\n",
                     "C"_a = compute_type(dtype), "body"_a = body);
}

// k_update(dst, b): *dst = combine(*dst, b) atomically; a native atomic where one exists.
std::string atomic_source(DType dtype, IndexingUpdate update) {
  const std::string S = storage_type(dtype);
  const std::string C = compute_type(dtype);
  using U = IndexingUpdate;
  std::string native;
  const bool add = update == U::Add, min = update == U::Min, max = update == U::Max;
  switch (dtype) {
    case DType::F32:
      if (add) native = "atomicAdd(dst, b);";
      break;
    case DType::F64:
      if (add) native = "atomicAdd(dst, b);";
      break;
    case DType::I32:
      if (add) native = "atomicAdd((unsigned*)dst, (unsigned)b);";
      if (min) native = "atomicMin(dst, b);";
      if (max) native = "atomicMax(dst, b);";
      break;
    case DType::U32:
      if (add) native = "atomicAdd(dst, b);";
      if (min) native = "atomicMin(dst, b);";
      if (max) native = "atomicMax(dst, b);";
      break;
    case DType::I64:
      if (add) native = "atomicAdd((u64*)dst, (u64)b);";
      if (min) native = "atomicMin(dst, b);";
      if (max) native = "atomicMax(dst, b);";
      break;
    case DType::U64:
      if (add) native = "atomicAdd(dst, b);";
      if (min) native = "atomicMin(dst, b);";
      if (max) native = "atomicMax(dst, b);";
      break;
    default:
      break;
  }
  if (native.empty()) {
    const std::string combined =
        store_expression(dtype, fmt::format("k_combine({}, b)", load_expression(dtype, "current")));
    native = fmt::format("k_atomic_apply(dst, [b]({S} current) -> {S} {{ return {combined}; }});",
                         "S"_a = S, "combined"_a = combined);
  }
  return fmt::format(
      "__device__ __forceinline__ void k_update({S}* dst, {C} b) {{\n  {update}\n}}\n", "S"_a = S,
      "C"_a = C, "update"_a = native);
}

}  // namespace

// The element paths' loop head: item i's offsets and its index, checked.
constexpr const char* kElementHead = R"CUDA(  bool err = false;
  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < p.n; i += (i64)gridDim.x * blockDim.x) {
    i64 o, x, v, k;
    k_locate(p, i, false, o, x, v, k);
    const i64 j = INDEX(x);
    if (j < 0 || j >= p.dim_size) { err = true; continue; }
    const i64 at = o + j * p.out_step;
)CUDA";
constexpr const char* kTail = "  }\n  if (err) *p.err_word = p.err_token;\n}\n";

std::string scatter_source(DType dtype, DType index_dtype, IndexingUpdate update) {
  const std::string S = storage_type(dtype);
  const bool assign = update == IndexingUpdate::Assign;
  // The line path: a thread per line along dim, in order (the CPU's exact result).
  const std::string line_update =
      assign ? fmt::format("*dst = ((const {}*)p.values)[v + k * p.value_step]", S)
             : fmt::format(
                   "*dst = {}",
                   store_expression(dtype, fmt::format("k_combine({}, VALUE(v + k * p.value_step))",
                                                       load_expression(dtype, "*dst"))));
  std::string kernels;
  if (assign) {
    // Pass 1: the last position along dim (k + 1; 0 = none) that writes each element wins.
    // Pass 2: only the winner writes (bad indices were reported by pass 1).
    kernels = fmt::format(
        R"CUDA(extern "C" __global__ void __launch_bounds__(256) kiln_scatter_claim(const P p) {{
{head}    atomicMax((u64*)p.winner + at, (u64)(k + 1));
{tail}extern "C" __global__ void __launch_bounds__(256) kiln_scatter_assign(const P p) {{
{head}    if (((const u64*)p.winner)[at] == (u64)(k + 1)) (({S}*)p.out)[at] = ((const {S}*)p.values)[v];
{tail})CUDA",
        "head"_a = kElementHead, "tail"_a = kTail, "S"_a = S);
  } else {
    kernels = fmt::format(
        R"CUDA(extern "C" __global__ void __launch_bounds__(256) kiln_scatter_atomic(const P p) {{
{head}    k_update(({S}*)p.out + at, VALUE(v));
{tail})CUDA",
        "head"_a = kElementHead, "tail"_a = kTail, "S"_a = S);
  }
  // INDEX(at): the index at offset `at` of indices, as i64 (u64 past the i64 range turns
  // negative, so it is out of range like any other bad index).
  return fmt::format(
      R"CUDA({prelude}{params}{combine}{update}#define INDEX(at) ((i64)((const {I}*)p.index)[at])
#define VALUE(at) ({value})
extern "C" __global__ void __launch_bounds__(256) kiln_scatter_lines(const P p) {{
  bool err = false;
  for (i64 l = blockIdx.x * (i64)blockDim.x + threadIdx.x; l < p.n; l += (i64)gridDim.x * blockDim.x) {{
    i64 o, x, v, k;
    k_locate(p, l, true, o, x, v, k);
    {S}* out = ({S}*)p.out + o;
    for (k = 0; k < p.line; ++k) {{
      const i64 j = INDEX(x + k * p.index_step);
      if (j < 0 || j >= p.dim_size) {{ err = true; continue; }}
      {S}* dst = out + j * p.out_step;
      {line_update};
    }}
{tail}{kernels})CUDA",
      "prelude"_a = kernel_prelude(), "params"_a = kParams,
      "combine"_a = combine_source(dtype, update),
      "update"_a = assign ? std::string() : atomic_source(dtype, update),
      "I"_a = storage_type(index_dtype),
      "value"_a = load_expression(dtype, fmt::format("((const {}*)p.values)[at]", S)), "S"_a = S,
      "line_update"_a = line_update, "tail"_a = kTail, "kernels"_a = kernels);
}

}  // namespace kiln::cuda
