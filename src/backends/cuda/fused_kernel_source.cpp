// Source generation of fused elementwise kernels (no driver calls: the tests compile it with
// NVRTC on machines without a GPU).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "backends/cuda/fused_kernel.h"
#include "backends/cuda/kernel_source.h"

namespace kiln::cuda {

using namespace fmt::literals;

namespace {

constexpr const char* kOperandNames[] = {"a", "b", "c"};

// Structs FusedParams and FusedFlatParams (fused_kernel.h) mirror these; k_as reinterprets a
// value's word as another type of its width.
constexpr const char* kParamsStructs = R"CUDA(
struct FP {
  i64 n; int rank;
  i64 sizes[6]; i64 strides[8][6];
  u64 in[8]; u64 out[6]; u64 s[12];
  unsigned* err_word; unsigned tok[8];
};
struct FF {
  i64 n; u64 in[8]; u64 out[6]; u64 s[12];
  unsigned* err_word; unsigned tok[8];
};
template <class To, class From> __device__ __forceinline__ To k_as(From f) {
  static_assert(sizeof(To) == sizeof(From), "k_as keeps the width");
  union { From f; To t; } x; x.f = f; return x.t;
}
)CUDA";

static_assert(kMaxFusedDims == 6 && kMaxFusedInputs == 8 && kMaxFusedOutputs == 6 &&
                  kMaxFusedScalars == 12 && kMaxFusedFailures == 8,
              "kParamsStructs spells these sizes out");

char letter(DType d) noexcept { return static_cast<char>('A' + static_cast<int>(d)); }

// The dtype a value's register holds (its storage form).
DType slot_dtype(const FusedKernel& kernel, std::int32_t value) {
  const auto v = static_cast<std::size_t>(value);
  return v < kernel.inputs.size() ? kernel.inputs[v]
                                  : kernel.ops[v - kernel.inputs.size()].op.output;
}

// value's register as dtype's storage type.
std::string word_as(const FusedKernel& kernel, std::int32_t value, DType dtype) {
  const DType held = slot_dtype(kernel, value);
  if (std::string_view(storage_type(held)) == storage_type(dtype)) return fmt::format("v{}", value);
  return fmt::format("k_as<{}>(v{})", storage_type(dtype), value);
}

// Every op of the kernel on the element whose inputs' words are v0 .. v(inputs - 1) and whose
// flat index is i: each op's word lands in its own register v<value>.
std::string element_body(const FusedKernel& kernel, std::string_view indent) {
  std::string body;
  for (std::size_t k = 0; k < kernel.ops.size(); ++k) {
    const FusedKernelOp& f = kernel.ops[k];
    const ElementwiseOp& op = f.op;
    std::string reads;
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      const DType d = op.inputs[j];
      reads += fmt::format("{}  const {} {} = {};\n", indent, compute_type(d), kOperandNames[j],
                           load_expression(d, word_as(kernel, f.operands[j], d)));
    }
    for (std::size_t j = 0; j < op.scalars.size(); ++j) {
      reads += fmt::format("{}  const {} s{} = S{};\n", indent, compute_type(op.scalars[j]), j,
                           f.first_scalar + static_cast<std::int32_t>(j));
    }
    body += fmt::format(
        "{indent}{storage} v{value};\n"
        "{indent}{{  // {name}\n"
        "{reads}"
        "{indent}  bool err = false;\n"
        "{indent}  const {type} value = ({expression});\n"
        "{indent}  v{value} = {store};\n"
        "{indent}  {flag};\n"
        "{indent}}}\n",
        "indent"_a = indent, "storage"_a = storage_type(op.output),
        "value"_a = kernel.value_of_op(k), "name"_a = op.name, "reads"_a = reads,
        "type"_a = compute_type(op.value_dtype), "expression"_a = op.expression.view(),
        "store"_a =
            store_expression(op.output, convert_expression(op.value_dtype, op.output, "value")),
        "flag"_a = f.failure >= 0 ? fmt::format("e{0} = e{0} || err", f.failure) : "(void)err");
  }
  return body;
}

// The loads of every input at offsets o<k> (in registers), or o[k] (an array).
std::string input_loads(const FusedKernel& kernel, std::string_view indent, bool array = false) {
  std::string s;
  for (std::size_t k = 0; k < kernel.inputs.size(); ++k) {
    s += fmt::format("{0}const {1} v{2} = ((const {1}*)p.in[{2}])[{3}];\n", indent,
                     storage_type(kernel.inputs[k]), k,
                     array ? fmt::format("o[{}]", k) : fmt::format("o{}", k));
  }
  return s;
}

// The stores of every output at the flat index i.
std::string output_stores(const FusedKernel& kernel, std::string_view indent) {
  std::string s;
  for (std::size_t j = 0; j < kernel.outputs.size(); ++j) {
    const FusedKernel::Output& out = kernel.outputs[j];
    s += fmt::format("{}(({}*)p.out[{}])[i] = {};\n", indent, storage_type(out.dtype), j,
                     word_as(kernel, out.value, out.dtype));
  }
  return s;
}

// The loads, the body, the stores.
std::string element_step(const FusedKernel& kernel, std::string_view indent) {
  return input_loads(kernel, indent) + element_body(kernel, indent) + output_stores(kernel, indent);
}

// Error flags of the kernel: one per op that can fail.
std::int32_t failure_count(const FusedKernel& kernel) {
  std::int32_t failures = 0;
  for (const FusedKernelOp& f : kernel.ops) failures = std::max(failures, f.failure + 1);
  return failures;
}

// The wait for the launch ahead (LaunchOrder::Overlapping), the error flags and scalars, declared
// before the element loop; and the flags' report after it.
std::string kernel_head(const FusedKernel& kernel, bool wait = true) {
  std::string s = wait ? "  k_grid_dependency();\n" : "";  // launched LaunchOrder::Overlapping
  for (std::int32_t k = 0; k < failure_count(kernel); ++k)
    s += fmt::format("  bool e{} = false;\n", k);
  for (const FusedKernelOp& f : kernel.ops) {
    for (std::size_t j = 0; j < f.op.scalars.size(); ++j) {
      const char* type = compute_type(f.op.scalars[j]);
      s += fmt::format("  const {0} S{1} = k_bits<{0}>(p.s[{1}]);\n", type,
                       f.first_scalar + static_cast<std::int32_t>(j));
    }
  }
  return s;
}

std::string error_reports(const FusedKernel& kernel) {
  std::string s;
  for (std::int32_t k = 0; k < failure_count(kernel); ++k)
    s += fmt::format("  if (e{0}) *p.err_word = p.tok[{0}];\n", k);
  return s;
}

std::string kernel_end(const FusedKernel& kernel) { return error_reports(kernel) + "}\n"; }

std::string offsets(const FusedKernel& kernel, std::string_view init) {
  std::string s;
  for (std::size_t k = 0; k < kernel.inputs.size(); ++k)
    s += fmt::format("    {}i64 o{} = {};\n", init == "i" ? "const " : "", k, init);
  return s;
}

constexpr const char* kGridLoop =
    "for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < p.n; i += (i64)gridDim.x * "
    "blockDim.x)";

// Each warp takes 32 * kStridedRun consecutive elements, lane l the elements l, l + 32, ...:
// loads and stores stay coalesced, and a lane finds its element's coordinates (a division per
// dim) once, then steps 32 along the last dim while it stays in the same row. Below 2^31
// elements the divisions are 32-bit (a 64-bit division is several times dearer on the GPU).
// A lane finds every offset first and then issues every load before computing anything, so its
// kStridedRun loads are in flight at once (interleaved with the stores, the compiler could not
// move a load above an earlier store).
constexpr int kStridedRun = 4;

std::string strided_kernel(const FusedKernel& kernel) {
  std::string zero, unravel_steps, advance, keep, declare, loads, lanes;
  for (std::size_t k = 0; k < kernel.inputs.size(); ++k) {
    const char* type = storage_type(kernel.inputs[k]);
    zero += fmt::format(" o{} = 0;", k);
    unravel_steps += fmt::format(" o{0} += idx * p.strides[{0}][d];", k);
    advance += fmt::format(" o{0} += 32 * p.strides[{0}][k_last];", k);
    declare +=
        fmt::format("    i64 k_o{}[{}];\n    {} w{}[{}];\n", k, kStridedRun, type, k, kStridedRun);
    keep += fmt::format(" k_o{0}[k_step] = o{0};", k);
    loads += fmt::format(" w{0}[k_step] = ((const {1}*)p.in[{0}])[k_o{0}[k_step]];", k, type);
    lanes += fmt::format("        const {} v{} = w{}[k_step];\n", type, k, k);
  }
  const auto unravel = [&](const char* type) {
    return fmt::format(
        "{{ {type} rem = ({type})i;{zero}\n"
        "            for (int d = k_last; d >= 0; --d) {{\n"
        "              const {type} size = ({type})p.sizes[d]; const {type} q = rem / size;\n"
        "              const i64 idx = (i64)(rem - q * size); rem = q;\n"
        "              if (d == k_last) k_idx = idx;{steps}\n"
        "            }} }}",
        "type"_a = type, "zero"_a = zero, "steps"_a = unravel_steps);
  };
  return fmt::format(
      R"CUDA(extern "C" __global__ void __launch_bounds__(256) kiln_fused(const FP p) {{
{head}  const int k_last = p.rank - 1;
  const i64 k_inner = p.sizes[k_last];
  const bool k_narrow = p.n <= 0x7fffffff;
  const i64 k_runs = (p.n + {span} - 1) / {span};
  const i64 k_warps = ((i64)gridDim.x * blockDim.x) >> 5;
  for (i64 k_run = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5; k_run < k_runs; k_run += k_warps) {{
    const i64 k_first = k_run * {span} + (threadIdx.x & 31);
{declare}    {{
      i64 i = k_first, k_idx = 0;
{offsets}#pragma unroll
      for (int k_step = 0; k_step < {run}; ++k_step) {{
        if (i < p.n && (k_step == 0 || k_idx >= k_inner)) {{
          if (k_narrow) {narrow} else {wide}
        }}
       {keep}
        i += 32; k_idx += 32;{advance}
      }}
    }}
#pragma unroll
    for (int k_step = 0; k_step < {run}; ++k_step) {{
      if (k_first + 32 * k_step < p.n) {{{loads} }}
    }}
#pragma unroll
    for (int k_step = 0; k_step < {run}; ++k_step) {{
      const i64 i = k_first + 32 * k_step;
      if (i < p.n) {{
{lanes}{body}{stores}      }}
    }}
  }}
{end})CUDA",
      "head"_a = kernel_head(kernel), "span"_a = 32 * kStridedRun, "run"_a = kStridedRun,
      "declare"_a = declare, "offsets"_a = offsets(kernel, "0"), "narrow"_a = unravel("unsigned"),
      "wide"_a = unravel("i64"), "keep"_a = keep, "advance"_a = advance, "loads"_a = loads,
      "lanes"_a = lanes, "body"_a = element_body(kernel, "        "),
      "stores"_a = output_stores(kernel, "        "), "end"_a = kernel_end(kernel));
}

std::string flat_kernel(const FusedKernel& kernel) {
  return fmt::format(
      R"CUDA(extern "C" __global__ void __launch_bounds__(256) kiln_fused_flat(const FF p) {{
{head}  {loop} {{
{offsets}{step}  }}
{end})CUDA",
      "head"_a = kernel_head(kernel), "loop"_a = kGridLoop, "offsets"_a = offsets(kernel, "i"),
      "step"_a = element_step(kernel, "    "), "end"_a = kernel_end(kernel));
}

// Each thread moves one vector (16 bytes of the widest tensor) of every input and output per
// step; the elements past the last whole vector take the scalar loop.
std::string vector_kernel(const FusedKernel& kernel) {
  std::string loads, stores, outputs;
  for (std::size_t k = 0; k < kernel.inputs.size(); ++k) {
    loads += fmt::format("    const V<{0}> w{1} = ((const V<{0}>*)p.in[{1}])[vec];\n",
                         storage_type(kernel.inputs[k]), k);
  }
  for (std::size_t j = 0; j < kernel.outputs.size(); ++j) {
    const char* type = storage_type(kernel.outputs[j].dtype);
    outputs += fmt::format("    V<{}> y{};\n", type, j);
    stores += fmt::format("    ((V<{}>*)p.out[{}])[vec] = y{};\n", type, j, j);
  }
  return fmt::format(
      R"CUDA(template <class T> struct alignas({width} * sizeof(T) < 16 ? {width} * sizeof(T) : 16) V {{ T v[{width}]; }};
extern "C" __global__ void __launch_bounds__(1024) kiln_fused_vec(const FF p) {{
{head}  const i64 threads = (i64)gridDim.x * blockDim.x;
  const i64 vectors = p.n / {width};
  for (i64 vec = blockIdx.x * (i64)blockDim.x + threadIdx.x; vec < vectors; vec += threads) {{
{loads}{outputs}#pragma unroll
    for (int lane = 0; lane < {width}; ++lane) {{
      const i64 i = vec * {width} + lane;
      (void)i;
{lanes_body}    }}
{stores}  }}
  for (i64 i = vectors * {width} + blockIdx.x * (i64)blockDim.x + threadIdx.x; i < p.n; i += threads) {{
{offsets}{step}  }}
{end})CUDA",
      "width"_a = fused_vector_width(kernel), "head"_a = kernel_head(kernel), "loads"_a = loads,
      "outputs"_a = outputs,
      "lanes_body"_a =
          [&] {
            // The input words of this lane, every op, then the outputs' lanes.
            std::string s;
            for (std::size_t k = 0; k < kernel.inputs.size(); ++k) {
              s += fmt::format("      const {0} v{1} = w{1}.v[lane];\n",
                               storage_type(kernel.inputs[k]), k);
            }
            s += element_body(kernel, "      ");
            for (std::size_t j = 0; j < kernel.outputs.size(); ++j) {
              const FusedKernel::Output& out = kernel.outputs[j];
              s += fmt::format("      y{}.v[lane] = {};\n", j,
                               word_as(kernel, out.value, out.dtype));
            }
            return s;
          }(),
      "stores"_a = stores, "offsets"_a = offsets(kernel, "i"),
      "step"_a = element_step(kernel, "    "), "end"_a = kernel_end(kernel));
}

// Rows: the merged iteration shape is [rows, cols] with cols a multiple of the vector width, and
// each input either a whole row-major operand ('f'), one row broadcast over the rows ('r',
// strides (0, 1)) or one value per row broadcast along it ('c', strides (any, 0)): the bias of a
// linear layer, a softmax's statistics. Each thread moves one vector of every output, as the
// wide-load kernel; a 'c' input is one scalar load for the vector's row (a vector never crosses
// a row). One 32-bit division per vector below 2^31 elements.
std::string rows_kernel(const FusedKernel& kernel, std::string_view modes, std::int64_t width) {
  std::string loads, lanes, outputs, stores;
  for (std::size_t k = 0; k < kernel.inputs.size(); ++k) {
    const char* type = storage_type(kernel.inputs[k]);
    switch (modes[k]) {
      case 'f':
        loads += fmt::format("    const V<{0}> w{1} = ((const V<{0}>*)p.in[{1}])[vec];\n", type, k);
        lanes += fmt::format("      const {} v{} = w{}.v[lane];\n", type, k, k);
        break;
      case 'r':
        loads += fmt::format("    const V<{0}> w{1} = ((const V<{0}>*)p.in[{1}])[k_col / {2}];\n",
                             type, k, width);
        lanes += fmt::format("      const {} v{} = w{}.v[lane];\n", type, k, k);
        break;
      default:  // 'c'
        loads += fmt::format(
            "    const {0} v{1} = ((const {0}*)p.in[{1}])[k_row * p.strides[{1}][0]];\n", type, k);
        break;
    }
  }
  for (std::size_t j = 0; j < kernel.outputs.size(); ++j) {
    const FusedKernel::Output& out = kernel.outputs[j];
    const char* type = storage_type(out.dtype);
    outputs += fmt::format("    V<{}> y{};\n", type, j);
    stores += fmt::format("    ((V<{}>*)p.out[{}])[vec] = y{};\n", type, j, j);
  }
  std::string body = element_body(kernel, "      ");
  for (std::size_t j = 0; j < kernel.outputs.size(); ++j) {
    const FusedKernel::Output& out = kernel.outputs[j];
    body += fmt::format("      y{}.v[lane] = {};\n", j, word_as(kernel, out.value, out.dtype));
  }
  return fmt::format(
      R"CUDA(template <class T> struct alignas({width} * sizeof(T) < 16 ? {width} * sizeof(T) : 16) V {{ T v[{width}]; }};
extern "C" __global__ void __launch_bounds__(1024) kiln_fused_rows(const FP p) {{
{head}  const i64 threads = (i64)gridDim.x * blockDim.x;
  const i64 vectors = p.n / {width};
  const i64 k_cols = p.sizes[1];
  const bool k_narrow = p.n <= 0x7fffffff;
  for (i64 vec = blockIdx.x * (i64)blockDim.x + threadIdx.x; vec < vectors; vec += threads) {{
    const i64 k_first = vec * {width};
    i64 k_row;
    if (k_narrow) k_row = (i64)((unsigned)k_first / (unsigned)k_cols); else k_row = k_first / k_cols;
    const i64 k_col = k_first - k_row * k_cols;
    (void)k_col;
{loads}{outputs}#pragma unroll
    for (int lane = 0; lane < {width}; ++lane) {{
      const i64 i = k_first + lane;
      (void)i;
{lanes}{body}    }}
{stores}  }}
{end})CUDA",
      "width"_a = width, "head"_a = kernel_head(kernel), "loads"_a = loads, "outputs"_a = outputs,
      "lanes"_a = lanes, "body"_a = body, "stores"_a = stores, "end"_a = kernel_end(kernel));
}

// fused_offsets(p, i, o): the offsets o[k] in every input of the element of flat index i: i
// itself when every input is flat, else i's coordinates in the merged dims of FP times each
// input's strides.
std::string offsets_function(const FusedKernel& kernel, bool flat) {
  std::string body;
  if (flat) {
    for (std::size_t k = 0; k < kernel.inputs.size(); ++k) body += fmt::format("  o[{}] = i;\n", k);
  } else {
    std::string steps;
    for (std::size_t k = 0; k < kernel.inputs.size(); ++k) {
      body += fmt::format("  o[{}] = 0;\n", k);
      steps += fmt::format("    o[{0}] += idx * p.strides[{0}][d];\n", k);
    }
    body += fmt::format(R"CUDA(  i64 rem = i;
  for (int d = p.rank - 1; d >= 0; --d) {{
    const i64 size = p.sizes[d]; const i64 q = rem / size; const i64 idx = rem - q * size; rem = q;
{steps}  }}
)CUDA",
                        "steps"_a = steps);
  }
  return fmt::format(
      "__device__ __forceinline__ void fused_offsets(const FP& p, i64 i, i64* o) {{\n{}}}\n", body);
}

// A line's element 0 and stepping along it; the chain at an element (see fused_kernel.h).
constexpr const char* kLines = R"CUDA(
struct FT { FP f; i64 along[8]; };
struct Line { i64 base; i64 o[KIN]; };
__device__ __forceinline__ Line chain_line(const FT& t, i64 base) {
  Line l;
  l.base = base;
  fused_offsets(t.f, base, l.o);
  return l;
}
__device__ __forceinline__ SV chain_at(const FT& t, const Line& l, i64 j, i64 step, bool first) {
  i64 o[KIN];
#pragma unroll
  for (int k = 0; k < KIN; ++k) o[k] = l.o[k] + j * t.along[k];
  return fused_value(t.f, o, l.base + j * step, first);
}
)CUDA";

}  // namespace

std::int64_t fused_strided_run() noexcept { return kStridedRun; }

std::int64_t fused_vector_width(const FusedKernel& kernel) noexcept {
  return fused_rows_width(kernel, {});
}

std::int64_t fused_rows_width(const FusedKernel& kernel, std::string_view modes) noexcept {
  std::size_t widest = 1;
  for (std::size_t k = 0; k < kernel.inputs.size(); ++k) {
    if (k >= modes.size() || modes[k] != 'c')
      widest = std::max(widest, dtype_size(kernel.inputs[k]));
  }
  for (const FusedKernel::Output& out : kernel.outputs)
    widest = std::max(widest, dtype_size(out.dtype));
  return std::clamp<std::int64_t>(16 / static_cast<std::int64_t>(widest), 4, 16);
}

std::string fused_kernel_key(const FusedKernel& kernel) {
  // Built on every run of a group (it is the compiled kernel's lookup key): plain appends into
  // one reserved string, no formatting.
  std::size_t size = 16 + kernel.inputs.size() + 8 * kernel.outputs.size();
  for (const FusedKernelOp& f : kernel.ops) size += f.op.expression.view().size() + 40;
  std::string key;
  key.reserve(size);
  const auto number = [&key](std::int64_t v) {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
    key.append(digits, end);
  };
  key += "fused:";
  for (DType d : kernel.inputs) key += letter(d);
  for (const FusedKernelOp& f : kernel.ops) {
    const std::string_view expression = f.op.expression.view();
    key += '|';
    number(static_cast<std::int64_t>(expression.size()));
    key += ':';
    key += expression;
    for (DType d : f.op.inputs) key += letter(d);
    key += letter(f.op.value_dtype);
    key += letter(f.op.output);
    key += '/';
    for (DType d : f.op.scalars) key += letter(d);
    for (std::size_t j = 0; j < f.op.inputs.size(); ++j) {
      key += ',';
      number(f.operands[j]);
    }
    key += ';';
    number(f.first_scalar);
    key += ';';
    number(f.failure);
  }
  key += "|>";
  for (const FusedKernel::Output& out : kernel.outputs) {
    key += letter(out.dtype);
    number(out.value);
    key += ',';
  }
  return key;
}

std::string fused_kernel_source(const FusedKernel& kernel, KernelLayout layout) {
  std::string body;
  switch (layout) {
    case KernelLayout::Strided:
      body = strided_kernel(kernel);
      break;
    case KernelLayout::Flat:
      body = flat_kernel(kernel);
      break;
    case KernelLayout::Wide:
      body = vector_kernel(kernel);
      break;
    case KernelLayout::StridedWide:
      detail::fail<InvalidArgument>("cuda", "fused kernels have no strided-vector layout");
  }
  return fmt::format("{}{}{}", kernel_prelude(), kParamsStructs, body);
}

std::string fused_rows_source(const FusedKernel& kernel, std::string_view modes,
                              std::int64_t width) {
  return fmt::format("{}{}{}", kernel_prelude(), kParamsStructs, rows_kernel(kernel, modes, width));
}

std::string fused_load_key(const FusedLoad& load) {
  return fmt::format("{}@{}{}{}", fused_kernel_key(load.kernel), load.value, letter(load.dtype),
                     load.flat ? 'f' : 's');
}

// fused_value runs once per element read: the wait for the launch ahead is the entry point's
// (each reduction and softmax kernel waits before its body). Made here too, per element, it was
// redundant, and its "memory" clobber kept the compiler from issuing a thread's loads together.
std::string fused_load_source(const FusedLoad& load) {
  const FusedKernel& kernel = load.kernel;
  return fmt::format(
      R"CUDA({structs}typedef {S} SV;
constexpr int KIN = {inputs};
{offsets}__device__ __forceinline__ SV fused_value(const FP& p, const i64* o, const i64 i, const bool first) {{
{head}{loads}{body}  if (first) {{
{stores}  }}
{reports}  return {value};
}}
{lines})CUDA",
      "structs"_a = kParamsStructs, "S"_a = storage_type(load.dtype),
      "inputs"_a = std::max<std::size_t>(1, kernel.inputs.size()),
      "offsets"_a = offsets_function(kernel, load.flat), "head"_a = kernel_head(kernel, false),
      "loads"_a = input_loads(kernel, "  ", true), "body"_a = element_body(kernel, "  "),
      "stores"_a = output_stores(kernel, "    "), "reports"_a = error_reports(kernel),
      "value"_a = word_as(kernel, load.value, load.dtype), "lines"_a = kLines);
}

std::string fused_epilogue_source(const FusedKernel& kernel) {
  // Input 0 is the reduction's result, in a register; the others are loaded at their offsets.
  std::string offsets, loads;
  for (std::size_t k = 1; k < kernel.inputs.size(); ++k) {
    offsets += fmt::format("    o{0} += idx * e.strides[{0}][d];\n", k);
    loads += fmt::format("  const {0} v{1} = ((const {0}*)e.in[{1}])[o{1}];\n",
                         storage_type(kernel.inputs[k]), k);
  }
  std::string declared;
  for (std::size_t k = 1; k < kernel.inputs.size(); ++k) declared += fmt::format(" o{} = 0,", k);
  if (!declared.empty()) declared = "  i64" + declared.substr(0, declared.size() - 1) + ";\n";
  // (The stores and reports name the parameters p.)
  return fmt::format(
      R"CUDA({structs}__device__ __forceinline__ void fused_epilogue(const FP& e, const i64 i, const {S0} r) {{
  const FP& p = e;
{head}{declared}  i64 rem = i;
  for (int d = e.rank - 1; d >= 0; --d) {{
    const i64 size = e.sizes[d]; const i64 q = rem / size; const i64 idx = rem - q * size; rem = q;
{offsets}  }}
  (void)rem;
  const {S0} v0 = r;
{loads}{body}{stores}{reports}}}
)CUDA",
      "structs"_a = kParamsStructs, "S0"_a = storage_type(kernel.inputs.at(0)),
      "head"_a = kernel_head(kernel, false), "declared"_a = declared, "offsets"_a = offsets,
      "loads"_a = loads, "body"_a = element_body(kernel, "  "),
      "stores"_a = output_stores(kernel, "  "), "reports"_a = error_reports(kernel));
}

}  // namespace kiln::cuda
