// The reduction family: a value of x's elements along one dim, kept with size 1. Generated
// kernels per (reducer, dtypes), one module per entry point:
//   lines   a warp or a block per contiguous line (or per chunk of a long one), 16-byte loads
//           after an aligned head, warp shuffles; full reductions are one line of every element
//   columns strided lines: neighbouring threads on neighbouring outputs (coalesced, several
//           outputs per thread with one vector load when aligned), a block's warps on
//           different rows of the line, long lines cut into chunks across blocks
//   finish  the chunks' partial accumulators of each output combined in a fixed order (a warp
//           or a block per output): deterministic, no atomics
// Floats accumulate in double and integers in wrapping 64-bit arithmetic, as on the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/shape.h"

namespace kiln::cuda {

inline constexpr int kReduceMaxDims = 12;  // kept dims after merging

// A reduction: its name (part of its kernels' cache keys) and the generated source of its
// accumulator for an input and output dtype: `struct Acc`, `Acc init()`, `step(Acc&, x, index)`,
// `combine(Acc&, const Acc& later)` and `write(const P&, output, const Acc&)`. The built-in ones
// are Reducer::Sum and its kin (reduce_source.cpp); an op file may define its own.
struct Reducer {
  const char* name;
  std::string (*accumulator)(DType dtype, DType out_dtype);
  bool needs_elements = false;  // an empty dim is an error rather than init()'s value

  static const Reducer Sum, Mean, Prod, Max, Min, ArgMax, ArgMin, Any, All, LogSumExp;
  friend bool operator==(const Reducer&, const Reducer&) = default;
};

// The entry points of a reducer's kernels (each compiled as its own module).
enum class ReduceKernel { LinesWarp, LinesBlock, Columns, ColumnsVector, FinishWarp, FinishBlock };

// Mirrors struct P of the generated source (reduce_source.cpp): same members, same order.
struct ReduceParams {
  std::int64_t outputs, length, reduce_stride, chunks, chunk_length;
  std::int32_t rank, lanes;  // lanes: rows of a line read at once by a Columns block
  std::int64_t sizes[kReduceMaxDims];
  std::int64_t strides[kReduceMaxDims];
  std::uint64_t in, out, scratch;
  double divisor;
};

struct ReduceLaunch {
  ReduceKernel kernel;
  unsigned blocks, threads;
};

// What reduce_dim launches for x (shape, strides, address of element 0) along dim: the
// parameters (in/out/scratch left 0), one or two launches, and the partials' scratch bytes.
// Pure host arithmetic, so tests and the host emulation check it without a GPU.
struct ReducePlan {
  ReduceParams params{};
  std::vector<ReduceLaunch> launches;
  std::int64_t scratch_bytes = 0;
};
ReducePlan plan_reduce(const Shape& shape, std::span<const std::int64_t> strides,
                       std::uint64_t address, std::int64_t dim, DType dtype, int sm_count,
                       const char* op);

struct FusedLoad;
struct FusedKernel;
// Generated source of one kernel of a reducer (exposed for tests that compile every kernel
// without a GPU); with fused, its input is the value of a fused chain (fused_kernel.h) instead
// of x in memory; with epilogue (not with fused), each result written is then the input 0 of
// those elementwise ops (fused_epilogue_source), whose parameters follow the reduction's.
std::string reduce_kernel_source(ReduceKernel kernel, const Reducer& reducer, DType dtype,
                                 DType out_dtype, const FusedLoad* fused = nullptr,
                                 const FusedKernel* epilogue = nullptr);
const char* reduce_kernel_name(ReduceKernel kernel);
inline const char* reducer_name(const Reducer& reducer) { return reducer.name; }

class CudaTensor;
struct Runtime;
using TensorPtr = std::shared_ptr<CudaTensor>;

// Reduces x along dim into a new tensor of out_dtype (the index dtype for ArgMax/ArgMin, Bool
// for Any/All, x's dtype otherwise). Under a kernel capture, where x is a value of the captured
// chain, the reduction becomes the capture's tail (kernel_capture.h): one kernel with the chain.
TensorPtr reduce_dim(Runtime& runtime, const CudaTensor& x, std::int64_t dim,
                     const Reducer& reducer, DType out_dtype, const char* op);

}  // namespace kiln::cuda
