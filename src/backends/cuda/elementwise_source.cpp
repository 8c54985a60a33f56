// Source generation of the elementwise family (no driver calls: also compiled into the tests
// that check every generated kernel with NVRTC on machines without a GPU).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_source.h"

namespace kiln::cuda {

using namespace fmt::literals;

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

constexpr const char* kOperandNames[] = {"a", "b", "c"};

// One line per operand index 0 .. count - 1 ({0} in line): the output is 0, input k is k + 1.
std::string per_operand(std::size_t count, fmt::format_string<std::size_t> line) {
  std::string s;
  for (std::size_t k = 0; k < count; ++k) s += fmt::vformat(line, fmt::make_format_args(k));
  return s;
}

// The scalars s0, s1, ... in their compute types, from their raw 64-bit words.
std::string scalar_declarations(const ElementwiseOp& op) {
  std::string s;
  for (std::size_t k = 0; k < op.scalars.size(); ++k) {
    s += fmt::format("  const {type} s{k} = k_bits<{type}>(p.s[{k}]);\n",
                     "type"_a = compute_type(op.scalars[k]), "k"_a = k);
  }
  return s;
}

// The line computing the element's value and storing it at `to` (the output's storage type).
std::string value_and_store(const ElementwiseOp& op, std::string_view indent, std::string_view to) {
  return fmt::format(
      "{indent}const {type} value = ({expression});\n"
      "{indent}{to} = {store};\n",
      "indent"_a = indent, "type"_a = compute_type(op.value_dtype),
      "expression"_a = op.expression.view(), "to"_a = to,
      "store"_a =
          store_expression(op.output, convert_expression(op.value_dtype, op.output, "value")));
}

// The kernel's head up to the loop: the error flag and the scalars in their compute types.
std::string kernel_head(const ElementwiseOp& op, const char* name, const char* params) {
  return fmt::format(
      R"CUDA(extern "C" __global__ void __launch_bounds__(256) {name}(const {params} p) {{
  k_grid_dependency();
  bool err = false;
{scalars}  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < p.n; i += (i64)gridDim.x * blockDim.x) {{
)CUDA",
      "name"_a = name, "params"_a = params, "scalars"_a = scalar_declarations(op));
}

// The loop body once the element offsets o0 (output), o1.. (inputs) are known, and the end.
std::string kernel_tail(const ElementwiseOp& op) {
  std::string loads;
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    if (static_cast<int>(k) == op.gathered_input) continue;
    const DType d = op.inputs[k];
    const std::string at =
        fmt::format("((const {}*)p.ptr[{}])[o{}]", storage_type(d), k + 1, k + 1);
    loads += fmt::format("    const {} {} = {};\n", compute_type(d), kOperandNames[k],
                         load_expression(d, at));
  }
  const std::string to = fmt::format("(({}*)p.ptr[0])[o0]", storage_type(op.output));
  return fmt::format(R"CUDA({loads}{value_and_store}  }}
  if (err) *p.err_word = p.err_token;
}}
)CUDA",
                     "loads"_a = loads, "value_and_store"_a = value_and_store(op, "    ", to));
}

// The flat case with every pointer aligned to a whole vector (vector_width elements, 16 bytes of
// the widest operand): each thread moves one vector of every operand with one wide load or
// store, vector_shape().unroll vectors per loop step, so a 4096^2 map issues a quarter of the
// memory instructions with more of them in flight. The n % width elements past the last whole
// vector take the scalar loop. The unroll vectors of a thread and step are a block's width apart
// (loads stay coalesced): every load of a step is issued before the first result is needed.
// p.reverse walks the vectors from the last: launches alternate, so an op starts on the part of
// its input that the op before wrote last, which is still in L2 (see launch_elementwise).
std::string vector_kernel(const ElementwiseOp& op) {
  std::string registers, loads, lanes;
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    const DType d = op.inputs[k];
    registers += fmt::format("    V<{}> v{}[{}];\n", storage_type(d), k + 1, vector_shape().unroll);
    loads +=
        fmt::format("      v{0}[u] = ((const V<{1}>*)p.ptr[{0}])[at];\n", k + 1, storage_type(d));
    lanes += fmt::format("        const {} {} = {};\n", compute_type(d), kOperandNames[k],
                         load_expression(d, fmt::format("v{}[u].v[j]", k + 1)));
  }
  return fmt::format(
      R"CUDA(template <class T> struct alignas({width} * sizeof(T) < 16 ? {width} * sizeof(T) : 16) V {{ T v[{width}]; }};
extern "C" __global__ void __launch_bounds__({threads}) kiln_elementwise_vec(const PF p) {{
  k_grid_dependency();
  bool err = false;
{scalars}  const i64 threads = (i64)gridDim.x * blockDim.x;
  const i64 vectors = p.n / {width};
  for (i64 c0 = blockIdx.x * (i64)blockDim.x * {unroll} + threadIdx.x; c0 < vectors; c0 += threads * {unroll}) {{
{registers}#pragma unroll
    for (int u = 0; u < {unroll}; ++u) {{
      const i64 c = c0 + u * (i64)blockDim.x;
      if (c >= vectors) break;
      const i64 at = (p.reverse ? vectors - 1 - c : c);
{loads}    }}
#pragma unroll
    for (int u = 0; u < {unroll}; ++u) {{
      const i64 c = c0 + u * (i64)blockDim.x;
      if (c >= vectors) break;
      const i64 at = (p.reverse ? vectors - 1 - c : c);
      V<{output}> v0;
#pragma unroll
      for (int j = 0; j < {width}; ++j) {{
        const i64 i = at * {width} + j;
        (void)i;
{lanes}{value_and_store}      }}
      ((V<{output}>*)p.ptr[0])[at] = v0;
    }}
  }}
  for (i64 i = vectors * {width} + blockIdx.x * (i64)blockDim.x + threadIdx.x; i < p.n; i += threads) {{
{offsets}{tail})CUDA",
      "width"_a = vector_width(op), "threads"_a = vector_shape().threads,
      "unroll"_a = vector_shape().unroll, "scalars"_a = scalar_declarations(op),
      "registers"_a = registers, "loads"_a = loads, "lanes"_a = lanes,
      "output"_a = storage_type(op.output),
      "value_and_store"_a = value_and_store(op, "        ", "v0.v[j]"),
      "offsets"_a = per_operand(op.inputs.size() + 1, "    const i64 o{0} = i;\n"),
      "tail"_a = kernel_tail(op));
}

// KernelLayout::StridedWide: a vector of every operand per thread and loop step, at the
// offsets of its first element (the host checked that each vector is contiguous and aligned in
// every operand).
std::string strided_vector_kernel(const ElementwiseOp& op) {
  const std::size_t operands = op.inputs.size() + 1;
  std::string loads, lanes;
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    const DType d = op.inputs[k];
    loads +=
        fmt::format("    const V<{1}> v{0} = *(const V<{1}>*)((const {1}*)p.ptr[{0}] + o{0});\n",
                    k + 1, storage_type(d));
    lanes += fmt::format("      const {} {} = {};\n", compute_type(d), kOperandNames[k],
                         load_expression(d, fmt::format("v{}.v[j]", k + 1)));
  }
  return fmt::format(
      R"CUDA(template <class T> struct alignas({width} * sizeof(T) < 16 ? {width} * sizeof(T) : 16) V {{ T v[{width}]; }};
extern "C" __global__ void __launch_bounds__(256) kiln_elementwise_strided_vec(const P p) {{
  k_grid_dependency();
  bool err = false;
{scalars}  const i64 vectors = p.n / {width};
  for (i64 c = blockIdx.x * (i64)blockDim.x + threadIdx.x; c < vectors; c += (i64)gridDim.x * blockDim.x) {{
    i64 rem = c * {width};
{offsets}    for (int d = p.rank - 1; d >= 0; --d) {{
      const i64 size = p.sizes[d]; const i64 q = rem / size; const i64 idx = rem - q * size; rem = q;
{steps}    }}
{loads}    V<{output}> v0;
#pragma unroll
    for (int j = 0; j < {width}; ++j) {{
      const i64 i = c * {width} + j;
      (void)i;
{lanes}{value_and_store}    }}
    *(V<{output}>*)(({output}*)p.ptr[0] + o0) = v0;
  }}
  if (err) *p.err_word = p.err_token;
}}
)CUDA",
      "width"_a = vector_width(op), "scalars"_a = scalar_declarations(op),
      "offsets"_a = per_operand(operands, "    i64 o{0} = 0;\n"),
      "steps"_a = per_operand(operands, "      o{0} += idx * p.strides[{0}][d];\n"),
      "loads"_a = loads, "lanes"_a = lanes, "output"_a = storage_type(op.output),
      "value_and_store"_a = value_and_store(op, "      ", "v0.v[j]"));
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

std::string elementwise_source(const ElementwiseOp& op, KernelLayout layout) {
  std::string gather;
  if (op.gathered_input >= 0) {
    const std::size_t k = static_cast<std::size_t>(op.gathered_input);
    const DType d = op.inputs[k];
    const std::string at =
        fmt::format("((const {}*)p.ptr[{}])[o{} + (extra)]", storage_type(d), k + 1, k + 1);
    gather = fmt::format("#define GATHER(extra) {}\n", load_expression(d, at));
  }
  const std::size_t operands = op.inputs.size() + 1;
  std::string kernel;
  switch (layout) {
    case KernelLayout::Strided:
      // The flat index is split into coordinates of the merged dims.
      kernel =
          fmt::format(R"CUDA({head}    i64 rem = i;
{offsets}    for (int d = p.rank - 1; d >= 0; --d) {{
      const i64 size = p.sizes[d]; const i64 q = rem / size; const i64 idx = rem - q * size; rem = q;
{steps}    }}
{tail})CUDA",
                      "head"_a = kernel_head(op, "kiln_elementwise", "P"),
                      "offsets"_a = per_operand(operands, "    i64 o{0} = 0;\n"),
                      "steps"_a = per_operand(operands, "      o{0} += idx * p.strides[{0}][d];\n"),
                      "tail"_a = kernel_tail(op));
      break;
    case KernelLayout::Flat:  // each operand is read at the flat index
      kernel = fmt::format("{}{}{}", kernel_head(op, "kiln_elementwise_flat", "PF"),
                           per_operand(operands, "    const i64 o{0} = i;\n"), kernel_tail(op));
      break;
    case KernelLayout::Wide:
      kernel = vector_kernel(op);
      break;
    case KernelLayout::StridedWide:
      kernel = strided_vector_kernel(op);
      break;
  }
  return fmt::format("{}{}{}{}", kernel_prelude(), kParamsStructs, gather, kernel);
}

}  // namespace kiln::cuda
