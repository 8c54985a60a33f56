// The non-template functions behind Tensor<D, K> (the compile firewall): they check arguments,
// compute result shapes, pick the backend from the device and call the op. Templates in
// tensor.h only enforce rank and kind at compile time and forward here.
#pragma once

#include <cstdint>
#include <future>
#include <optional>
#include <utility>
#include <vector>

#include "kiln/data.h"
#include "kiln/device.h"
#include "kiln/distribution.h"
#include "kiln/options.h"
#include "kiln/primitive.h"
#include "kiln/scalar.h"

namespace kiln {

enum class Kind : std::uint8_t { Float, Int, Bool };
std::string_view kind_name(Kind kind) noexcept;

namespace detail {

using Prims = std::vector<Primitive>;
using PrimPair = std::pair<Primitive, Primitive>;

// The functions behind the Tensor methods ops.def generates (its form column): the signature
// follows from the form; src/tensor/generated.cpp checks the arguments and calls the backend.
#define KILN_DETAIL_FORM_UNARY(name) Primitive name(Primitive x);
#define KILN_DETAIL_FORM_BINARY(name) Primitive name(Primitive lhs, Primitive rhs);
#define KILN_DETAIL_FORM_SCALAR(name) Primitive name(Primitive x, Scalar value);
#define KILN_DETAIL_FORM_DIM(name) Primitive name(Primitive x, std::int64_t dim);
#define KILN_DETAIL_FORM_COMPARE KILN_DETAIL_FORM_BINARY
#define KILN_DETAIL_FORM_COMPARE_SCALAR KILN_DETAIL_FORM_SCALAR
#define KILN_DETAIL_FORM_PREDICATE KILN_DETAIL_FORM_UNARY
#define KILN_DETAIL_FORM_REDUCE KILN_DETAIL_FORM_UNARY
#define KILN_DETAIL_FORM_REDUCE_NONEMPTY KILN_DETAIL_FORM_UNARY
#define KILN_DETAIL_FORM_DIM_NONEMPTY KILN_DETAIL_FORM_DIM
#define KILN_DETAIL_FORM_MANUAL(name)
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_DETAIL_FORM_##form(name)
#include "kiln/detail/ops.def"
#undef KILN_OP
#undef KILN_DETAIL_FORM_UNARY
#undef KILN_DETAIL_FORM_BINARY
#undef KILN_DETAIL_FORM_SCALAR
#undef KILN_DETAIL_FORM_DIM
#undef KILN_DETAIL_FORM_COMPARE
#undef KILN_DETAIL_FORM_COMPARE_SCALAR
#undef KILN_DETAIL_FORM_PREDICATE
#undef KILN_DETAIL_FORM_REDUCE
#undef KILN_DETAIL_FORM_REDUCE_NONEMPTY
#undef KILN_DETAIL_FORM_DIM_NONEMPTY
#undef KILN_DETAIL_FORM_MANUAL

// ---- checks shared by the templates ----
// Throws unless p has the rank the static type promises and a dtype of the kind.
void check_primitive(const Primitive& p, std::size_t rank, Kind kind, const char* op);
// Normalises a possibly negative dim against rank; InvalidArgument if out of range.
std::int64_t normalize_dim(std::int64_t dim, std::size_t rank, const char* op);

// ---- creation ----
Primitive from_data(TensorData data, Device device, Kind kind, std::size_t rank);
Primitive full(Shape shape, Scalar value, std::optional<DType> dtype, Device device, Kind kind);
Primitive empty(Shape shape, std::optional<DType> dtype, Device device, Kind kind);
// What a default-constructed Tensor holds: one shared tensor of shape [0, ..., 0] (rank dims) on
// the CPU, per rank and kind.
Primitive placeholder(std::size_t rank, Kind kind);
Primitive arange(std::int64_t start, std::int64_t end, std::int64_t step,
                 std::optional<DType> dtype, Device device, Kind kind);
Primitive linspace(double start, double end, std::int64_t count, std::optional<DType> dtype,
                   Device device);
Primitive eye(std::int64_t rows, std::int64_t columns, std::optional<DType> dtype, Device device,
              Kind kind);
Primitive random(Shape shape, Distribution distribution, std::optional<DType> dtype, Device device,
                 Kind kind);

// ---- reading, moving, converting ----
TensorData into_data(Primitive x);
std::future<TensorData> into_data_async(Primitive x);
// The value of a one-element tensor (InvalidArgument for any other element count).
Scalar into_scalar(const Primitive& x);
std::vector<TensorData> read_many(Prims xs);
Primitive to_device(Primitive x, Device device);
// dst's storage takes src's values (Tensor::assign).
void assign(const Primitive& dst, Primitive src);
// Converts to dtype; the kind of the result is the dtype's kind.
Primitive cast(Primitive x, DType dtype);
// Converts to the device's default dtype of kind.
Primitive to_kind(Primitive x, Kind kind);

// ---- arithmetic extras ----
Primitive clamp(Primitive x, std::optional<Scalar> min, std::optional<Scalar> max);
Primitive matmul(Primitive lhs, Primitive rhs);
Primitive cross(Primitive lhs, Primitive rhs, std::int64_t dim);

// ---- reductions ----
Primitive var_dim(Primitive x, std::int64_t dim, std::int64_t correction);
Primitive norm_dim(Primitive x, double p, std::int64_t dim);
Primitive norm(Primitive x, double p);
Primitive argmax(Primitive x, std::int64_t dim);
Primitive argmin(Primitive x, std::int64_t dim);
PrimPair max_dim_with_indices(Primitive x, std::int64_t dim);
PrimPair min_dim_with_indices(Primitive x, std::int64_t dim);
Primitive any(Primitive x);
Primitive all(Primitive x);
Primitive any_dim(Primitive x, std::int64_t dim);
Primitive all_dim(Primitive x, std::int64_t dim);

// ---- indexing ----
Primitive gather(std::int64_t dim, Primitive x, Primitive indices);
Primitive scatter(std::int64_t dim, Primitive x, Primitive indices, Primitive values,
                  IndexingUpdate update);
Primitive select(Primitive x, std::int64_t dim, Primitive indices);
Primitive select_assign(Primitive x, std::int64_t dim, Primitive indices, Primitive values,
                        IndexingUpdate update);
Primitive gather_nd(Primitive x, Primitive indices, std::size_t result_rank);
Primitive scatter_nd(Primitive x, Primitive indices, Primitive values, IndexingUpdate update);
Primitive slice(Primitive x, const std::vector<Slice>& slices);
Primitive slice_assign(Primitive x, const std::vector<Slice>& slices, Primitive values);
Primitive slice_fill(Primitive x, const std::vector<Slice>& slices, Scalar value);
Primitive narrow(Primitive x, std::int64_t dim, std::int64_t start, std::int64_t length);
Primitive mask_where(Primitive x, Primitive mask, Primitive values);
Primitive mask_fill(Primitive x, Primitive mask, Scalar value);
Primitive mask_select(Primitive x, Primitive mask);
Primitive argwhere(Primitive mask);

// ---- layout ----
Primitive reshape(Primitive x, Shape shape, std::size_t expected_rank);
Primitive expand(Primitive x, Shape shape);
Primitive permute(Primitive x, std::vector<std::int64_t> axes);
Primitive swap_dims(Primitive x, std::int64_t dim1, std::int64_t dim2);
Primitive transpose(Primitive x);
Primitive flip(Primitive x, std::vector<std::int64_t> axes);
Primitive squeeze(Primitive x, std::int64_t dim);
Primitive squeeze_all(Primitive x, std::size_t expected_rank);
Primitive unsqueeze(Primitive x, std::int64_t dim);
Primitive flatten(Primitive x, std::int64_t start_dim, std::int64_t end_dim);
Primitive cat(Prims xs, std::int64_t dim);
Primitive stack(Prims xs, std::int64_t dim);
Primitive repeat(Primitive x, std::vector<std::int64_t> times);
Primitive repeat_dim(Primitive x, std::int64_t dim, std::int64_t times);
Prims chunk(Primitive x, std::int64_t chunks, std::int64_t dim);
Prims split(Primitive x, std::int64_t split_size, std::int64_t dim);
Prims split_sizes(Primitive x, std::vector<std::int64_t> sizes, std::int64_t dim);
Primitive unfold(Primitive x, std::int64_t dim, std::int64_t size, std::int64_t step);

// ---- sorting ----
Primitive sort(Primitive x, std::int64_t dim, bool descending);
PrimPair sort_with_indices(Primitive x, std::int64_t dim, bool descending);
Primitive argsort(Primitive x, std::int64_t dim, bool descending);
PrimPair topk_with_indices(Primitive x, std::int64_t k, std::int64_t dim, bool largest);

// ---- activations ----
Primitive relu(Primitive x);
Primitive gelu(Primitive x);
Primitive silu(Primitive x);
Primitive leaky_relu(Primitive x, double negative_slope);
Primitive prelu(Primitive x, Primitive alpha);
Primitive hard_sigmoid(Primitive x, double alpha, double beta);
Primitive log_sigmoid(Primitive x);
Primitive softmax(Primitive x, std::int64_t dim);
Primitive log_softmax(Primitive x, std::int64_t dim);
Primitive softmin(Primitive x, std::int64_t dim);
// logsumexp(row) - row[target] of logits [rows, classes] and integer target [rows] (ops.def);
// f32 for 16-bit logits.
Primitive softmax_cross_entropy(Primitive logits, Primitive target);

// ---- module ops ----
// dx and dgamma of layer_norm over the last dim given its output's gradient (ops.def).
PrimPair layer_norm_backward(Primitive x, Primitive gamma, Primitive grad, double epsilon);
Primitive conv(Primitive x, Primitive weight, std::optional<Primitive> bias, ConvOptions options,
               std::size_t spatial_dims);
Primitive conv_transpose(Primitive x, Primitive weight, std::optional<Primitive> bias,
                         ConvTransposeOptions options, std::size_t spatial_dims);
Primitive max_pool(Primitive x, PoolOptions options, std::size_t spatial_dims);
PrimPair max_pool_with_indices(Primitive x, PoolOptions options, std::size_t spatial_dims);
Primitive avg_pool(Primitive x, PoolOptions options, std::size_t spatial_dims);
Primitive adaptive_avg_pool(Primitive x, std::vector<std::int64_t> output_size);
Primitive embedding(Primitive weights, Primitive indices);
Primitive interpolate(Primitive x, std::vector<std::int64_t> output_size,
                      InterpolateOptions options);
Primitive unfold_patches(Primitive x, UnfoldOptions options);
Primitive fold_patches(Primitive x, std::vector<std::int64_t> output_size, UnfoldOptions options);
Primitive linear(Primitive x, Primitive weight, std::optional<Primitive> bias);  // weight [in, out]
// module::linear: weight [out, in], PyTorch's layout.
Primitive linear_out_in(Primitive x, Primitive weight, std::optional<Primitive> bias);
Primitive layer_norm(Primitive x, Primitive gamma, std::optional<Primitive> beta, double epsilon);
Primitive batch_norm(Primitive x, Primitive gamma, Primitive beta, Primitive mean,
                     Primitive variance, double epsilon);
Primitive attention(Primitive query, Primitive key, Primitive value, std::optional<Primitive> mask,
                    std::optional<Primitive> bias, AttentionOptions options);

// ---- quantization ----
// x's values encoded in scheme's blocks along the last dim (a QFloat tensor of x's shape).
Primitive quantize(Primitive x, QuantScheme scheme);
// A QFloat tensor's values decoded to the float dtype.
Primitive dequantize(Primitive x, DType dtype);
// x's values as scheme's blocks decode them, in x's dtype, with the identity's gradient.
Primitive fake_quantize(Primitive x, QuantScheme scheme);

// ---- printing ----
std::string to_string(const Primitive& x);

}  // namespace detail
}  // namespace kiln
