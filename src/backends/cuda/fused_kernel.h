// One generated kernel for a run of elementwise ops of a fused group (cuda_fused.cpp captures
// them). The ops are the elementwise family's own descriptions (ElementwiseOp: expression,
// dtypes, scalars), chained: an op reads input tensors (loaded once per element) and the values
// of ops before it, which stay in registers. Only the values named as outputs are stored.
//
// A value in registers is kept in its dtype's storage form (f16 as its 16-bit word), so an op
// that reads it sees what it would have loaded from the eager op's output: f16 and bf16 results
// agree bit for bit; in f32 and f64 NVRTC may contract a multiply and the next op's add into one
// FMA (one rounding fewer). An op that reads an operand as another dtype of the same
// width (mask_where moves raw bits) reinterprets the word.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/elementwise.h"

namespace kiln::cuda {

inline constexpr std::size_t kMaxFusedInputs = 8;
inline constexpr std::size_t kMaxFusedOutputs = 6;
inline constexpr std::size_t kMaxFusedScalars = 12;
inline constexpr std::size_t kMaxFusedFailures = 8;  // ops that can set the error flag
inline constexpr std::size_t kMaxFusedDims = 6;      // after merging dims (else op by op)

// Values are numbered inputs first (0 .. inputs.size() - 1), then one per op.
struct FusedKernelOp {
  ElementwiseOp op;                        // its expression, the dtypes it reads and yields
  std::array<std::int32_t, 3> operands{};  // value ids, op.inputs.size() of them
  std::int32_t first_scalar = 0;           // its scalars are s[first_scalar ...]
  std::int32_t failure = -1;               // its error flag's index, -1 when it cannot fail
};

struct FusedKernel {
  std::vector<DType> inputs;  // dtype of each input tensor
  std::vector<FusedKernelOp> ops;
  struct Output {
    std::int32_t value;
    DType dtype;  // the tensor written (the op's declared output, or a dtype of its width)
  };
  std::vector<Output> outputs;

  std::int32_t value_of_op(std::size_t k) const noexcept {
    return static_cast<std::int32_t>(inputs.size() + k);
  }
};

// Elements each thread of the strided kernel (kiln_fused) takes.
std::int64_t fused_strided_run() noexcept;
// Elements per vector of the wide-load kernel: 16 bytes of the widest tensor, 4 to 16.
std::int64_t fused_vector_width(const FusedKernel& kernel) noexcept;
// What the source depends on: the cache key of the module.
std::string fused_kernel_key(const FusedKernel& kernel);
// A module with the kernel of one layout (elementwise.h: each compiled when first launched):
// kiln_fused (Strided: any strides), kiln_fused_flat (Flat: every input contiguous and of the
// iteration shape) or kiln_fused_vec (Wide: flat, every pointer on a 16-byte vector).
std::string fused_kernel_source(const FusedKernel& kernel, KernelLayout layout);

// A module with kiln_fused_rows (FusedParams): the merged iteration shape [rows, cols], cols a
// multiple of width, every input as modes[k] says: 'f' row-major of that shape, 'r' one row
// broadcast over the rows (strides 0, 1), 'c' one value per row (strides s, 0); every 'f' and 'r'
// pointer and every output on a whole vector. One vector of each output per thread.
std::string fused_rows_source(const FusedKernel& kernel, std::string_view modes,
                              std::int64_t width);
// Elements per vector of kiln_fused_rows: 16 bytes of the widest 'f' or 'r' input or output, 4
// to 16 ('c' inputs are one scalar a vector: a bf16 row scaled by f32 row statistics moves 16
// bytes a load, not 8). Inputs past the end of modes count whole (fused_vector_width: none).
std::int64_t fused_rows_width(const FusedKernel& kernel, std::string_view modes) noexcept;

// A captured chain as the input of a reduction or softmax along a dim (the capture's tail,
// kernel_capture.h). Their kernels read that input by lines along the dim: chain_line(t, base)
// finds, once per line, the offsets in every input of the line's element 0 (flat index base in
// the iteration shape); chain_at(t, line, j, step, first) evaluates the chain at element j, whose
// offsets are those plus j times each input's stride along the dim (t.along) and whose flat index
// is base + j * step. So the input is never written; kernel.outputs (values still needed after
// the group) are stored at that flat index when first is set (the first read of the element;
// softmax's long rows read it twice), and errors are reported on every read.
struct FusedLoad {
  FusedKernel kernel;
  std::int32_t value = 0;    // the value the tail reads
  DType dtype = DType::F32;  // the tail's input dtype (the value's, or one of its width)
  bool flat = false;         // every input contiguous of the iteration shape: offsets = base
  // fused_load_key(*this) where its builder keeps the load to launch again (KernelCapture);
  // empty: made at each launch.
  std::string key;
};

// What fused_load_source depends on (part of the tail kernels' cache keys).
std::string fused_load_key(const FusedLoad& load);
// load.key, or fused_load_key(load) where it is empty.
inline std::string key_of(const FusedLoad& load) {
  return load.key.empty() ? fused_load_key(load) : load.key;
}
// Device code: structs FP and FT (FusedParams, FusedTailParams), struct Line, chain_line and
// chain_at, which returns the value's word as load.dtype's storage type.
std::string fused_load_source(const FusedLoad& load);

// The launch parameters (structs FP and FF of the generated source mirror them).
struct FusedParams {
  std::int64_t n;
  std::int32_t rank;
  std::int64_t sizes[kMaxFusedDims];
  std::int64_t strides[kMaxFusedInputs][kMaxFusedDims];
  std::uint64_t in[kMaxFusedInputs];
  std::uint64_t out[kMaxFusedOutputs];
  std::uint64_t s[kMaxFusedScalars];
  std::uint64_t error_word;
  std::uint32_t tokens[kMaxFusedFailures];
};
struct FusedFlatParams {
  std::int64_t n;
  std::uint64_t in[kMaxFusedInputs];
  std::uint64_t out[kMaxFusedOutputs];
  std::uint64_t s[kMaxFusedScalars];
  std::uint64_t error_word;
  std::uint32_t tokens[kMaxFusedFailures];
};

// A chain read along a dim by a tail (struct FT of fused_load_source mirrors it): the chain's
// parameters, then each input's stride along that dim (0 where it broadcasts).
struct FusedTailParams {
  FusedParams chain;
  std::int64_t along[kMaxFusedInputs];
};

// Elementwise ops on each result of a reduction that reads a tensor (a capture's tail and its
// epilogue, kernel_capture.h): value 0 of kernel is the result itself (kernel.inputs[0], the
// reduction's output dtype), the other inputs are tensors read at the result's element through
// FusedParams' merged dims and strides (the result's shape); outputs are stored at the result's
// flat index. Device code: struct FP and fused_epilogue(const FP& e, i64 i, S0 r), where S0 is
// input 0's storage type.
std::string fused_epilogue_source(const FusedKernel& kernel);

}  // namespace kiln::cuda
