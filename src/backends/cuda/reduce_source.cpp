// Source generation of the reduction family (no driver calls; see elementwise_source.cpp).
#include <cstdio>

#include "backends/cuda/kernel_source.h"
#include "backends/cuda/reduce.h"

namespace kiln::cuda {

namespace {

// The launch parameters (struct Params in reduce.cpp mirrors it).
constexpr const char* kParams = R"CUDA(
struct P {
  i64 outputs, length, reduce_stride, chunks, chunk_length;
  int rank, pad;
  i64 sizes[12]; i64 strides[12];
  u64 in, out, scratch;
  double divisor;
};
)CUDA";

// The accumulator and its four functions for reducer over dtype, written to out_dtype.
std::string reducer_source(Reducer r, DType dtype, DType out_dtype) {
  const std::string C = compute_type(dtype);
  const bool fl = is_float(dtype);
  const std::string nan = dtype == DType::F64 ? "__longlong_as_double(0x7ff8000000000000ll)"
                                              : "__int_as_float(0x7fc00000)";
  const std::string inf = dtype == DType::F64 ? "__longlong_as_double(0x7ff0000000000000ll)"
                                              : "__int_as_float(0x7f800000)";
  const std::string store = "((" + std::string(storage_type(out_dtype)) + "*)p.out)[o] = ";
  std::string s;
  switch (r) {
    case Reducer::Sum: case Reducer::Mean: case Reducer::Prod: {
      const bool prod = r == Reducer::Prod;
      const std::string acc = fl ? "double" : "u64";
      const std::string widen = fl ? "(double)x" : (is_signed_int(dtype) ? "(u64)(i64)x" : "(u64)x");
      s += "struct Acc { " + acc + " v; };\n";
      s += "__device__ __forceinline__ Acc init() { return Acc{(" + acc + ")" + (prod ? "1" : "0") + "}; }\n";
      s += "__device__ __forceinline__ void step(Acc& a, " + C + " x, i64) { a.v " + (prod ? "*" : "+") + "= " + widen + "; }\n";
      s += "__device__ __forceinline__ void combine(Acc& a, const Acc& b) { a.v " + std::string(prod ? "*" : "+") + "= b.v; }\n";
      std::string value = fl ? std::string("(") + C + ")(a.v" + (r == Reducer::Mean ? " / p.divisor" : "") + ")" : "(" + C + ")a.v";
      s += "__device__ __forceinline__ void write(const P& p, i64 o, const Acc& a) { " + store +
           store_expression(out_dtype, value) + "; }\n";
      break;
    }
    case Reducer::Max: case Reducer::Min: {
      const bool mx = r == Reducer::Max;
      std::string start;
      if (fl) start = mx ? "-" + inf : inf;
      else start = "(" + C + ")" + (mx ? "0" : "~0ull");  // replaced below for signed types
      if (!fl) {
        // Lowest / highest of the integer type from its bit pattern.
        const int bits = static_cast<int>(dtype_size(dtype) * 8);
        char text[96];
        if (is_signed_int(dtype)) {
          const unsigned long long high = (bits == 64) ? 0x7fffffffffffffffull : ((1ull << (bits - 1)) - 1);
          const unsigned long long low = (bits == 64) ? 0x8000000000000000ull : (1ull << (bits - 1));
          std::snprintf(text, sizeof text, "(%s)0x%llxull", C.c_str(), mx ? low : high);
        } else {
          const unsigned long long high = (bits == 64) ? ~0ull : ((1ull << bits) - 1);
          std::snprintf(text, sizeof text, "(%s)0x%llxull", C.c_str(), mx ? 0ull : high);
        }
        start = text;
      }
      const std::string pick = mx ? "x > a.v" : "x < a.v";
      s += "struct Acc { " + C + " v; bool nan; };\n";
      s += "__device__ __forceinline__ Acc init() { return Acc{" + start + ", false}; }\n";
      s += "__device__ __forceinline__ void step(Acc& a, " + C + " x, i64) { if (" + pick + ") a.v = x;" + (fl ? " a.nan |= (x != x);" : "") + " }\n";
      s += "__device__ __forceinline__ void combine(Acc& a, const Acc& b) { const " + C + " x = b.v; if (" + pick + ") a.v = x; a.nan |= b.nan; }\n";
      const std::string value = fl ? "(a.nan ? (" + C + ")" + nan + " : a.v)" : "a.v";
      s += "__device__ __forceinline__ void write(const P& p, i64 o, const Acc& a) { " + store +
           store_expression(out_dtype, value) + "; }\n";
      break;
    }
    case Reducer::ArgMax: case Reducer::ArgMin: {
      const std::string cmp = r == Reducer::ArgMax ? ">" : "<";
      // better(v, best): the first NaN wins, then strictly larger (smaller); ties keep the
      // earlier index, also when partials of interleaved elements are combined.
      s += "struct Acc { " + C + " v; i64 idx; };\n";
      s += "__device__ __forceinline__ bool better(" + C + " v, " + C + " best) { " +
           (fl ? "if (v != v) return best == best; " : "") + "return v " + cmp + " best; }\n";
      s += "__device__ __forceinline__ Acc init() { return Acc{(" + C + ")0, -1}; }\n";
      s += "__device__ __forceinline__ void step(Acc& a, " + C + " x, i64 j) { if (a.idx < 0 || better(x, a.v)) { a.v = x; a.idx = j; } }\n";
      s += "__device__ __forceinline__ void combine(Acc& a, const Acc& b) {\n"
           "  if (b.idx < 0) return;\n"
           "  if (a.idx < 0 || better(b.v, a.v) || (!better(a.v, b.v) && b.idx < a.idx)) a = b;\n}\n";
      s += "__device__ __forceinline__ void write(const P& p, i64 o, const Acc& a) { " + store +
           "(" + storage_type(out_dtype) + ")(a.idx < 0 ? 0 : a.idx); }\n";
      break;
    }
    case Reducer::Any: case Reducer::All: {
      const bool any = r == Reducer::Any;
      s += "struct Acc { bool v; };\n";
      s += std::string("__device__ __forceinline__ Acc init() { return Acc{") + (any ? "false" : "true") + "}; }\n";
      s += "__device__ __forceinline__ void step(Acc& a, " + C + " x, i64) { a.v = a.v " + (any ? "||" : "&&") + " (x != (" + C + ")0); }\n";
      s += std::string("__device__ __forceinline__ void combine(Acc& a, const Acc& b) { a.v = a.v ") + (any ? "||" : "&&") + " b.v; }\n";
      s += "__device__ __forceinline__ void write(const P& p, i64 o, const Acc& a) { " + store + "(unsigned char)(a.v ? 1 : 0); }\n";
      break;
    }
  }
  return s;
}

std::string reduce_source(Reducer r, DType dtype, DType out_dtype) {
  const std::string S = storage_type(dtype);
  const std::string load = load_expression(dtype, "((const " + S + "*)p.in)[base + j * p.reduce_stride]");
  std::string s = kernel_prelude() + kParams + reducer_source(r, dtype, out_dtype);
  s += R"CUDA(
__device__ __forceinline__ i64 base_of(const P& p, i64 o) {
  i64 base = 0;
  for (int d = p.rank - 1; d >= 0; --d) { const i64 q = o / p.sizes[d]; base += (o - q * p.sizes[d]) * p.strides[d]; o = q; }
  return base;
}
extern "C" __global__ void kiln_reduce_thread(const P p) {
  // Item = chunk * outputs + output: neighbouring threads take neighbouring outputs (coalesced
  // when the reduced dim is not the innermost one).
  for (i64 item = blockIdx.x * (i64)blockDim.x + threadIdx.x; item < p.outputs * p.chunks; item += (i64)gridDim.x * blockDim.x) {
    const i64 chunk = item / p.outputs, o = item - chunk * p.outputs;
    const i64 base = base_of(p, o);
    const i64 first = chunk * p.chunk_length;
    const i64 last = min(p.length, first + p.chunk_length);
    Acc a = init();
    for (i64 j = first; j < last; ++j) step(a, LOAD, j);
    if (p.chunks == 1) write(p, o, a);
    else *(Acc*)(p.scratch + (u64)(o * p.chunks + chunk) * 32) = a;
  }
}
extern "C" __global__ void __launch_bounds__(256) kiln_reduce_block(const P p) {
  __shared__ Acc shared[256];
  for (i64 b = blockIdx.x; b < p.outputs * p.chunks; b += gridDim.x) {
    const i64 o = b / p.chunks, chunk = b - o * p.chunks;
    const i64 base = base_of(p, o);
    const i64 first = chunk * p.chunk_length;
    const i64 last = min(p.length, first + p.chunk_length);
    Acc a = init();
    for (i64 j = first + threadIdx.x; j < last; j += blockDim.x) step(a, LOAD, j);
    shared[threadIdx.x] = a;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) combine(shared[threadIdx.x], shared[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if (p.chunks == 1) write(p, o, shared[0]);
      else *(Acc*)(p.scratch + (u64)b * 32) = shared[0];
    }
    __syncthreads();
  }
}
extern "C" __global__ void kiln_reduce_finish(const P p) {
  for (i64 o = blockIdx.x * (i64)blockDim.x + threadIdx.x; o < p.outputs; o += (i64)gridDim.x * blockDim.x) {
    Acc a = *(const Acc*)(p.scratch + (u64)(o * p.chunks) * 32);
    for (i64 c = 1; c < p.chunks; ++c) combine(a, *(const Acc*)(p.scratch + (u64)(o * p.chunks + c) * 32));
    write(p, o, a);
  }
}
)CUDA";
  // LOAD stands for the element load in the template above.
  std::string out;
  std::size_t from = 0;
  for (std::size_t at = s.find("LOAD"); at != std::string::npos; at = s.find("LOAD", from)) {
    out.append(s, from, at - from).append(load);
    from = at + 4;
  }
  return out.append(s, from, std::string::npos);
}

}  // namespace

std::string reduce_kernel_source(Reducer r, DType dtype, DType out_dtype) {
  return reduce_source(r, dtype, out_dtype);
}

}  // namespace kiln::cuda
