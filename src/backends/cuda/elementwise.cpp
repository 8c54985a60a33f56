#include "backends/cuda/elementwise.h"

#include <array>
#include <cstring>

#include "backends/cuda/kernel_source.h"

namespace kiln::cuda {

namespace {

// Mirrors struct P in the generated source; both are plain data with the same member order.
struct Params {
  std::int64_t n;
  std::int32_t rank;
  std::int32_t contiguous;
  std::int64_t sizes[kMaxDims];
  std::int64_t strides[kMaxOperands][kMaxDims];
  std::uint64_t pointers[kMaxOperands];
  std::uint64_t scalars[4];
  std::uint64_t error_word;
  std::uint32_t error_token;
};

constexpr const char* kParamsStruct = R"CUDA(
struct P {
  i64 n; int rank; int contiguous;
  i64 sizes[12]; i64 strides[4][12];
  u64 ptr[4]; u64 s[4];
  unsigned* err_word; unsigned err_token;
};
)CUDA";

std::string key_of(const ElementwiseOp& op) {
  std::string key = std::string("ew:") + std::to_string(op.gathered_input) + op.name + ":" + short_name(op.output) + ":" +
                    short_name(op.value_dtype);
  for (DType d : op.inputs) key += std::string(":") + short_name(d);
  key += "|";
  for (DType d : op.scalars) key += std::string(short_name(d)) + ",";
  key += "|" + op.expression;
  return key;
}

// Merges dims that every operand walks contiguously together and drops size-1 dims: fewer
// divisions per element, and most views become rank 1 or 2.
int collapse(const Shape& shape, std::array<Strides, kMaxOperands>& strides, std::size_t count,
             std::int64_t* sizes_out, std::int64_t (*strides_out)[kMaxDims]) {
  std::vector<std::int64_t> sizes;
  std::vector<std::array<std::int64_t, kMaxOperands>> st;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    std::array<std::int64_t, kMaxOperands> s{};
    for (std::size_t k = 0; k < count; ++k) s[k] = strides[k][d];
    if (!sizes.empty()) {
      bool mergeable = true;
      for (std::size_t k = 0; k < count; ++k) {
        if (st.back()[k] != s[k] * shape[d]) mergeable = false;
      }
      if (mergeable) {
        sizes.back() *= shape[d];
        st.back() = s;
        continue;
      }
    }
    sizes.push_back(shape[d]);
    st.push_back(s);
  }
  if (sizes.size() > kMaxDims) {
    detail::fail<InvalidArgument>("cuda", "a view of shape ", shape.to_string(), " has ",
                                  sizes.size(), " dims that cannot be merged; at most ", kMaxDims,
                                  " are supported on cuda");
  }
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    sizes_out[d] = sizes[d];
    for (std::size_t k = 0; k < count; ++k) strides_out[k][d] = st[d][k];
  }
  return static_cast<int>(sizes.size());
}

}  // namespace

std::uint64_t scalar_bits(double value, DType dtype) {
  std::uint64_t bits = 0;
  auto put = [&bits](auto v) { std::memcpy(&bits, &v, sizeof v); };
  switch (dtype) {
    case DType::F64: put(value); break;
    case DType::F32: case DType::F16: case DType::BF16: put(static_cast<float>(value)); break;
    default: put(static_cast<std::int64_t>(value)); break;
  }
  return bits;
}

std::uint64_t scalar_bits_int(std::int64_t value) { return static_cast<std::uint64_t>(value); }

std::string elementwise_source(const ElementwiseOp& op) {
  static const char* names[] = {"a", "b", "c"};
  std::string s = kernel_prelude() + kParamsStruct;
  if (op.gathered_input >= 0) {
    const std::size_t k = static_cast<std::size_t>(op.gathered_input);
    const DType d = op.inputs[k];
    s += "#define GATHER(extra) " +
         load_expression(d, "((const " + std::string(storage_type(d)) + "*)p.ptr[" +
                                std::to_string(k + 1) + "])[o" + std::to_string(k + 1) +
                                " + (extra)]") +
         "\n";
  }
  s += "extern \"C\" __global__ void __launch_bounds__(256) kiln_elementwise(const P p) {\n";
  s += "  bool err = false;\n";
  for (std::size_t k = 0; k < op.scalars.size(); ++k) {
    const std::string type = compute_type(op.scalars[k]);
    s += "  const " + type + " s" + std::to_string(k) + " = k_bits<" + type + ">(p.s[" +
         std::to_string(k) + "]);\n";
  }
  const std::size_t count = op.inputs.size() + 1;
  s += "  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < p.n; i += (i64)gridDim.x * blockDim.x) {\n";
  for (std::size_t k = 0; k < count; ++k) s += "    i64 o" + std::to_string(k) + " = i;\n";
  s += "    if (!p.contiguous) {\n      i64 rem = i;\n";
  for (std::size_t k = 0; k < count; ++k) s += "      o" + std::to_string(k) + " = 0;\n";
  s += "      for (int d = p.rank - 1; d >= 0; --d) {\n";
  s += "        const i64 size = p.sizes[d]; const i64 q = rem / size; const i64 idx = rem - q * size; rem = q;\n";
  for (std::size_t k = 0; k < count; ++k) {
    s += "        o" + std::to_string(k) + " += idx * p.strides[" + std::to_string(k) + "][d];\n";
  }
  s += "      }\n    }\n";
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    if (static_cast<int>(k) == op.gathered_input) continue;
    const DType d = op.inputs[k];
    const std::string at = "((const " + std::string(storage_type(d)) + "*)p.ptr[" +
                           std::to_string(k + 1) + "])[o" + std::to_string(k + 1) + "]";
    s += "    const " + std::string(compute_type(d)) + " " + names[k] + " = " +
         load_expression(d, at) + ";\n";
  }
  s += "    const " + std::string(compute_type(op.value_dtype)) + " value = (" + op.expression +
       ");\n";
  s += "    ((" + std::string(storage_type(op.output)) + "*)p.ptr[0])[o0] = " +
       store_expression(op.output, convert_expression(op.value_dtype, op.output, "value")) +
       ";\n  }\n";
  s += "  if (err) *p.err_word = p.err_token;\n}\n";
  return s;
}

void launch_elementwise(Runtime& runtime, const ElementwiseOp& op, const CudaTensor& out,
                        std::span<const CudaTensor* const> inputs,
                        std::span<const std::uint64_t> scalar_bits) {
  const Shape& shape = out.shape();
  const std::int64_t n = shape.num_elements();
  if (n == 0) return;
  Params params{};
  params.n = n;
  std::array<Strides, kMaxOperands> strides;
  strides[0] = out.strides();
  params.pointers[0] = out.data();
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    strides[k + 1] = broadcast_strides(*inputs[k], shape);
    params.pointers[k + 1] = inputs[k]->data();
  }
  const std::size_t count = inputs.size() + 1;
  params.rank = collapse(shape, strides, count, params.sizes, params.strides);
  bool contiguous = params.rank <= 1;
  for (std::size_t k = 0; k < count && params.rank == 1; ++k) {
    if (params.strides[k][0] != 1) contiguous = false;
  }
  params.contiguous = contiguous ? 1 : 0;
  for (std::size_t k = 0; k < scalar_bits.size() && k < 4; ++k) params.scalars[k] = scalar_bits[k];
  params.error_word = runtime.context.error_word();
  if (op.failure != nullptr) params.error_token = runtime.context.error_token(op.name, op.failure);
  CUfunction function = runtime.compiler.function(key_of(op), "kiln_elementwise",
                                                  [&] { return elementwise_source(op); });
  runtime.launch(op.name, function, runtime.blocks_for(n, 256), 256, &params);
}

}  // namespace kiln::cuda
