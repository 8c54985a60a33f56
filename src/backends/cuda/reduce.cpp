#include "backends/cuda/reduce.h"

#include <algorithm>

#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_source.h"

namespace kiln::cuda {

namespace {

constexpr unsigned kBlock = 256;
constexpr std::size_t kScratchEntry = 32;  // bytes per partial accumulator (every Acc fits)

// Mirrors struct P of the generated source (reduce_source.cpp): same members, same order.
struct Params {
  std::int64_t outputs, length, reduce_stride, chunks, chunk_length;
  std::int32_t rank, pad;
  std::int64_t sizes[kMaxDims];
  std::int64_t strides[kMaxDims];
  std::uint64_t in, out, scratch;
  double divisor;
};

bool is_arg(Reducer r) { return r == Reducer::ArgMax || r == Reducer::ArgMin; }

const char* reducer_name(Reducer r) {
  switch (r) {
    case Reducer::Sum: return "sum";
    case Reducer::Mean: return "mean";
    case Reducer::Prod: return "prod";
    case Reducer::Max: return "max";
    case Reducer::Min: return "min";
    case Reducer::ArgMax: return "argmax";
    case Reducer::ArgMin: return "argmin";
    case Reducer::Any: return "any";
    case Reducer::All: return "all";
  }
  return "?";
}

}  // namespace


TensorPtr reduce_dim(Runtime& runtime, const CudaTensor& x, std::int64_t dim, Reducer reducer,
                     DType out_dtype, const char* op) {
  const std::size_t d = static_cast<std::size_t>(dim);
  Shape out_shape = x.shape();
  out_shape[d] = 1;
  TensorPtr out = runtime.make_tensor(out_dtype, out_shape, op);
  Params p{};
  p.outputs = out_shape.num_elements();
  p.length = x.shape()[d];
  p.reduce_stride = x.strides()[d];
  p.divisor = static_cast<double>(p.length);
  int rank = 0;
  for (std::size_t k = 0; k < x.rank(); ++k) {
    if (k == d || x.shape()[k] == 1) continue;
    if (rank == static_cast<int>(kMaxDims)) {
      detail::fail<InvalidArgument>(op, "at most ", kMaxDims, " dims are supported on cuda");
    }
    p.sizes[rank] = x.shape()[k];
    p.strides[rank] = x.strides()[k];
    ++rank;
  }
  p.rank = rank;
  p.in = x.data();
  p.out = out->data();
  if (p.outputs == 0) return out;
  if (p.length == 0 && is_arg(reducer)) {
    detail::fail<InvalidArgument>(op, "cannot take ", reducer_name(reducer), " of an empty dim");
  }
  const std::string key = std::string("reduce:") + reducer_name(reducer) + ":" +
                          short_name(x.dtype()) + ":" + short_name(out_dtype);
  auto source = [&] { return reduce_kernel_source(reducer, x.dtype(), out_dtype); };
  const std::int64_t sms = runtime.context.sm_count();
  // Contiguous lines: a block per line (or per chunk of a long line). Strided lines: a thread
  // per output, neighbouring threads on neighbouring outputs. Either way long lines are cut
  // into chunks until the GPU has enough work (2048 resident threads per SM).
  const bool block_per_line = p.reduce_stride == 1 && p.length > 32;
  std::int64_t chunks = 1;
  if (block_per_line) {
    if (p.outputs < 8 * sms) {
      chunks = std::min<std::int64_t>((p.length + 4095) / 4096, (8 * sms + p.outputs - 1) / p.outputs);
    }
  } else if (p.outputs < 2048 * sms) {
    chunks = std::min<std::int64_t>((p.length + 63) / 64, (2048 * sms + p.outputs - 1) / p.outputs);
  }
  chunks = std::max<std::int64_t>(chunks, 1);
  p.chunks = chunks;
  p.chunk_length = (p.length + chunks - 1) / chunks;
  TensorPtr scratch;
  if (chunks > 1) {
    scratch = runtime.make_tensor(DType::U8, Shape{p.outputs * chunks * std::int64_t(kScratchEntry)}, op);
    p.scratch = scratch->data();
  }
  if (block_per_line) {
    CUfunction block = runtime.compiler.function(key, "kiln_reduce_block", source);
    const std::int64_t blocks = std::min<std::int64_t>(p.outputs * chunks, std::int64_t(1) << 30);
    runtime.launch(op, block, static_cast<unsigned>(blocks), kBlock, &p);
  } else {
    CUfunction thread = runtime.compiler.function(key, "kiln_reduce_thread", source);
    runtime.launch(op, thread, runtime.blocks_for(p.outputs * chunks, kBlock), kBlock, &p);
  }
  if (chunks > 1) {
    CUfunction finish = runtime.compiler.function(key, "kiln_reduce_finish", source);
    runtime.launch(op, finish, runtime.blocks_for(p.outputs, kBlock), kBlock, &p);
  }
  return out;
}

}  // namespace kiln::cuda
