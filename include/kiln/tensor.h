// Tensor<D, K>: a tensor of rank D and kind K (Float, Int or Bool). Rank and kind are checked at
// compile time; shapes, dtypes and devices at run time (typed kiln::Error exceptions). The
// backend is chosen at run time by the tensor's Device. A Tensor is a cheap handle: copies share
// the data, and ops return new tensors (the CPU reuses a temporary's memory when it is the only
// owner, e.g. in `(a + b).exp()`).
//
//   Device dev = Device::cpu();
//   auto a = Tensor<2>::ones({64, 64}, dev);
//   auto c = a.matmul(a) + 1.0;
//   std::vector<float> v = c.into_data().to_vec<float>();
//   Tensor<2, Bool> m = a.greater_elem(0.5);
#pragma once

#include <array>
#include <cstdint>
#include <future>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/autodiff.h"
#include "kiln/detail/tensor_ops.h"

namespace kiln {

struct Float {
  static constexpr Kind kind = Kind::Float;
};
struct Int {
  static constexpr Kind kind = Kind::Int;
};
struct Bool {
  static constexpr Kind kind = Kind::Bool;
};

template <class K>
concept TensorKind = std::is_same_v<K, Float> || std::is_same_v<K, Int> || std::is_same_v<K, Bool>;
template <class K>
concept NumericKind = std::is_same_v<K, Float> || std::is_same_v<K, Int>;

template <std::size_t D, TensorKind K = Float>
class Tensor;

// A tensor whose rank is known only at run time (what reshape(Shape) returns); it converts to
// Tensor<N, K> for any N, checking the rank then.
template <TensorKind K>
class DynamicTensor {
 public:
  explicit DynamicTensor(Primitive p) : primitive_(std::move(p)) {}
  template <std::size_t N>
  operator Tensor<N, K>() const {  // NOLINT: implicit on purpose
    return Tensor<N, K>::from_primitive(primitive_);
  }
  template <std::size_t N>
  Tensor<N, K> as_rank() const {
    return Tensor<N, K>::from_primitive(primitive_);
  }
  const Shape& shape() const { return primitive_->shape(); }
  std::size_t rank() const { return primitive_->rank(); }
  DType dtype() const { return primitive_->dtype(); }
  Device device() const { return primitive_->device(); }
  std::int64_t num_elements() const { return shape().num_elements(); }
  TensorData into_data() const { return detail::into_data(primitive_); }
  const Primitive& primitive() const { return primitive_; }

 private:
  Primitive primitive_;
};

template <std::size_t D, TensorKind K>
class Tensor {
  static_assert(D >= 1, "kiln tensors have rank >= 1 (a scalar is Tensor<1> of shape [1])");

 public:
  using kind_type = K;
  static constexpr std::size_t rank_v = D;

  // An empty tensor: shape [0, ..., 0] on the CPU, what a variable holds until it is given a
  // value (`Tensor<1> loss; ... loss = step(x);`).
  template <std::size_t N = D>
  Tensor() requires(N >= 1) : primitive_(detail::placeholder(N, K::kind)) {}

  // ---- creation (dtype defaults to the device's default for K) ----
  static Tensor from_data(TensorData data, Device device = Device::default_device()) {
    return Tensor(detail::from_data(std::move(data), device, K::kind, D));
  }
  static Tensor zeros(const Shape& shape, Device device = Device::default_device(),
                      std::optional<DType> dtype = std::nullopt) {
    return full(shape, 0, device, dtype);
  }
  static Tensor ones(const Shape& shape, Device device = Device::default_device(),
                     std::optional<DType> dtype = std::nullopt) {
    return full(shape, 1, device, dtype);
  }
  static Tensor full(const Shape& shape, Scalar value, Device device = Device::default_device(),
                     std::optional<DType> dtype = std::nullopt) {
    check_shape_rank(shape, "full");
    return Tensor(detail::full(shape, value, dtype, device, K::kind));
  }
  // Uninitialised contents.
  static Tensor empty(const Shape& shape, Device device = Device::default_device(),
                      std::optional<DType> dtype = std::nullopt) {
    check_shape_rank(shape, "empty");
    return Tensor(detail::empty(shape, dtype, device, K::kind));
  }
  static Tensor random(const Shape& shape, Distribution distribution,
                       Device device = Device::default_device(),
                       std::optional<DType> dtype = std::nullopt) requires NumericKind<K> {
    check_shape_rank(shape, "random");
    return Tensor(detail::random(shape, distribution, dtype, device, K::kind));
  }
  // [start, end) with step; rank 1 only.
  static Tensor arange(std::int64_t start, std::int64_t end,
                       Device device = Device::default_device(),
                       std::int64_t step = 1) requires(D == 1 && NumericKind<K>) {
    return Tensor(detail::arange(start, end, step, std::nullopt, device, K::kind));
  }
  // count points from start to end inclusive.
  static Tensor linspace(
      double start, double end, std::int64_t count,
      Device device = Device::default_device()) requires(D == 1 && std::is_same_v<K, Float>) {
    return Tensor(detail::linspace(start, end, count, std::nullopt, device));
  }
  static Tensor eye(std::int64_t n,
                    Device device = Device::default_device()) requires(D == 2 && NumericKind<K>) {
    return Tensor(detail::eye(n, n, std::nullopt, device, K::kind));
  }
  static Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.device(), t.dtype()); }
  static Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.device(), t.dtype()); }
  static Tensor full_like(const Tensor& t, Scalar v) {
    return full(t.shape(), v, t.device(), t.dtype());
  }
  // Wraps a backend primitive, checking rank and kind.
  static Tensor from_primitive(Primitive p) {
    detail::check_primitive(p, D, K::kind, "Tensor::from_primitive");
    return Tensor(std::move(p));
  }

  // ---- metadata ----
  const Shape& shape() const noexcept { return primitive_->shape(); }
  std::array<std::int64_t, D> dims() const noexcept {
    std::array<std::int64_t, D> out;
    for (std::size_t i = 0; i < D; ++i) out[i] = shape()[i];
    return out;
  }
  static constexpr std::size_t rank() noexcept { return D; }
  std::int64_t num_elements() const noexcept { return shape().num_elements(); }
  DType dtype() const noexcept { return primitive_->dtype(); }
  Device device() const noexcept { return primitive_->device(); }
  const Primitive& primitive() const& noexcept { return primitive_; }
  Primitive primitive() && noexcept { return std::move(primitive_); }

  // ---- reading and moving ----
  TensorData into_data() const& { return detail::into_data(primitive_); }
  TensorData into_data() && { return detail::into_data(std::move(primitive_)); }
  TensorData to_data() const { return detail::into_data(primitive_); }
  std::future<TensorData> into_data_async() const { return detail::into_data_async(primitive_); }
  // The single element of a one-element tensor, as T (InvalidArgument for any other count).
  // Integers convert exactly; floats to integers truncate and saturate, as in cast.
  template <class T>
  T into_scalar() const {
    return detail::into_scalar(primitive_).template as<T>();
  }
  Tensor to_device(Device device) const { return Tensor(detail::to_device(primitive_, device)); }
  // Same kind, another dtype of that kind (DTypeMismatch otherwise). Values convert as in every
  // dtype conversion (cast, float_, int_, bool_): float -> int truncates toward zero and
  // saturates at the target's range (NaN -> 0); int -> int keeps the low bits (wraps);
  // anything -> bool is != 0; floats round to nearest even (16-bit ones through f32).
  Tensor cast(DType dtype) const { return Tensor(detail::cast(primitive_, check_cast(dtype))); }
  // Kind conversions (`float` and `int` are C++ keywords, hence the trailing underscore).
  Tensor<D, Float> float_() const { return kind_cast<Float>(); }
  Tensor<D, Float> float_(DType dtype) const;
  Tensor<D, Int> int_() const { return kind_cast<Int>(); }
  Tensor<D, Bool> bool_() const { return kind_cast<Bool>(); }

  // ---- quantization (<kiln/quant.h>) ----
  // The values encoded in scheme's blocks along the last dim: a QFloat tensor of the same shape
  // (ShapeMismatch unless the last dim is a whole number of blocks, InvalidArgument for a NaN or
  // infinite value, UnsupportedOperation for a scheme kiln decodes but cannot encode: Q2_K, Q3_K,
  // Q5_K, Q8_K). A product
  // whose weight it is reads its blocks (x.matmul(q.transpose()), module::linear, embedding);
  // every other op sees its values dequantized to f32, so q + x is a float tensor.
  Tensor quantize(const QuantScheme& scheme) const requires std::is_same_v<K, Float> {
    return Tensor(detail::quantize(primitive_, scheme));
  }
  // A QFloat tensor's values decoded to a float dtype (DTypeMismatch for any other tensor).
  Tensor dequantize(DType dtype = DType::F32) const requires std::is_same_v<K, Float> {
    return Tensor(detail::dequantize(primitive_, dtype));
  }
  // Fake quantization, for quantization-aware training: a float tensor in this tensor's dtype
  // holding the values scheme's blocks would decode to (quantize then dequantize, the errors of
  // quantize), whose gradient passes straight through to this tensor unchanged (the
  // straight-through estimator). On a device that holds no QFloat tensors (cuda) the blocks are
  // made on the host.
  Tensor fake_quantize(const QuantScheme& scheme) const requires std::is_same_v<K, Float> {
    return Tensor(detail::fake_quantize(primitive_, scheme));
  }

  // ---- maths, comparisons, logic, bitwise, reductions and scans: the ops whose form column in
  // ops.def names a method. Binary ops broadcast; comparisons give Bool; full reductions give
  // shape [1] and *_dim ones keep the dim with size 1; cumulative ops keep the shape. The kinds
  // column says which K may call each (F Float, I Int, B Bool). ----
#define KILN_TENSOR_KINDS_F std::is_same_v<K, Float>
#define KILN_TENSOR_KINDS_I std::is_same_v<K, Int>
#define KILN_TENSOR_KINDS_B std::is_same_v<K, Bool>
#define KILN_TENSOR_KINDS_FI NumericKind<K>
#define KILN_TENSOR_KINDS_FIB true
#define KILN_TENSOR_FORM_UNARY(name, allowed)                                         \
  Tensor name() const& requires(allowed) { return Tensor(detail::name(primitive_)); } \
  Tensor name() && requires(allowed) { return Tensor(detail::name(std::move(primitive_))); }
// An rvalue operand gives its handle up (a temporary of an expression, `p - g * lr`): nothing
// else then holds its value, which the CPU may overwrite in place and the fusion decorator need
// not write out. The same tensor on both sides is copied, not moved twice.
#define KILN_TENSOR_FORM_BINARY(name, allowed)                                \
  Tensor name(const Tensor& rhs) const& requires(allowed) {                   \
    return Tensor(detail::name(primitive_, rhs.primitive_));                  \
  }                                                                           \
  Tensor name(const Tensor& rhs) && requires(allowed) {                       \
    return Tensor(detail::name(std::move(primitive_), rhs.primitive_));       \
  }                                                                           \
  Tensor name(Tensor&& rhs) const& requires(allowed) {                        \
    return Tensor(detail::name(primitive_, rhs.take_primitive_unless(this))); \
  }                                                                           \
  Tensor name(Tensor&& rhs) && requires(allowed) {                            \
    Primitive r = rhs.take_primitive_unless(this);                            \
    return Tensor(detail::name(std::move(primitive_), std::move(r)));         \
  }
#define KILN_TENSOR_FORM_SCALAR(name, allowed)                                                   \
  Tensor name(Scalar v) const& requires(allowed) { return Tensor(detail::name(primitive_, v)); } \
  Tensor name(Scalar v) && requires(allowed) {                                                   \
    return Tensor(detail::name(std::move(primitive_), v));                                       \
  }
#define KILN_TENSOR_FORM_COMPARE(name, allowed)                             \
  Tensor<D, Bool> name(const Tensor& rhs) const requires(allowed) {         \
    return Tensor<D, Bool>::wrap(detail::name(primitive_, rhs.primitive_)); \
  }
#define KILN_TENSOR_FORM_COMPARE_SCALAR(name, allowed)         \
  Tensor<D, Bool> name(Scalar v) const requires(allowed) {     \
    return Tensor<D, Bool>::wrap(detail::name(primitive_, v)); \
  }
#define KILN_TENSOR_FORM_PREDICATE(name, allowed)           \
  Tensor<D, Bool> name() const requires(allowed) {          \
    return Tensor<D, Bool>::wrap(detail::name(primitive_)); \
  }
#define KILN_TENSOR_FORM_REDUCE(name, allowed)           \
  Tensor<1, K> name() const requires(allowed) {          \
    return Tensor<1, K>::wrap(detail::name(primitive_)); \
  }
#define KILN_TENSOR_FORM_DIM(name, allowed)               \
  Tensor name(std::int64_t dim) const requires(allowed) { \
    return Tensor(detail::name(primitive_, dim));         \
  }
#define KILN_TENSOR_FORM_REDUCE_NONEMPTY KILN_TENSOR_FORM_REDUCE
#define KILN_TENSOR_FORM_DIM_NONEMPTY KILN_TENSOR_FORM_DIM
#define KILN_TENSOR_FORM_MANUAL(name, allowed)
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_TENSOR_FORM_##form(name, KILN_TENSOR_KINDS_##kinds)
#include "kiln/detail/ops.def"
#undef KILN_OP
#undef KILN_TENSOR_FORM_UNARY
#undef KILN_TENSOR_FORM_BINARY
#undef KILN_TENSOR_FORM_SCALAR
#undef KILN_TENSOR_FORM_COMPARE
#undef KILN_TENSOR_FORM_COMPARE_SCALAR
#undef KILN_TENSOR_FORM_PREDICATE
#undef KILN_TENSOR_FORM_REDUCE
#undef KILN_TENSOR_FORM_DIM
#undef KILN_TENSOR_FORM_REDUCE_NONEMPTY
#undef KILN_TENSOR_FORM_DIM_NONEMPTY
#undef KILN_TENSOR_FORM_MANUAL
#undef KILN_TENSOR_KINDS_F
#undef KILN_TENSOR_KINDS_I
#undef KILN_TENSOR_KINDS_B
#undef KILN_TENSOR_KINDS_FI
#undef KILN_TENSOR_KINDS_FIB

  // ---- arithmetic extras ----
  Tensor powf(const Tensor& rhs) const requires NumericKind<K> { return pow(rhs); }
  Tensor powf_scalar(double v) const requires NumericKind<K> { return pow_scalar(v); }
  Tensor powi_scalar(std::int64_t v) const requires NumericKind<K> { return pow_scalar(v); }
  Tensor clamp(Scalar min, Scalar max) const requires NumericKind<K> {
    return Tensor(detail::clamp(primitive_, min, max));
  }
  Tensor clamp_min(Scalar min) const requires NumericKind<K> {
    return Tensor(detail::clamp(primitive_, min, std::nullopt));
  }
  Tensor clamp_max(Scalar max) const requires NumericKind<K> {
    return Tensor(detail::clamp(primitive_, std::nullopt, max));
  }
  // Matrix product over the last two dims; leading dims broadcast.
  Tensor matmul(const Tensor& rhs) const requires(D >= 2 && NumericKind<K>) {
    return Tensor(detail::matmul(primitive_, rhs.primitive_));
  }
  Tensor cross(const Tensor& rhs, std::int64_t dim) const requires NumericKind<K> {
    return Tensor(detail::cross(primitive_, rhs.primitive_, dim));
  }
  // burn's name for logical_not.
  Tensor bool_not() const requires std::is_same_v<K, Bool> { return logical_not(); }

  // ---- reductions: full ones give shape [1]; *_dim keep the dim with size 1 ----
  // Variance along dim with Bessel's correction (correction = 1) by default.
  Tensor var(std::int64_t dim,
             std::int64_t correction = 1) const requires std::is_same_v<K, Float> {
    return Tensor(detail::var_dim(primitive_, dim, correction));
  }
  Tensor var_bias(std::int64_t dim) const requires std::is_same_v<K, Float> { return var(dim, 0); }
  // p-norm over everything (p = inf gives max |x|) or along dim.
  Tensor<1, K> norm(double p = 2.0) const requires std::is_same_v<K, Float> {
    return Tensor<1, K>::wrap(detail::norm(primitive_, p));
  }
  Tensor norm_dim(double p, std::int64_t dim) const requires std::is_same_v<K, Float> {
    return Tensor(detail::norm_dim(primitive_, p, dim));
  }
  Tensor<D, Int> argmax(std::int64_t dim) const requires NumericKind<K> {
    return Tensor<D, Int>::wrap(detail::argmax(primitive_, dim));
  }
  Tensor<D, Int> argmin(std::int64_t dim) const requires NumericKind<K> {
    return Tensor<D, Int>::wrap(detail::argmin(primitive_, dim));
  }
  std::pair<Tensor, Tensor<D, Int>> max_dim_with_indices(std::int64_t dim) const requires
      NumericKind<K> {
    auto [values, indices] = detail::max_dim_with_indices(primitive_, dim);
    return {Tensor(std::move(values)), Tensor<D, Int>::wrap(std::move(indices))};
  }
  std::pair<Tensor, Tensor<D, Int>> min_dim_with_indices(std::int64_t dim) const requires
      NumericKind<K> {
    auto [values, indices] = detail::min_dim_with_indices(primitive_, dim);
    return {Tensor(std::move(values)), Tensor<D, Int>::wrap(std::move(indices))};
  }
  Tensor<1, Bool> any() const { return Tensor<1, Bool>::wrap(detail::any(primitive_)); }
  Tensor<1, Bool> all() const { return Tensor<1, Bool>::wrap(detail::all(primitive_)); }
  Tensor<D, Bool> any_dim(std::int64_t dim) const {
    return Tensor<D, Bool>::wrap(detail::any_dim(primitive_, dim));
  }
  Tensor<D, Bool> all_dim(std::int64_t dim) const {
    return Tensor<D, Bool>::wrap(detail::all_dim(primitive_, dim));
  }

  // ---- indexing ----
  // out[i][j] = x[indices[i][j]][j] (dim 0), PyTorch's gather.
  Tensor gather(std::int64_t dim, const Tensor<D, Int>& indices) const {
    return Tensor(detail::gather(dim, primitive_, indices.primitive()));
  }
  // Writes values at indices along dim, combining by update (Assign by default).
  Tensor scatter(std::int64_t dim, const Tensor<D, Int>& indices, const Tensor& values,
                 IndexingUpdate update = IndexingUpdate::Assign) const {
    return Tensor(detail::scatter(dim, primitive_, indices.primitive(), values.primitive_, update));
  }
  Tensor scatter_add(std::int64_t dim, const Tensor<D, Int>& indices, const Tensor& values) const {
    return scatter(dim, indices, values, IndexingUpdate::Add);
  }
  // Picks whole slices along dim (index_select).
  Tensor select(std::int64_t dim, const Tensor<1, Int>& indices) const {
    return Tensor(detail::select(primitive_, dim, indices.primitive()));
  }
  Tensor index_select(std::int64_t dim, const Tensor<1, Int>& indices) const {
    return select(dim, indices);
  }
  Tensor select_assign(std::int64_t dim, const Tensor<1, Int>& indices, const Tensor& values,
                       IndexingUpdate update = IndexingUpdate::Add) const {
    return Tensor(
        detail::select_assign(primitive_, dim, indices.primitive(), values.primitive_, update));
  }
  // indices [..., k] address the first k dims of this tensor; result rank R.
  template <std::size_t R, std::size_t DI>
  Tensor<R, K> gather_nd(const Tensor<DI, Int>& indices) const {
    return Tensor<R, K>::wrap(detail::gather_nd(primitive_, indices.primitive(), R));
  }
  template <std::size_t DI, std::size_t DV>
  Tensor scatter_nd(const Tensor<DI, Int>& indices, const Tensor<DV, K>& values,
                    IndexingUpdate update = IndexingUpdate::Assign) const {
    return Tensor(detail::scatter_nd(primitive_, indices.primitive(), values.primitive(), update));
  }
  // One Slice per leading dim (missing trailing dims are taken whole).
  Tensor slice(const std::vector<Slice>& slices) const {
    return Tensor(detail::slice(primitive_, slices));
  }
  Tensor slice_assign(const std::vector<Slice>& slices, const Tensor& values) const {
    return Tensor(detail::slice_assign(primitive_, slices, values.primitive_));
  }
  Tensor slice_fill(const std::vector<Slice>& slices, Scalar value) const {
    return Tensor(detail::slice_fill(primitive_, slices, value));
  }
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const {
    return Tensor(detail::narrow(primitive_, dim, start, length));
  }
  // x where mask is false, value where it is true (mask broadcasts).
  Tensor mask_fill(const Tensor<D, Bool>& mask, Scalar value) const {
    return Tensor(detail::mask_fill(primitive_, mask.primitive(), value));
  }
  // x where mask is false, other where it is true (both broadcast).
  Tensor mask_where(const Tensor<D, Bool>& mask, const Tensor& other) const {
    return Tensor(detail::mask_where(primitive_, mask.primitive(), other.primitive_));
  }
  // The elements where mask is true, in order, as a rank-1 tensor.
  Tensor<1, K> mask_select(const Tensor<D, Bool>& mask) const {
    return Tensor<1, K>::wrap(detail::mask_select(primitive_, mask.primitive()));
  }
  // Coordinates of true elements: [count, D].
  Tensor<2, Int> argwhere() const requires std::is_same_v<K, Bool> {
    return Tensor<2, Int>::wrap(detail::argwhere(primitive_));
  }
  Tensor<2, Int> nonzero() const { return bool_().argwhere(); }

  // ---- layout ----
  template <std::size_t N>
  Tensor<N, K> reshape(const std::int64_t (&dims)[N]) const {
    return Tensor<N, K>::wrap(detail::reshape(primitive_, Shape(std::span(dims)), N));
  }
  template <std::size_t N>
  Tensor<N, K> reshape(const Shape& shape) const {
    return Tensor<N, K>::wrap(detail::reshape(primitive_, shape, N));
  }
  // Rank known at run time: converts to Tensor<N, K> on assignment. One dim may be -1.
  DynamicTensor<K> reshape(const Shape& shape) const {
    return DynamicTensor<K>(detail::reshape(primitive_, shape, shape.rank()));
  }
  template <std::size_t N = D>
  Tensor<N, K> expand(const Shape& shape) const {
    static_assert(N >= D, "expand cannot lower the rank");
    return Tensor<N, K>::wrap(detail::expand(primitive_, shape));
  }
  Tensor permute(const std::array<std::int64_t, D>& axes) const {
    return Tensor(detail::permute(primitive_, {axes.begin(), axes.end()}));
  }
  Tensor swap_dims(std::int64_t dim1, std::int64_t dim2) const {
    return Tensor(detail::swap_dims(primitive_, dim1, dim2));
  }
  Tensor transpose() const { return Tensor(detail::transpose(primitive_)); }
  Tensor flip(const std::vector<std::int64_t>& axes) const {
    return Tensor(detail::flip(primitive_, axes));
  }
  template <std::size_t N = D - 1>
  Tensor<N, K> squeeze(std::int64_t dim) const {
    static_assert(N + 1 == D, "squeeze(dim) removes one dim");
    return Tensor<N, K>::wrap(detail::squeeze(primitive_, dim));
  }
  // Removes every size-1 dim; the result must have rank N.
  template <std::size_t N>
  Tensor<N, K> squeeze_all() const {
    return Tensor<N, K>::wrap(detail::squeeze_all(primitive_, N));
  }
  Tensor<D + 1, K> unsqueeze(std::int64_t dim = 0) const {
    return Tensor<D + 1, K>::wrap(detail::unsqueeze(primitive_, dim));
  }
  template <std::size_t N>
  Tensor<N, K> flatten(std::int64_t start_dim, std::int64_t end_dim) const {
    static_assert(N <= D, "flatten cannot raise the rank");
    auto p = detail::flatten(primitive_, start_dim, end_dim);
    return Tensor<N, K>::from_primitive(std::move(p));
  }
  static Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
    return Tensor(detail::cat(primitives_of(tensors), dim));
  }
  static Tensor<D + 1, K> stack(const std::vector<Tensor>& tensors, std::int64_t dim) {
    return Tensor<D + 1, K>::wrap(detail::stack(primitives_of(tensors), dim));
  }
  Tensor repeat(const std::array<std::int64_t, D>& times) const {
    return Tensor(detail::repeat(primitive_, {times.begin(), times.end()}));
  }
  Tensor repeat_dim(std::int64_t dim, std::int64_t times) const {
    return Tensor(detail::repeat_dim(primitive_, dim, times));
  }
  std::vector<Tensor> chunk(std::int64_t chunks, std::int64_t dim) const {
    return wrap_all(detail::chunk(primitive_, chunks, dim));
  }
  std::vector<Tensor> split(std::int64_t split_size, std::int64_t dim) const {
    return wrap_all(detail::split(primitive_, split_size, dim));
  }
  std::vector<Tensor> split_with_sizes(const std::vector<std::int64_t>& sizes,
                                       std::int64_t dim) const {
    return wrap_all(detail::split_sizes(primitive_, sizes, dim));
  }
  // Sliding windows of size along dim with step, appended as a new last dim.
  Tensor<D + 1, K> unfold(std::int64_t dim, std::int64_t size, std::int64_t step) const {
    return Tensor<D + 1, K>::wrap(detail::unfold(primitive_, dim, size, step));
  }

  // ---- sorting ----
  Tensor sort(std::int64_t dim) const requires NumericKind<K> {
    return Tensor(detail::sort(primitive_, dim, false));
  }
  Tensor sort_descending(std::int64_t dim) const requires NumericKind<K> {
    return Tensor(detail::sort(primitive_, dim, true));
  }
  std::pair<Tensor, Tensor<D, Int>> sort_with_indices(
      std::int64_t dim, bool descending = false) const requires NumericKind<K> {
    auto [values, indices] = detail::sort_with_indices(primitive_, dim, descending);
    return {Tensor(std::move(values)), Tensor<D, Int>::wrap(std::move(indices))};
  }
  Tensor<D, Int> argsort(std::int64_t dim, bool descending = false) const requires NumericKind<K> {
    return Tensor<D, Int>::wrap(detail::argsort(primitive_, dim, descending));
  }
  // The k largest values along dim, largest first.
  Tensor topk(std::int64_t k, std::int64_t dim) const requires NumericKind<K> {
    return topk_with_indices(k, dim).first;
  }
  std::pair<Tensor, Tensor<D, Int>> topk_with_indices(
      std::int64_t k, std::int64_t dim, bool largest = true) const requires NumericKind<K> {
    auto [values, indices] = detail::topk_with_indices(primitive_, k, dim, largest);
    return {Tensor(std::move(values)), Tensor<D, Int>::wrap(std::move(indices))};
  }

  // ---- autodiff (kiln/autodiff.h): on a device made with .autodiff() ----
  // This tensor as a leaf whose gradient backward() reports (AutodiffError off autodiff).
  Tensor require_grad() const requires std::is_same_v<K, Float> {
    return Tensor(detail::require_grad(primitive_, true));
  }
  Tensor set_require_grad(bool require) const requires std::is_same_v<K, Float> {
    return Tensor(detail::require_grad(primitive_, require));
  }
  // Whether the tensor is tracked: a leaf made with require_grad, or computed from one.
  bool is_require_grad() const noexcept { return detail::is_require_grad(primitive_); }
  // The same values, cut from the graph (gradients stop here).
  Tensor detach() const { return Tensor(detail::detach(primitive_)); }
  // Gradients of this one-element tensor with respect to every leaf it depends on.
  Gradients backward(BackwardOptions options = {}) const requires std::is_same_v<K, Float> {
    return detail::backward(primitive_, std::nullopt, options);
  }
  // The same for a tensor of any shape, given d(loss)/d(this) as seed.
  Gradients backward(const Tensor& seed,
                     BackwardOptions options = {}) const requires std::is_same_v<K, Float> {
    return detail::backward(primitive_, seed.primitive_, options);
  }
  // This leaf's gradient in grads (a tracked tensor under create_graph); nullopt when none.
  std::optional<Tensor> grad(const Gradients& grads) const requires std::is_same_v<K, Float> {
    return wrap_optional(detail::grad(primitive_, grads));
  }
  std::optional<Tensor> grad_remove(Gradients& grads) const requires std::is_same_v<K, Float> {
    return wrap_optional(detail::grad_remove(primitive_, grads));
  }
  void grad_replace(Gradients& grads, const Tensor& grad) const requires std::is_same_v<K, Float> {
    detail::grad_replace(primitive_, grads, grad.primitive_);
  }
  // Writes src's values into this tensor's own storage, in place: every handle sharing the
  // storage sees them (copies of this Tensor, views made from it by slice, reshape, permute and
  // the other layout ops, and a graph captured over it, kiln/graph.h). src must have this
  // tensor's shape and dtype and be on its device (ShapeMismatch / DTypeMismatch /
  // DeviceMismatch), autodiff and fusion flags aside; src may overlap this tensor. An expanded
  // view repeats elements and is refused (InvalidArgument). Autodiff: only the values change;
  // a graph recorded earlier that saved this tensor computes its gradients from the new values,
  // so assign after backward (as optimizers do), not between forward and backward.
  Tensor& assign(const Tensor& src) {
    detail::assign(primitive_, src.primitive_);
    return *this;
  }
  // The same for a source nobody else holds (a temporary, or std::move(t), which leaves t
  // empty): on a fused device its pending ops may then write straight into this tensor's
  // storage, with no new memory and no copy (an optimizer's update, p.assign(p - g * lr)).
  Tensor& assign(Tensor&& src) {
    if (&src == this) return *this;
    detail::assign(primitive_, std::move(src.primitive_));
    return *this;
  }

  // The values on the device without autodiff (inner), or on its autodiff form (from_inner).
  Tensor inner() const { return Tensor(detail::inner(primitive_)); }
  static Tensor from_inner(const Tensor& t) { return Tensor(detail::from_inner(t.primitive_)); }

  std::string to_string() const { return detail::to_string(primitive_); }

  // Internal: wraps a primitive the detail layer produced with the right rank and kind.
  static Tensor wrap(Primitive p) noexcept { return Tensor(std::move(p)); }

 private:
  template <std::size_t, TensorKind>
  friend class Tensor;

  explicit Tensor(Primitive p) noexcept : primitive_(std::move(p)) {}

  static void check_shape_rank(const Shape& shape, const char* op) {
    if (shape.rank() != D) {
      detail::fail<ShapeMismatch>(op, "shape ", shape.to_string(), " has rank ", shape.rank(),
                                  " but the tensor type has rank ", D);
    }
  }
  DType check_cast(DType dtype) const {
    const bool ok = (K::kind == Kind::Float && is_float(dtype)) ||
                    (K::kind == Kind::Int && is_int(dtype)) ||
                    (K::kind == Kind::Bool && is_bool(dtype));
    if (!ok) {
      detail::fail<DTypeMismatch>("cast", "cannot cast a ", kind_name(K::kind), " tensor to ",
                                  dtype_name(dtype),
                                  "; use .float_(), .int_() or .bool_() to change kind");
    }
    return dtype;
  }
  // This tensor's handle, given up; a copy of it where this is `other` (x.sub(std::move(x))).
  Primitive take_primitive_unless(const Tensor* other) {
    if (other == this) return primitive_;
    return std::move(primitive_);
  }
  template <class K2>
  Tensor<D, K2> kind_cast() const {
    return Tensor<D, K2>::wrap(detail::to_kind(primitive_, K2::kind));
  }
  static detail::Prims primitives_of(const std::vector<Tensor>& tensors) {
    detail::Prims out;
    out.reserve(tensors.size());
    for (const Tensor& t : tensors) out.push_back(t.primitive_);
    return out;
  }
  static std::optional<Tensor> wrap_optional(std::optional<Primitive> p) {
    if (!p) return std::nullopt;
    return Tensor(std::move(*p));
  }
  static std::vector<Tensor> wrap_all(detail::Prims ps) {
    std::vector<Tensor> out;
    out.reserve(ps.size());
    for (Primitive& p : ps) out.push_back(Tensor(std::move(p)));
    return out;
  }

  Primitive primitive_;
};

template <std::size_t D, TensorKind K>
Tensor<D, Float> Tensor<D, K>::float_(DType dtype) const {
  if (!is_float(dtype)) {
    detail::fail<DTypeMismatch>("float_", dtype_name(dtype), " is not a float dtype");
  }
  return Tensor<D, Float>::wrap(detail::cast(primitive_, dtype));
}

// ---- operators ----
#define KILN_TENSOR_OPERATOR(op, name)                                         \
  template <std::size_t D, NumericKind K>                                      \
  Tensor<D, K> operator op(const Tensor<D, K>& lhs, const Tensor<D, K>& rhs) { \
    return lhs.name(rhs);                                                      \
  }                                                                            \
  template <std::size_t D, NumericKind K>                                      \
  Tensor<D, K> operator op(Tensor<D, K>&& lhs, const Tensor<D, K>& rhs) {      \
    return std::move(lhs).name(rhs);                                           \
  }                                                                            \
  template <std::size_t D, NumericKind K>                                      \
  Tensor<D, K> operator op(const Tensor<D, K>& lhs, Tensor<D, K>&& rhs) {      \
    return lhs.name(std::move(rhs));                                           \
  }                                                                            \
  template <std::size_t D, NumericKind K>                                      \
  Tensor<D, K> operator op(Tensor<D, K>&& lhs, Tensor<D, K>&& rhs) {           \
    return std::move(lhs).name(std::move(rhs));                                \
  }                                                                            \
  template <std::size_t D, NumericKind K>                                      \
  Tensor<D, K> operator op(const Tensor<D, K>& lhs, Scalar rhs) {              \
    return lhs.name##_scalar(rhs);                                             \
  }                                                                            \
  template <std::size_t D, NumericKind K>                                      \
  Tensor<D, K> operator op(Tensor<D, K>&& lhs, Scalar rhs) {                   \
    return std::move(lhs).name##_scalar(rhs);                                  \
  }
KILN_TENSOR_OPERATOR(+, add)
KILN_TENSOR_OPERATOR(-, sub)
KILN_TENSOR_OPERATOR(*, mul)
KILN_TENSOR_OPERATOR(/, div)
KILN_TENSOR_OPERATOR(%, remainder)
#undef KILN_TENSOR_OPERATOR

// scalar op tensor
template <std::size_t D, NumericKind K>
Tensor<D, K> operator+(Scalar lhs, const Tensor<D, K>& rhs) {
  return rhs.add_scalar(lhs);
}
template <std::size_t D, NumericKind K>
Tensor<D, K> operator*(Scalar lhs, const Tensor<D, K>& rhs) {
  return rhs.mul_scalar(lhs);
}
template <std::size_t D, NumericKind K>
Tensor<D, K> operator-(Scalar lhs, const Tensor<D, K>& rhs) {
  return rhs.neg().add_scalar(lhs);
}
template <std::size_t D, NumericKind K>
Tensor<D, K> operator/(Scalar lhs, const Tensor<D, K>& rhs) {
  return Tensor<D, K>::full_like(rhs, lhs).div(rhs);
}
template <std::size_t D, NumericKind K>
Tensor<D, K> operator+(Scalar lhs, Tensor<D, K>&& rhs) {
  return std::move(rhs).add_scalar(lhs);
}
template <std::size_t D, NumericKind K>
Tensor<D, K> operator*(Scalar lhs, Tensor<D, K>&& rhs) {
  return std::move(rhs).mul_scalar(lhs);
}
template <std::size_t D, NumericKind K>
Tensor<D, K> operator-(Scalar lhs, Tensor<D, K>&& rhs) {
  return std::move(rhs).neg().add_scalar(lhs);
}
template <std::size_t D, NumericKind K>
Tensor<D, K> operator/(Scalar lhs, Tensor<D, K>&& rhs) {
  Tensor<D, K> numerator = Tensor<D, K>::full_like(rhs, lhs);
  return std::move(numerator).div(std::move(rhs));
}
template <std::size_t D, NumericKind K>
Tensor<D, K> operator-(const Tensor<D, K>& x) {
  return x.neg();
}
template <std::size_t D, NumericKind K>
Tensor<D, K> operator-(Tensor<D, K>&& x) {
  return std::move(x).neg();
}

template <std::size_t D>
Tensor<D, Bool> operator!(const Tensor<D, Bool>& x) {
  return x.logical_not();
}
template <std::size_t D>
Tensor<D, Bool> operator&&(const Tensor<D, Bool>& a, const Tensor<D, Bool>& b) {
  return a.logical_and(b);
}
template <std::size_t D>
Tensor<D, Bool> operator||(const Tensor<D, Bool>& a, const Tensor<D, Bool>& b) {
  return a.logical_or(b);
}
template <std::size_t D>
Tensor<D, Int> operator&(const Tensor<D, Int>& a, const Tensor<D, Int>& b) {
  return a.bitwise_and(b);
}
template <std::size_t D>
Tensor<D, Int> operator|(const Tensor<D, Int>& a, const Tensor<D, Int>& b) {
  return a.bitwise_or(b);
}
template <std::size_t D>
Tensor<D, Int> operator^(const Tensor<D, Int>& a, const Tensor<D, Int>& b) {
  return a.bitwise_xor(b);
}
template <std::size_t D>
Tensor<D, Int> operator~(const Tensor<D, Int>& a) {
  return a.bitwise_not();
}

template <std::size_t D, TensorKind K>
std::ostream& operator<<(std::ostream& out, const Tensor<D, K>& t) {
  return out << t.to_string();
}

}  // namespace kiln
