// Source generation of the elementwise family (no driver calls: also compiled into the tests
// that check every generated kernel with NVRTC on machines without a GPU).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_source.h"

namespace kiln::cuda {

namespace {

// The launch parameters (structs Params and FlatParams in elementwise.cpp mirror them).
constexpr const char* kParamsStructs = R"CUDA(
struct P {
  i64 n; int rank;
  i64 sizes[12]; i64 strides[4][12];
  u64 ptr[4]; u64 s[4];
  unsigned* err_word; unsigned err_token;
};
struct PF {
  i64 n; u64 ptr[4]; u64 s[4];
  unsigned* err_word; unsigned err_token; unsigned reverse;
};
)CUDA";

// The kernel's head up to the loop: the error flag and the scalars in their compute types.
std::string kernel_head(const ElementwiseOp& op, const char* name, const char* params) {
  std::string s = std::string("extern \"C\" __global__ void __launch_bounds__(256) ") + name +
                  "(const " + params + " p) {\n  bool err = false;\n";
  for (std::size_t k = 0; k < op.scalars.size(); ++k) {
    const std::string type = compute_type(op.scalars[k]);
    s += "  const " + type + " s" + std::to_string(k) + " = k_bits<" + type + ">(p.s[" +
         std::to_string(k) + "]);\n";
  }
  s += "  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < p.n; i += (i64)gridDim.x * "
       "blockDim.x) {\n";
  return s;
}

// The loop body once the element offsets o0 (output), o1.. (inputs) are known, and the end.
std::string kernel_tail(const ElementwiseOp& op) {
  static const char* names[] = {"a", "b", "c"};
  std::string s;
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    if (static_cast<int>(k) == op.gathered_input) continue;
    const DType d = op.inputs[k];
    const std::string at = "((const " + std::string(storage_type(d)) + "*)p.ptr[" +
                           std::to_string(k + 1) + "])[o" + std::to_string(k + 1) + "]";
    s += "    const " + std::string(compute_type(d)) + " " + names[k] + " = " +
         load_expression(d, at) + ";\n";
  }
  s += "    const " + std::string(compute_type(op.value_dtype)) + " value = (" +
       std::string(op.expression.view()) + ");\n";
  s += "    ((" + std::string(storage_type(op.output)) + "*)p.ptr[0])[o0] = " +
       store_expression(op.output, convert_expression(op.value_dtype, op.output, "value")) +
       ";\n  }\n";
  s += "  if (err) *p.err_word = p.err_token;\n}\n";
  return s;
}

// The flat case with every pointer aligned to a whole vector (vector_width elements, 16 bytes of
// the widest operand): each thread moves one vector of every operand with one wide load or
// store, vector_shape().unroll vectors per loop step, so a 4096^2 map issues a quarter of the
// memory instructions with more of them in flight. The n % width elements past the last whole
// vector take the scalar loop.
std::string vector_kernel(const ElementwiseOp& op) {
  static const char* names[] = {"a", "b", "c"};
  const VectorShape& shape = vector_shape();
  const std::string width = std::to_string(vector_width(op));
  auto vector_type = [&](DType d) { return "V<" + std::string(storage_type(d)) + ">"; };
  std::string s = "template <class T> struct alignas(" + width + " * sizeof(T) < 16 ? " + width +
                  " * sizeof(T) : 16) V { T v[" + width + "]; };\n";
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(shape.threads) +
       ") kiln_elementwise_vec(const PF p) {\n";
  s += "  bool err = false;\n";
  for (std::size_t k = 0; k < op.scalars.size(); ++k) {
    const std::string type = compute_type(op.scalars[k]);
    s += "  const " + type + " s" + std::to_string(k) + " = k_bits<" + type + ">(p.s[" +
         std::to_string(k) + "]);\n";
  }
  const std::string unroll = std::to_string(shape.unroll);
  s += "  const i64 threads = (i64)gridDim.x * blockDim.x;\n";
  s += "  const i64 vectors = p.n / " + width + ";\n";
  // unroll vectors per thread and step, a block's width apart (loads stay coalesced): every load
  // of a step is issued before the first result is needed.
  s += "  for (i64 c0 = blockIdx.x * (i64)blockDim.x * " + unroll +
       " + threadIdx.x; c0 < vectors; c0 += threads * " + unroll + ") {\n";
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    s += "    " + vector_type(op.inputs[k]) + " v" + std::to_string(k + 1) + "[" + unroll + "];\n";
  }
  // p.reverse walks the vectors from the last: launches alternate, so an op starts on the part
  // of its input that the op before wrote last, which is still in L2 (see launch_elementwise).
  const std::string at = "(p.reverse ? vectors - 1 - c : c)";
  s += "#pragma unroll\n    for (int u = 0; u < " + unroll + "; ++u) {\n";
  s += "      const i64 c = c0 + u * (i64)blockDim.x;\n      if (c >= vectors) break;\n";
  s += "      const i64 at = " + at + ";\n";
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    s += "      v" + std::to_string(k + 1) + "[u] = ((const " + vector_type(op.inputs[k]) +
         "*)p.ptr[" + std::to_string(k + 1) + "])[at];\n";
  }
  s += "    }\n#pragma unroll\n    for (int u = 0; u < " + unroll + "; ++u) {\n";
  s += "      const i64 c = c0 + u * (i64)blockDim.x;\n      if (c >= vectors) break;\n";
  s += "      const i64 at = " + at + ";\n";
  s += "      " + vector_type(op.output) + " v0;\n";
  s += "#pragma unroll\n      for (int j = 0; j < " + width + "; ++j) {\n";
  s += "        const i64 i = at * " + width + " + j;\n        (void)i;\n";
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    const std::string lane = std::string("v").append(std::to_string(k + 1)).append("[u].v[j]");
    s += "        const " + std::string(compute_type(op.inputs[k])) + " " + names[k] + " = " +
         load_expression(op.inputs[k], lane) + ";\n";
  }
  s += "        const " + std::string(compute_type(op.value_dtype)) + " value = (" +
       std::string(op.expression.view()) + ");\n";
  s += "        v0.v[j] = " +
       store_expression(op.output, convert_expression(op.value_dtype, op.output, "value")) +
       ";\n      }\n";
  s += "      ((" + vector_type(op.output) + "*)p.ptr[0])[at] = v0;\n    }\n  }\n";
  s += "  for (i64 i = vectors * " + width +
       " + blockIdx.x * (i64)blockDim.x + threadIdx.x; i < p.n; i += threads) {\n";
  const std::size_t count = op.inputs.size() + 1;
  for (std::size_t k = 0; k < count; ++k) s += "    const i64 o" + std::to_string(k) + " = i;\n";
  return s + kernel_tail(op);
}

VectorShape read_vector_shape() {
  VectorShape shape{.threads = 128, .unroll = 1, .blocks_per_sm = 0};
  const char* text = std::getenv("KILN_CUDA_VECTOR_SHAPE");
  if (text == nullptr || *text == '\0') return shape;
  long threads = 0, unroll = 0, cap = -1;
  char end = 0;
  if (std::sscanf(text, "%ld,%ld,%ld%c", &threads, &unroll, &cap, &end) != 3 || threads < 32 ||
      threads > 1024 || threads % 32 != 0 || unroll < 1 || unroll > 16 || cap < 0) {
    detail::fail<InvalidArgument>("cuda", "KILN_CUDA_VECTOR_SHAPE is '", text,
                                  "'; want threads,unroll,cap with threads a multiple of 32 in "
                                  "[32, 1024], unroll in [1, 16] and cap >= 0 (0: no cap)");
  }
  shape.threads = static_cast<unsigned>(threads);
  shape.unroll = static_cast<int>(unroll);
  shape.blocks_per_sm = static_cast<int>(cap);
  return shape;
}

}  // namespace

void DTypeList::too_many(std::size_t count) {
  detail::fail<InvalidArgument>("cuda", "an elementwise op lists ", count,
                                " dtypes of one kind; at most 4 are supported");
}

std::uint64_t scalar_bits(double value, DType dtype) {
  std::uint64_t bits = 0;
  auto put = [&bits](auto v) { std::memcpy(&bits, &v, sizeof v); };
  switch (dtype) {
    case DType::F64:
      put(value);
      break;
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      put(static_cast<float>(value));
      break;
    default:
      put(static_cast<std::int64_t>(value));
      break;
  }
  return bits;
}

std::uint64_t scalar_bits_int(std::int64_t value) { return static_cast<std::uint64_t>(value); }

const VectorShape& vector_shape() {
  static const VectorShape shape = read_vector_shape();
  return shape;
}

std::int64_t vector_width(const ElementwiseOp& op) noexcept {
  std::size_t widest = dtype_size(op.output);
  for (DType d : op.inputs) widest = std::max(widest, dtype_size(d));
  return std::clamp<std::int64_t>(16 / static_cast<std::int64_t>(widest), 4, 16);
}

std::string elementwise_source(const ElementwiseOp& op) {
  std::string s = kernel_prelude() + kParamsStructs;
  if (op.gathered_input >= 0) {
    const std::size_t k = static_cast<std::size_t>(op.gathered_input);
    const DType d = op.inputs[k];
    s += "#define GATHER(extra) " +
         load_expression(d, "((const " + std::string(storage_type(d)) + "*)p.ptr[" +
                                std::to_string(k + 1) + "])[o" + std::to_string(k + 1) +
                                " + (extra)]") +
         "\n";
  }
  const std::size_t count = op.inputs.size() + 1;
  const std::string tail = kernel_tail(op);
  // Any strides: the flat index is split into coordinates of the merged dims.
  s += kernel_head(op, "kiln_elementwise", "P");
  s += "    i64 rem = i;\n";
  for (std::size_t k = 0; k < count; ++k) s += "    i64 o" + std::to_string(k) + " = 0;\n";
  s += "    for (int d = p.rank - 1; d >= 0; --d) {\n";
  s += "      const i64 size = p.sizes[d]; const i64 q = rem / size; const i64 idx = rem - q * "
       "size; rem = q;\n";
  for (std::size_t k = 0; k < count; ++k) {
    s += "      o" + std::to_string(k) + " += idx * p.strides[" + std::to_string(k) + "][d];\n";
  }
  s += "    }\n" + tail;
  // Every operand contiguous and of the output's shape: each is read at the flat index.
  s += kernel_head(op, "kiln_elementwise_flat", "PF");
  for (std::size_t k = 0; k < count; ++k) s += "    const i64 o" + std::to_string(k) + " = i;\n";
  s += tail;
  if (op.gathered_input < 0) s += vector_kernel(op);
  return s;
}

}  // namespace kiln::cuda
