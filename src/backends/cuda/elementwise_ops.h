// Building blocks of the elementwise op methods: checks the dtype class an op accepts, picks
// the output (reusing an operand nobody else can see), and launches the generated kernel.
#pragma once

#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/elementwise.h"
#include "kiln/scalar.h"

namespace kiln::cuda {

// Which dtypes an op accepts.
enum class Accepts { Float, Int, Numeric, Bool, Any };
void check_accepts(DType dtype, Accepts accepts, const char* op);

// out = expression(a) elementwise; value of x's dtype unless result is given (e.g. Bool).
Primitive map_unary(CudaBackend& backend, Primitive x, const char* op, Accepts accepts,
                    Expression expression, std::optional<DType> result = std::nullopt);
// out = expression(a, b) with broadcasting; both operands of one dtype (the tensor layer's rule).
Primitive map_binary(CudaBackend& backend, Primitive lhs, Primitive rhs, const char* op,
                     Accepts accepts, Expression expression,
                     std::optional<DType> result = std::nullopt, const char* failure = nullptr);
// out = expression(a, s0[, s1]) with the scalars in x's compute type.
Primitive map_scalar(CudaBackend& backend, Primitive x, const char* op, Accepts accepts,
                     Expression expression, std::initializer_list<Scalar> scalars,
                     std::optional<DType> result = std::nullopt, const char* failure = nullptr);

// The unsigned integer dtype of dtype's width: copies and fills move raw bits.
DType raw_dtype(DType dtype);
// value converted to dtype the way `full` does, as raw bits (low bytes of the word).
std::uint64_t element_bits(const Scalar& value, DType dtype);
// value as the compute type of dtype (Scalar::as), as raw bits.
std::uint64_t compute_bits(const Scalar& value, DType dtype);

}  // namespace kiln::cuda
