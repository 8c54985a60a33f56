// Every collective of kiln/distributed.h on one rank of a group, checked against references
// computed in float64 from every rank's inputs (each rank draws all of them from fixed seeds).
// Run by the ranks of a thread group (collectives_test.cpp), of launched processes
// (processes_test.cpp) and by the conformance rows (conformance/rows_distributed.cpp).
#pragma once

#include <gtest/gtest.h>
#include <kiln/distributed.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "conformance/conformance.h"
#include "tensor/common.h"

namespace kiln::test {

// Rank r's input of a collective: shape [2 * size, 3], values exactly representable in dtype,
// small enough that no integer sum over 8 ranks wraps.
inline std::vector<double> rank_values(const Shape& shape, DType dtype, int rank) {
  const double lo = is_unsigned_int(dtype) ? 0 : is_int(dtype) ? -15 : -3;
  const double hi = is_unsigned_int(dtype) ? 30 : is_int(dtype) ? 15 : 3;
  return conformance::random_values(
      shape, dtype, 1000 + static_cast<std::uint64_t>(rank) * 7 + static_cast<std::uint64_t>(dtype),
      lo, hi);
}

// The element-wise reduction over every rank's values, as the collective computes it: f16 and
// bf16 in f32 and rounded once, an integer mean rounded down.
inline std::vector<double> reduced_values(const Shape& shape, DType dtype, int size,
                                          ReduceOperation operation) {
  std::vector<double> out = rank_values(shape, dtype, 0);
  for (int r = 1; r < size; ++r) {
    const std::vector<double> v = rank_values(shape, dtype, r);
    for (std::size_t i = 0; i < out.size(); ++i) {
      switch (operation) {
        case ReduceOperation::Max:
          out[i] = std::max(out[i], v[i]);
          break;
        case ReduceOperation::Min:
          out[i] = std::min(out[i], v[i]);
          break;
        default:
          out[i] += v[i];
      }
    }
  }
  if (operation == ReduceOperation::Mean) {
    for (double& x : out) x = is_int(dtype) ? std::floor(x / size) : x / size;
  }
  return conformance::representable(out, dtype);
}

inline std::string operation_name(ReduceOperation operation) {
  constexpr const char* names[] = {"sum", "mean", "max", "min"};
  return names[static_cast<int>(operation)];
}

// The rows of chunk `rank` (of `size`) of row-major values with `columns` columns.
inline std::vector<double> chunk_of(const std::vector<double>& values, int rank, int size) {
  const std::size_t per = values.size() / static_cast<std::size_t>(size);
  const auto from =
      values.begin() + static_cast<std::ptrdiff_t>(per * static_cast<std::size_t>(rank));
  return {from, from + static_cast<std::ptrdiff_t>(per)};
}

inline TensorData read(const Primitive& p) { return kiln::detail::into_data(p); }

// Every collective on group's rank, over every dtype (bool where values only move), on device;
// EXPECT failures name the rank, the collective and the dtype. Every rank of group calls it.
inline void check_every_collective(const ProcessGroup& group, const Device& device) {
  using conformance::expect_close;
  const int size = group.size();
  const int rank = group.rank();
  const Shape shape{2 * size, 3};
  const Shape chunk{2, 3};
  std::vector<DType> dtypes(std::begin(conformance::kNumericDTypes),
                            std::end(conformance::kNumericDTypes));
  dtypes.push_back(DType::Bool);
  for (DType dtype : dtypes) {
    const std::string on = " on rank " + std::to_string(rank) + ", " +
                           std::string(dtype_name(dtype)) + ", " + device.to_string();
    // f32 goes as a transposed view: the values travel in logical order whatever the layout.
    const conformance::Layout layout =
        dtype == DType::F32 ? conformance::Layout::Transposed : conformance::Layout::Contiguous;
    const Primitive x =
        conformance::make_primitive(rank_values(shape, dtype, rank), shape, dtype, layout, device);
    if (dtype != DType::Bool) {
      for (ReduceOperation operation : {ReduceOperation::Sum, ReduceOperation::Mean,
                                        ReduceOperation::Max, ReduceOperation::Min}) {
        const std::vector<double> all = reduced_values(shape, dtype, size, operation);
        expect_close(read(distributed::detail::all_reduce(x, group, operation)), shape, dtype, all,
                     "all_reduce(" + operation_name(operation) + ")" + on);
        expect_close(read(distributed::detail::reduce_scatter(x, group, operation)), chunk, dtype,
                     chunk_of(all, rank, size),
                     "reduce_scatter(" + operation_name(operation) + ")" + on);
      }
    }
    const int root = size - 1;
    expect_close(read(distributed::detail::broadcast(x, group, root)), shape, dtype,
                 rank_values(shape, dtype, root), "broadcast" + on);
    std::vector<double> gathered;
    for (int r = 0; r < size; ++r) {
      const std::vector<double> v = rank_values(shape, dtype, r);
      gathered.insert(gathered.end(), v.begin(), v.end());
    }
    expect_close(read(distributed::detail::all_gather(x, group)), Shape{2 * size * size, 3}, dtype,
                 gathered, "all_gather" + on);
    // Rank 0 and rank 1 swap their tensors, one direction after the other.
    if (size >= 2 && rank < 2) {
      const int peer = 1 - rank;
      for (int turn = 0; turn < 2; ++turn) {
        if (turn == rank) {
          distributed::detail::send(x, group, peer);
        } else {
          expect_close(read(distributed::detail::recv(shape, 2, kiln::detail::kind_of(dtype), group,
                                                      peer, dtype, device)),
                       shape, dtype, rank_values(shape, dtype, peer), "recv" + on);
        }
      }
    }
  }
  group.barrier();
}

}  // namespace kiln::test
