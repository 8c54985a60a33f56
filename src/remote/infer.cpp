// One rule per op, chosen by one switch generated from ops.def: the common forms (UNARY, BINARY,
// DIM, ...) by their form column, the MANUAL ops by a function infer_<name> below whose
// parameters are the Backend method's (a tensor as its TensorType), so an op added to ops.def
// without a rule, or whose parameters change, does not compile. The checks are the tensor
// layer's (src/tensor/*.cpp) on the arguments as a backend receives them.
#include "remote/infer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>

#include "contract/defaults/compose.h"
#include "contract/spatial_shape.h"
#include "core/checked.h"
#include "kiln/detail/format.h"
#include "kiln/quant.h"
#include "tensor/common.h"

namespace kiln::remote {

namespace {

using detail::DimVector;
using detail::fail;
using ir::TensorType;
using Types = std::vector<TensorType>;
using Sizes = std::vector<std::int64_t>;

// ---- the op under inference ----------------------------------------------------------------

// The kinds a tensor may be of (ops.def's kinds column: F float, I int, B bool).
struct Kinds {
  bool float_ok = false;
  bool int_ok = false;
  bool bool_ok = false;
};
constexpr Kinds kKinds_F{true, false, false};
constexpr Kinds kKinds_I{false, true, false};
constexpr Kinds kKinds_B{false, false, true};
constexpr Kinds kKinds_FI{true, true, false};
constexpr Kinds kKinds_FIB{true, true, true};

// The op's name (every message starts "[name] ") and the kinds of its main tensor.
struct Context {
  std::string_view op;
  Kinds kinds;
};

// "[1, 2, 3]", as shapes print.
std::string list(std::span<const std::int64_t> values) {
  return Shape(std::vector<std::int64_t>(values.begin(), values.end())).to_string();
}

bool valid_dtype(DType dtype) {
  return static_cast<std::uint8_t>(dtype) <= static_cast<std::uint8_t>(DType::QFloat);
}

std::string dtype_text(DType dtype) {
  if (valid_dtype(dtype)) return std::string(dtype_name(dtype));
  return "dtype " + std::to_string(static_cast<int>(dtype));
}

// ---- dtypes --------------------------------------------------------------------------------

bool quantized(const TensorType& t) { return t.dtype == DType::QFloat; }

bool of_kinds(DType dtype, Kinds kinds) {
  return (kinds.float_ok && is_float(dtype)) || (kinds.int_ok && is_int(dtype)) ||
         (kinds.bool_ok && is_bool(dtype));
}

std::string kinds_text(Kinds kinds) {
  std::string out;
  for (const auto& [yes, name] :
       {std::pair{kinds.float_ok, "float"}, std::pair{kinds.int_ok, "int"},
        std::pair{kinds.bool_ok, "bool"}}) {
    if (!yes) continue;
    if (!out.empty()) out += " or ";
    out += name;
  }
  return out;
}

// A tensor of one of kinds (DTypeMismatch, as the tensor layer's check_kind).
void check_kind(const Context& c, const TensorType& t, Kinds kinds, std::string_view what) {
  if (!of_kinds(t.dtype, kinds)) {
    fail<DTypeMismatch>(c.op, "expected a ", kinds_text(kinds), " tensor for ", what, ", got ",
                        dtype_text(t.dtype));
  }
}
void check_kind(const Context& c, const TensorType& t, std::string_view what) {
  check_kind(c, t, c.kinds, what);
}
void check_float(const Context& c, const TensorType& t, std::string_view what) {
  check_kind(c, t, kKinds_F, what);
}
void check_int(const Context& c, const TensorType& t, std::string_view what) {
  check_kind(c, t, kKinds_I, what);
}
void check_bool(const Context& c, const TensorType& t, std::string_view what) {
  check_kind(c, t, kKinds_B, what);
}

// The tensor layer brings operands to one dtype before the call; a backend reads them as one.
void check_same_dtype(const Context& c, const TensorType& a, std::string_view what_a,
                      const TensorType& b, std::string_view what_b) {
  if (a.dtype != b.dtype) {
    fail<DTypeMismatch>(c.op, what_a, " is ", dtype_text(a.dtype), " but ", what_b, " is ",
                        dtype_text(b.dtype), "; a backend takes them of one dtype");
  }
}

// A dtype attribute the enum defines and an op can make: qfloat holds a scheme's blocks, which
// only quantize (or an upload of them) makes.
void check_dtype_value(const Context& c, DType dtype, std::string_view what) {
  if (!valid_dtype(dtype)) {
    fail<InvalidArgument>(c.op, what, " is an unknown dtype ", static_cast<int>(dtype));
  }
  if (dtype == DType::QFloat) {
    fail<UnsupportedDType>(c.op, what,
                           " qfloat names no scheme: quantize(scheme) makes the blocks");
  }
}

// A dtype attribute of the op's kinds (creation ops).
void check_dtype_kind(const Context& c, DType dtype, std::string_view what) {
  check_dtype_value(c, dtype, what);
  if (!of_kinds(dtype, c.kinds)) {
    fail<DTypeMismatch>(c.op, what, " must be a ", kinds_text(c.kinds), " dtype, got ",
                        dtype_text(dtype));
  }
}

// The dtype of an index result (argmax, sort's indices, argwhere, ...).
void check_index_dtype(const Context& c, DType dtype) {
  check_dtype_value(c, dtype, "index dtype");
  if (!is_int(dtype)) {
    fail<DTypeMismatch>(c.op, "index dtype must be an integer dtype, got ", dtype_text(dtype));
  }
}

// For an integer tensor, a scalar must be integral (the tensor layer's check_scalar_fits).
void check_scalar_fits(const Context& c, const TensorType& x, const Scalar& s) {
  if (is_int(x.dtype) && s.is_float() && s.to_double() != static_cast<double>(s.to_int())) {
    fail<DTypeMismatch>(c.op, "scalar ", s.to_double(), " is not an integer but the tensor is ",
                        dtype_text(x.dtype));
  }
}

// ---- dims and shapes -----------------------------------------------------------------------

// A dim as a backend takes it: already normalised by the tensor layer, so in [0, rank).
std::size_t dim_of(const Context& c, std::int64_t dim, std::size_t rank,
                   std::string_view what = "dim") {
  if (dim < 0 || static_cast<std::uint64_t>(dim) >= rank) {
    fail<InvalidArgument>(c.op, what, " ", dim, " is out of range for rank ", rank,
                          " (a backend takes dims in [0, rank))");
  }
  return static_cast<std::size_t>(dim);
}

Shape with_dim(const Shape& shape, std::size_t dim, std::int64_t size) {
  Shape out = shape;
  out[dim] = size;
  return out;
}

// The broadcast of two shapes of equal rank: the tensor layer's own rule and message. (c.op is
// an op name from ops.def, a string literal.)
Shape broadcast(const Context& c, const Shape& a, const Shape& b) {
  return detail::broadcast_shape(a, b, c.op.data());
}

// True when `from` broadcasts to `to` (same rank, each dim equal or 1).
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.rank() != to.rank()) return false;
  for (std::size_t i = 0; i < from.rank(); ++i) {
    if (from[i] != to[i] && from[i] != 1) return false;
  }
  return true;
}

void check_rank(const Context& c, const TensorType& t, std::size_t rank, std::string_view what) {
  if (t.shape.rank() != rank) {
    fail<ShapeMismatch>(c.op, what, " must have rank ", rank, ", got shape ", t.shape.to_string());
  }
}

void check_min_rank(const Context& c, const TensorType& t, std::size_t rank,
                    std::string_view what) {
  if (t.shape.rank() < rank) {
    fail<ShapeMismatch>(c.op, what, " must have rank >= ", rank, ", got shape ",
                        t.shape.to_string());
  }
}

void check_shape(const Context& c, const Shape& actual, const Shape& expected,
                 std::string_view what) {
  if (actual != expected) {
    fail<ShapeMismatch>(c.op, what, " have shape ", actual.to_string(), ", expected ",
                        expected.to_string());
  }
}

// A 1-D parameter of `size` elements (gamma, beta, running statistics, bias).
void check_vector(const Context& c, const TensorType& t, std::int64_t size, std::string_view what) {
  if (t.shape.rank() != 1 || t.shape[0] != size) {
    fail<ShapeMismatch>(c.op, what, " must have shape [", size, "], got ", t.shape.to_string());
  }
}

// A result shape within the tensor limit: InvalidArgument for a negative dim or more than 2^48
// elements.
void check_count(const Context& c, const Shape& shape) { checked::check_shape(shape, c.op); }

// A dense buffer the creation ops allocate: OutOfMemory past 2^48 elements or 2^50 bytes.
void check_allocation(const Context& c, const Shape& shape, DType dtype) {
  (void)checked::dense_bytes(shape, dtype, c.op);
}

void check_not_empty(const Context& c, const TensorType& x) {
  if (x.shape.num_elements() == 0) {
    fail<InvalidArgument>(c.op, "cannot reduce an empty tensor of shape ", x.shape.to_string());
  }
}

void check_dim_not_empty(const Context& c, const TensorType& x, std::size_t dim) {
  if (x.shape[dim] == 0) {
    fail<InvalidArgument>(c.op, "cannot reduce dim ", dim, " of size 0 (shape ",
                          x.shape.to_string(), ")");
  }
}

// ---- the common forms of ops.def -----------------------------------------------------------

// Whether an op of form DIM reduces its dim (keeping it with size 1) or scans along it; named
// by ops.def's group column, so a DIM op of a new group needs an entry here.
constexpr bool kDimReduces_reduce = true;
constexpr bool kDimReduces_scan = false;

Types infer_unary(const Context& c, const TensorType& x) {
  check_kind(c, x, "the input");
  return {x};
}

Types infer_predicate(const Context& c, const TensorType& x) {
  check_kind(c, x, "the input");
  return {{DType::Bool, x.shape}};
}

Types binary(const Context& c, const TensorType& lhs, const TensorType& rhs, bool to_bool) {
  check_kind(c, lhs, "lhs");
  check_kind(c, rhs, "rhs");
  check_same_dtype(c, lhs, "lhs", rhs, "rhs");
  return {{to_bool ? DType::Bool : lhs.dtype, broadcast(c, lhs.shape, rhs.shape)}};
}
Types infer_binary(const Context& c, const TensorType& lhs, const TensorType& rhs) {
  return binary(c, lhs, rhs, false);
}
Types infer_compare(const Context& c, const TensorType& lhs, const TensorType& rhs) {
  return binary(c, lhs, rhs, true);
}

Types infer_scalar(const Context& c, const TensorType& x, const Scalar& value) {
  check_kind(c, x, "the input");
  check_scalar_fits(c, x, value);
  return {x};
}

// A comparison's scalar may be of any kind (3 > 2.5 on integers has an answer).
Types infer_compare_scalar(const Context& c, const TensorType& x, const Scalar&) {
  check_kind(c, x, "the input");
  return {{DType::Bool, x.shape}};
}

Types infer_reduce(const Context& c, const TensorType& x) {
  check_kind(c, x, "the input");
  return {{x.dtype, Shape{1}}};
}
Types infer_reduce_nonempty(const Context& c, const TensorType& x) {
  check_kind(c, x, "the input");
  check_not_empty(c, x);
  return {{x.dtype, Shape{1}}};
}

Types along_dim(const Context& c, const TensorType& x, std::int64_t dim, bool reduces,
                bool nonempty) {
  check_kind(c, x, "the input");
  const std::size_t d = dim_of(c, dim, x.shape.rank());
  if (nonempty) check_dim_not_empty(c, x, d);
  return {{x.dtype, reduces ? with_dim(x.shape, d, 1) : x.shape}};
}

// ---- creation and movement -----------------------------------------------------------------

Types infer_from_data(const Context& c, const TensorData& data, const ir::DeviceAttr&) {
  const bool blocks = data.dtype() == DType::QFloat;
  if (!blocks) check_dtype_kind(c, data.dtype(), "data dtype");
  const std::size_t bytes = blocks ? quantized_bytes(data.shape(), data.scheme(), c.op)
                                   : checked::dense_bytes(data.shape(), data.dtype(), c.op);
  if (data.bytes().size() != bytes) {
    fail<ShapeMismatch>(c.op, data.bytes().size(), " bytes given but shape ",
                        data.shape().to_string(), " of ", dtype_text(data.dtype()), " needs ",
                        bytes);
  }
  return {type_of(data)};
}

Types creation(const Context& c, const Shape& shape, DType dtype) {
  check_dtype_kind(c, dtype, "dtype");
  check_allocation(c, shape, dtype);
  return {{dtype, shape}};
}

Types infer_empty(const Context& c, const Shape& shape, DType dtype, const ir::DeviceAttr&) {
  return creation(c, shape, dtype);
}
Types infer_full(const Context& c, const Shape& shape, const Scalar&, DType dtype,
                 const ir::DeviceAttr&) {
  return creation(c, shape, dtype);
}
Types infer_zeros(const Context& c, const Shape& shape, DType dtype, const ir::DeviceAttr&) {
  return creation(c, shape, dtype);
}
Types infer_ones(const Context& c, const Shape& shape, DType dtype, const ir::DeviceAttr&) {
  return creation(c, shape, dtype);
}

Types infer_arange(const Context& c, std::int64_t start, std::int64_t end, std::int64_t step,
                   DType dtype, const ir::DeviceAttr&) {
  const std::int64_t count = checked::arange_length(start, end, step, c.op);
  return creation(c, Shape{count}, dtype);
}

Types infer_random(const Context& c, const Shape& shape, const Distribution& distribution,
                   DType dtype, const ir::DeviceAttr&) {
  distribution.check(c.op);
  return creation(c, shape, dtype);
}

Types infer_into_data(const Context& c, const TensorType& x) {
  if (!quantized(x)) check_kind(c, x, "the input");
  return {};
}

// The device is the server's to choose: not checked here.
Types infer_to_device(const Context& c, const TensorType& x, const ir::DeviceAttr&) {
  if (!quantized(x)) check_kind(c, x, "the input");
  return {x};
}

Types infer_cast(const Context& c, const TensorType& x, DType dtype) {
  check_kind(c, x, "the input");
  check_dtype_kind(c, dtype, "dtype");
  return {{dtype, x.shape}};
}

// The tensor layer's checks of quantize (tensor/quantized.cpp): the blocks of x's shape.
Types infer_quantize(const Context& c, const TensorType& x, const QuantScheme& scheme) {
  check_float(c, x, "the input");
  (void)quantized_bytes(x.shape, scheme, c.op);
  if (!can_quantize(scheme)) {
    fail<UnsupportedOperation>(c.op, "kiln decodes ", quant_kind_name(scheme.kind),
                               " but does not encode it");
  }
  return {{DType::QFloat, x.shape, scheme}};
}

Types infer_dequantize(const Context& c, const TensorType& x, DType dtype) {
  if (!quantized(x)) {
    fail<DTypeMismatch>(c.op, "the tensor is ", dtype_text(x.dtype), ", not qfloat");
  }
  check_dtype_value(c, dtype, "dtype");
  if (!is_float(dtype)) {
    fail<DTypeMismatch>(c.op, "dequantizes to a float dtype, not ", dtype_text(dtype));
  }
  return {{dtype, x.shape}};
}

// A view of QFloat x whose dim i shows x's dim axes[i]: the same blocks, axes composed (empty
// again once they are back in stored order).
TensorType quantized_view(const TensorType& x, const Axes& axes, Shape shape) {
  TensorType out{DType::QFloat, std::move(shape), x.scheme};
  bool stored_order = true;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto a = static_cast<std::size_t>(axes[i]);
    out.axes.push_back(x.axes.empty() ? axes[i] : x.axes[a]);
    stored_order = stored_order && out.axes.back() == static_cast<std::int64_t>(i);
  }
  if (stored_order) out.axes.clear();
  return out;
}

Types infer_read_many(const Context& c, std::span<const TensorType* const> xs) {
  for (const TensorType* x : xs) {
    if (!quantized(*x)) check_kind(c, *x, "a read tensor");
  }
  return {};
}

// ---- arithmetic extras ---------------------------------------------------------------------

Types infer_clamp(const Context& c, const TensorType& x, const Scalar& min, const Scalar& max) {
  check_kind(c, x, "the input");
  check_scalar_fits(c, x, min);
  check_scalar_fits(c, x, max);
  return {x};
}
Types infer_clamp_min(const Context& c, const TensorType& x, const Scalar& min) {
  return infer_scalar(c, x, min);
}
Types infer_clamp_max(const Context& c, const TensorType& x, const Scalar& max) {
  return infer_scalar(c, x, max);
}

// A QFloat rhs (a weight) takes a float lhs and gives lhs's dtype.
Types infer_matmul(const Context& c, const TensorType& lhs, const TensorType& rhs) {
  if (quantized(rhs)) check_float(c, lhs, "lhs");
  check_kind(c, lhs, "lhs");
  if (!quantized(rhs)) check_kind(c, rhs, "rhs");
  const Shape& a = lhs.shape;
  const Shape& b = rhs.shape;
  if (a.rank() < 2 || b.rank() < 2) {
    fail<ShapeMismatch>(c.op, "operands need rank >= 2, got shapes ", a.to_string(), " and ",
                        b.to_string());
  }
  if (a[a.rank() - 1] != b[b.rank() - 2]) {
    fail<ShapeMismatch>(c.op, "inner dims differ: shapes ", a.to_string(), " and ", b.to_string(),
                        " (", a[a.rank() - 1], " vs ", b[b.rank() - 2], ")");
  }
  // Leading (batch) dims broadcast, aligned from the right; the longer list leads.
  const std::size_t ba = a.rank() - 2, bb = b.rank() - 2;
  const std::size_t batch = std::max(ba, bb);
  DimVector dims(batch + 2);
  for (std::size_t i = 1; i <= batch; ++i) {
    const std::int64_t da = i <= ba ? a[ba - i] : 1, db = i <= bb ? b[bb - i] : 1;
    if (da != db && da != 1 && db != 1) {
      fail<ShapeMismatch>(c.op, "batch dims of shapes ", a.to_string(), " and ", b.to_string(),
                          " cannot be broadcast (", da, " vs ", db, ")");
    }
    dims[batch - i] = da == 1 ? db : da;
  }
  if (!quantized(rhs)) check_same_dtype(c, lhs, "lhs", rhs, "rhs");
  dims[batch] = a[a.rank() - 2];
  dims[batch + 1] = b[b.rank() - 1];
  return {{lhs.dtype, Shape(std::move(dims))}};
}

Types infer_cross(const Context& c, const TensorType& lhs, const TensorType& rhs,
                  std::int64_t dim) {
  check_kind(c, lhs, "lhs");
  check_kind(c, rhs, "rhs");
  const Shape shape = broadcast(c, lhs.shape, rhs.shape);
  const std::size_t d = dim_of(c, dim, shape.rank());
  if (lhs.shape[d] != 3 || rhs.shape[d] != 3) {
    fail<ShapeMismatch>(c.op, "dim ", dim, " must have size 3 in both operands, got shapes ",
                        lhs.shape.to_string(), " and ", rhs.shape.to_string());
  }
  check_same_dtype(c, lhs, "lhs", rhs, "rhs");
  return {{lhs.dtype, shape}};
}

// ---- reductions ----------------------------------------------------------------------------

// The indices (and values) of the extrema along dim.
Shape extremum_shape(const Context& c, const TensorType& x, std::int64_t dim, DType index_dtype) {
  check_kind(c, x, "the input");
  const std::size_t d = dim_of(c, dim, x.shape.rank());
  check_dim_not_empty(c, x, d);
  check_index_dtype(c, index_dtype);
  return with_dim(x.shape, d, 1);
}

Types infer_argmax(const Context& c, const TensorType& x, std::int64_t dim, DType index_dtype) {
  return {{index_dtype, extremum_shape(c, x, dim, index_dtype)}};
}
Types infer_argmin(const Context& c, const TensorType& x, std::int64_t dim, DType index_dtype) {
  return {{index_dtype, extremum_shape(c, x, dim, index_dtype)}};
}
Types infer_max_dim_with_indices(const Context& c, const TensorType& x, std::int64_t dim,
                                 DType index_dtype) {
  const Shape shape = extremum_shape(c, x, dim, index_dtype);
  return {{x.dtype, shape}, {index_dtype, shape}};
}
Types infer_min_dim_with_indices(const Context& c, const TensorType& x, std::int64_t dim,
                                 DType index_dtype) {
  const Shape shape = extremum_shape(c, x, dim, index_dtype);
  return {{x.dtype, shape}, {index_dtype, shape}};
}

// any / all: "x != 0" over every kind, a Bool result.
Types infer_any(const Context& c, const TensorType& x) {
  check_kind(c, x, "the input");
  return {{DType::Bool, Shape{1}}};
}
Types infer_all(const Context& c, const TensorType& x) { return infer_any(c, x); }
Types infer_any_dim(const Context& c, const TensorType& x, std::int64_t dim) {
  check_kind(c, x, "the input");
  return {{DType::Bool, with_dim(x.shape, dim_of(c, dim, x.shape.rank()), 1)}};
}
Types infer_all_dim(const Context& c, const TensorType& x, std::int64_t dim) {
  return infer_any_dim(c, x, dim);
}

// ---- indexing ------------------------------------------------------------------------------

void check_update(const Context& c, IndexingUpdate update) {
  if (static_cast<std::uint8_t>(update) > static_cast<std::uint8_t>(IndexingUpdate::Max)) {
    fail<InvalidArgument>(c.op, "unknown indexing update ", static_cast<int>(update));
  }
}

void check_same_rank(const Context& c, const TensorType& x, const TensorType& other,
                     std::string_view what) {
  if (other.shape.rank() != x.shape.rank()) {
    fail<ShapeMismatch>(c.op, what, " of shape ", other.shape.to_string(), " have rank ",
                        other.shape.rank(), " but the tensor of shape ", x.shape.to_string(),
                        " has rank ", x.shape.rank());
  }
}

// gather / scatter: indices no larger than x in every dim but dim (PyTorch's rule).
void check_index_extent(const Context& c, const TensorType& x, const TensorType& indices,
                        std::size_t dim) {
  for (std::size_t d = 0; d < x.shape.rank(); ++d) {
    if (d != dim && indices.shape[d] > x.shape[d]) {
      fail<ShapeMismatch>(c.op, "indices of shape ", indices.shape.to_string(),
                          " are larger than the tensor of shape ", x.shape.to_string(), " in dim ",
                          d);
    }
  }
}

// gather / scatter's common checks; returns dim.
std::size_t check_gather(const Context& c, std::int64_t dim, const TensorType& x,
                         const TensorType& indices) {
  check_kind(c, x, "the input");
  check_int(c, indices, "indices");
  check_same_rank(c, x, indices, "indices");
  const std::size_t d = dim_of(c, dim, x.shape.rank());
  check_index_extent(c, x, indices, d);
  return d;
}

Types infer_gather(const Context& c, std::int64_t dim, const TensorType& x,
                   const TensorType& indices) {
  check_gather(c, dim, x, indices);
  return {{x.dtype, indices.shape}};
}

Types infer_scatter(const Context& c, std::int64_t dim, const TensorType& x,
                    const TensorType& indices, const TensorType& values, IndexingUpdate update) {
  check_gather(c, dim, x, indices);
  check_same_dtype(c, values, "values", x, "the tensor");
  check_shape(c, values.shape, indices.shape, "values");
  check_update(c, update);
  return {x};
}

// select / select_assign: indices of rank 1; returns dim.
std::size_t check_select(const Context& c, const TensorType& x, std::int64_t dim,
                         const TensorType& indices) {
  check_kind(c, x, "the input");
  check_int(c, indices, "indices");
  if (indices.shape.rank() != 1) {
    fail<ShapeMismatch>(c.op, "indices must have rank 1, got shape ", indices.shape.to_string());
  }
  return dim_of(c, dim, x.shape.rank());
}

Types infer_select(const Context& c, const TensorType& x, std::int64_t dim,
                   const TensorType& indices) {
  const std::size_t d = check_select(c, x, dim, indices);
  return {{x.dtype, with_dim(x.shape, d, indices.shape[0])}};
}

Types infer_select_assign(const Context& c, const TensorType& x, std::int64_t dim,
                          const TensorType& indices, const TensorType& values,
                          IndexingUpdate update) {
  const std::size_t d = check_select(c, x, dim, indices);
  check_same_dtype(c, values, "values", x, "the tensor");
  check_same_rank(c, x, values, "values");
  check_shape(c, values.shape, with_dim(x.shape, d, indices.shape[0]), "values");
  check_update(c, update);
  return {x};
}

// The shape gather_nd reads for [..., k] indices into x: indices' leading dims, then x's dims
// past the k addressed.
Shape nd_shape(const Context& c, const TensorType& x, const TensorType& indices) {
  check_kind(c, x, "the input");
  check_int(c, indices, "indices");
  check_min_rank(c, indices, 1, "indices [..., k]");
  const Shape& shape = indices.shape;
  const std::int64_t k = shape[shape.rank() - 1];
  if (k > static_cast<std::int64_t>(x.shape.rank())) {
    fail<ShapeMismatch>(c.op, "indices of shape ", shape.to_string(), " address ", k,
                        " dims but the tensor of shape ", x.shape.to_string(), " has rank ",
                        x.shape.rank());
  }
  DimVector dims;
  for (std::size_t i = 0; i + 1 < shape.rank(); ++i) dims.push_back(shape[i]);
  for (std::size_t i = static_cast<std::size_t>(k); i < x.shape.rank(); ++i) {
    dims.push_back(x.shape[i]);
  }
  Shape out(std::move(dims));
  check_count(c, out);
  return out;
}

Types infer_gather_nd(const Context& c, const TensorType& x, const TensorType& indices) {
  return {{x.dtype, nd_shape(c, x, indices)}};
}

Types infer_scatter_nd(const Context& c, const TensorType& x, const TensorType& indices,
                       const TensorType& values, IndexingUpdate update) {
  const Shape read = nd_shape(c, x, indices);
  check_same_dtype(c, values, "values", x, "the tensor");
  check_shape(c, values.shape, read, "values");
  check_update(c, update);
  return {x};
}

// Slices as the tensor layer resolves them: one per dim, each visiting `length` indices from
// `start` by `step`, all inside the dim. Returns the shape of the region.
Shape region_of(const Context& c, const Shape& shape, const ResolvedSlices& slices) {
  if (slices.size() != shape.rank()) {
    fail<InvalidArgument>(c.op, slices.size(), " slices given for rank ", shape.rank(),
                          " (a backend takes one resolved slice per dim)");
  }
  DimVector dims(shape.rank());
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    const ResolvedSlice& s = slices[d];
    const std::int64_t n = shape[d];
    auto bad = [&](const char* why) {
      fail<InvalidArgument>(c.op, "slice {start ", s.start, ", length ", s.length, ", step ",
                            s.step, "} of dim ", d, " (size ", n, ") ", why);
    };
    if (s.step == 0) bad("has step 0");
    if (s.length < 0) bad("has a negative length");
    if (s.length == 0) {
      if (s.start < 0 || s.start > n) bad("starts outside the dim");
    } else {
      if (s.start < 0 || s.start >= n) bad("starts outside the dim");
      // The last index visited, start + (length - 1) * step, in 128 bits: it must lie in the dim.
      const __int128 last = static_cast<__int128>(s.start) +
                            static_cast<__int128>(s.length - 1) * static_cast<__int128>(s.step);
      if (last < 0 || last >= n) bad("reaches outside the dim");
    }
    dims[d] = s.length;
  }
  return Shape(std::move(dims));
}

// A slice of QFloat x in stored order that keeps whole rows along its first dim is a view of its
// blocks; any other slice of it is of its values, f32 (the CPU backend's rule).
Types infer_slice(const Context& c, const TensorType& x, const ResolvedSlices& slices) {
  if (!quantized(x)) check_kind(c, x, "the input");
  Shape region = region_of(c, x.shape, slices);
  if (!quantized(x)) return {{x.dtype, std::move(region)}};
  bool rows = x.axes.empty() && slices[0].step == 1;
  for (std::size_t d = 1; d < slices.size(); ++d) {
    rows = rows && slices[d].start == 0 && slices[d].step == 1 && slices[d].length == x.shape[d];
  }
  if (rows) return {{DType::QFloat, std::move(region), x.scheme}};
  return {{DType::F32, std::move(region)}};
}

// values arrive expanded to the region (the tensor layer broadcasts them before the call).
Types infer_slice_assign(const Context& c, const TensorType& x, const ResolvedSlices& slices,
                         const TensorType& values) {
  check_kind(c, x, "the input");
  check_same_dtype(c, values, "values", x, "the tensor");
  check_same_rank(c, x, values, "values");
  check_shape(c, values.shape, region_of(c, x.shape, slices), "values");
  return {x};
}

Types infer_mask_where(const Context& c, const TensorType& x, const TensorType& mask,
                       const TensorType& values) {
  check_kind(c, x, "the input");
  check_bool(c, mask, "the mask");
  check_same_dtype(c, x, "the tensor", values, "values");
  const Shape shape = broadcast(c, broadcast(c, x.shape, mask.shape), values.shape);
  return {{x.dtype, shape}};
}

Types infer_mask_fill(const Context& c, const TensorType& x, const TensorType& mask,
                      const Scalar& value) {
  check_kind(c, x, "the input");
  check_bool(c, mask, "the mask");
  check_scalar_fits(c, x, value);
  return {{x.dtype, broadcast(c, x.shape, mask.shape)}};
}

// The count of selected elements depends on the values: -1.
Types infer_mask_select(const Context& c, const TensorType& x, const TensorType& mask) {
  check_kind(c, x, "the input");
  check_bool(c, mask, "the mask");
  broadcast(c, x.shape, mask.shape);
  return {{x.dtype, Shape{-1}}};
}

Types infer_argwhere(const Context& c, const TensorType& mask, DType index_dtype) {
  check_kind(c, mask, "the mask");
  check_index_dtype(c, index_dtype);
  return {{index_dtype, Shape{-1, static_cast<std::int64_t>(mask.shape.rank())}}};
}

// ---- layout --------------------------------------------------------------------------------

// The target shape arrives resolved (no -1).
Types infer_reshape(const Context& c, const TensorType& x, const Shape& shape) {
  check_kind(c, x, "the input");
  const std::int64_t known = checked::num_elements(shape, c.op);
  const std::int64_t total = x.shape.num_elements();
  if (known != total) {
    fail<ShapeMismatch>(c.op, "cannot reshape ", x.shape.to_string(), " (", total, " elements) to ",
                        shape.to_string(), " (", known, " elements)");
  }
  return {{x.dtype, shape}};
}

Types infer_expand(const Context& c, const TensorType& x, const Shape& shape) {
  check_kind(c, x, "the input");
  const Shape& from = x.shape;
  if (shape.rank() < from.rank()) {
    fail<ShapeMismatch>(c.op, "cannot expand ", from.to_string(), " to the lower rank ",
                        shape.to_string());
  }
  const std::size_t lead = shape.rank() - from.rank();
  for (std::size_t i = 0; i < shape.rank(); ++i) {
    const std::int64_t f = i < lead ? 1 : from[i - lead];
    if (shape[i] < 0 || (f != 1 && f != shape[i])) {
      fail<ShapeMismatch>(c.op, "cannot expand ", from.to_string(), " to ", shape.to_string(),
                          " (dim ", i, ")");
    }
  }
  check_count(c, shape);
  return {{x.dtype, shape}};
}

// Dims of rank, each once.
void check_axes(const Context& c, const Axes& axes, std::size_t rank) {
  std::vector<bool> seen(rank, false);
  for (std::int64_t a : axes) {
    const std::size_t d = dim_of(c, a, rank, "axis");
    if (seen[d]) fail<InvalidArgument>(c.op, "axis ", a, " repeated in ", list(axes));
    seen[d] = true;
  }
}

// A QFloat x gives a view of its blocks (quantized_view).
Types infer_permute(const Context& c, const TensorType& x, const Axes& axes) {
  if (!quantized(x)) check_kind(c, x, "the input");
  const std::size_t rank = x.shape.rank();
  if (axes.size() != rank) fail<InvalidArgument>(c.op, axes.size(), " axes given for rank ", rank);
  check_axes(c, axes, rank);
  DimVector dims(rank);
  for (std::size_t i = 0; i < rank; ++i) dims[i] = x.shape[static_cast<std::size_t>(axes[i])];
  if (quantized(x)) return {quantized_view(x, axes, Shape(std::move(dims)))};
  return {{x.dtype, Shape(std::move(dims))}};
}

Types infer_swap_dims(const Context& c, const TensorType& x, std::int64_t dim1, std::int64_t dim2) {
  Axes axes(x.shape.rank());
  std::iota(axes.begin(), axes.end(), 0);
  std::swap(axes[dim_of(c, dim1, x.shape.rank(), "dim1")],
            axes[dim_of(c, dim2, x.shape.rank(), "dim2")]);
  return infer_permute(c, x, axes);
}

Types infer_flip(const Context& c, const TensorType& x, const Axes& axes) {
  check_kind(c, x, "the input");
  check_axes(c, axes, x.shape.rank());
  return {x};
}

Types infer_unfold(const Context& c, const TensorType& x, std::int64_t dim, std::int64_t size,
                   std::int64_t step) {
  check_kind(c, x, "the input");
  const std::size_t d = dim_of(c, dim, x.shape.rank());
  if (size <= 0 || step <= 0) {
    fail<InvalidArgument>(c.op, "size ", size, " and step ", step, " must be positive");
  }
  if (size > x.shape[d]) {
    fail<ShapeMismatch>(c.op, "window ", size, " is larger than dim ", dim, " of ",
                        x.shape.to_string());
  }
  // Overlapping windows (step < size) may hold more elements than x: the limit applies.
  DimVector dims(x.shape.vector());
  dims[d] = (dims[d] - size) / step + 1;
  dims.push_back(size);
  Shape out(std::move(dims));
  check_count(c, out);
  return {{x.dtype, out}};
}

// The operands arrive of one dtype (the tensor layer promotes them to the widest).
Types infer_cat(const Context& c, std::span<const TensorType* const> xs, std::int64_t dim) {
  if (xs.empty()) fail<InvalidArgument>(c.op, "cannot join an empty list of tensors");
  const TensorType& first = *xs.front();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const TensorType& x = *xs[i];
    check_kind(c, x, "a joined tensor");
    if (x.dtype != first.dtype) {
      fail<DTypeMismatch>(c.op, "tensor ", i, " has dtype ", dtype_text(x.dtype),
                          " but tensor 0 has dtype ", dtype_text(first.dtype),
                          "; a backend joins tensors of one dtype");
    }
    if (x.shape.rank() != first.shape.rank()) {
      fail<ShapeMismatch>(c.op, "tensor ", i, " has shape ", x.shape.to_string(),
                          " but tensor 0 has shape ", first.shape.to_string(),
                          "; they must have the same rank");
    }
  }
  const std::size_t d = dim_of(c, dim, first.shape.rank());
  Shape joined = first.shape;
  for (std::size_t i = 1; i < xs.size(); ++i) {
    const Shape& shape = xs[i]->shape;
    joined[d] = checked::add(joined[d], shape[d], c.op, "the joined dim");
    for (std::size_t k = 0; k < shape.rank(); ++k) {
      if (k != d && shape[k] != first.shape[k]) {
        fail<ShapeMismatch>(c.op, "tensor ", i, " has shape ", shape.to_string(),
                            " but tensor 0 has shape ", first.shape.to_string(),
                            "; they must match in every dim but ", dim);
      }
    }
  }
  check_count(c, joined);
  return {{first.dtype, joined}};
}

Types infer_repeat_dim(const Context& c, const TensorType& x, std::int64_t dim,
                       std::int64_t times) {
  check_kind(c, x, "the input");
  const std::size_t d = dim_of(c, dim, x.shape.rank());
  if (times < 0) fail<InvalidArgument>(c.op, "cannot repeat a negative number of times: ", times);
  Shape repeated = x.shape;
  if (__builtin_mul_overflow(x.shape[d], times, &repeated[d])) {
    fail<OutOfMemory>(c.op, "repeating dim ", d, " of ", x.shape.to_string(), " ", times,
                      " times is too large");
  }
  check_allocation(c, repeated, x.dtype);
  return {{x.dtype, repeated}};
}

// ---- sorting -------------------------------------------------------------------------------

Types infer_sort(const Context& c, const TensorType& x, std::int64_t dim, bool) {
  check_kind(c, x, "the input");
  dim_of(c, dim, x.shape.rank());
  return {x};
}

Types infer_sort_with_indices(const Context& c, const TensorType& x, std::int64_t dim,
                              bool descending, DType index_dtype) {
  infer_sort(c, x, dim, descending);
  check_index_dtype(c, index_dtype);
  return {x, {index_dtype, x.shape}};
}

Types infer_argsort(const Context& c, const TensorType& x, std::int64_t dim, bool descending,
                    DType index_dtype) {
  return {infer_sort_with_indices(c, x, dim, descending, index_dtype)[1]};
}

Types infer_topk_with_indices(const Context& c, const TensorType& x, std::int64_t k,
                              std::int64_t dim, bool, DType index_dtype) {
  check_kind(c, x, "the input");
  const std::size_t d = dim_of(c, dim, x.shape.rank());
  const std::int64_t size = x.shape[d];
  if (k < 0 || k > size) {
    fail<InvalidArgument>(c.op, "k = ", k, " is out of range for dim ", dim, " of size ", size,
                          " (shape ", x.shape.to_string(), ")");
  }
  check_index_dtype(c, index_dtype);
  const Shape shape = with_dim(x.shape, d, k);
  return {{x.dtype, shape}, {index_dtype, shape}};
}

// ---- module ops: shared geometry ------------------------------------------------------------

using spatial::Wide;

// [N, C, spatial...] with 1 to 3 spatial dims; returns their count.
std::size_t spatial_dims_of(const Context& c, const TensorType& x, std::string_view what) {
  const std::size_t rank = x.shape.rank();
  if (rank < 3 || rank > 5) {
    fail<ShapeMismatch>(c.op, what, " must have rank 3 to 5 (N, C and 1 to 3 spatial dims), got ",
                        "shape ", x.shape.to_string());
  }
  return rank - 2;
}

// An option vector as a backend takes it: one entry per spatial dim (the tensor layer fills in
// the defaults), each in [minimum, 2^48].
void check_option(const Context& c, const Sizes& values, std::size_t dims, std::int64_t minimum,
                  std::string_view name) {
  if (values.size() != dims) {
    fail<InvalidArgument>(c.op, name, " ", list(values), " has ", values.size(),
                          " entries, expected ", dims, " (one per spatial dim)");
  }
  for (std::int64_t v : values) {
    if (v < minimum) {
      fail<InvalidArgument>(c.op, name, " must be >= ", minimum, ", got ", list(values));
    }
    // No window, stride or padding can usefully exceed the largest tensor; bounding them keeps
    // the backends' int64 size formulas far from overflow.
    if (v > checked::kMaxElements)
      fail<InvalidArgument>(c.op, name, " ", list(values), " exceeds 2^48");
  }
}

// A computed spatial size (in 128 bits) as an int64 within the tensor limit.
std::int64_t checked_output(const Context& c, Wide size, std::string_view what) {
  if (size > checked::kMaxElements) {
    fail<InvalidArgument>(c.op, what, " ", static_cast<double>(size), " exceeds 2^48");
  }
  return static_cast<std::int64_t>(size);
}

void check_groups(const Context& c, std::int64_t groups, std::int64_t channels,
                  std::string_view what) {
  if (groups < 1) fail<InvalidArgument>(c.op, "groups must be >= 1, got ", groups);
  if (groups > checked::kMaxElements) {
    fail<InvalidArgument>(c.op, "groups ", groups, " exceeds 2^48");
  }
  if (channels % groups != 0) {
    fail<ShapeMismatch>(c.op, what, " ", channels, " is not divisible by groups ", groups);
  }
}

std::span<const std::int64_t> kernel_of(const TensorType& weight) {
  return weight.shape.dims().subspan(2);
}

void check_kernel_not_empty(const Context& c, const TensorType& weight) {
  for (std::int64_t k : kernel_of(weight)) {
    if (k < 1) {
      fail<ShapeMismatch>(c.op, "weight ", weight.shape.to_string(), " has an empty kernel");
    }
  }
}

// The window positions of a kernel sliding over x's spatial dims: each at least 1 (the dilated
// kernel fits the padded input) and within the tensor limit.
Sizes window_positions(const Context& c, const Shape& x, std::span<const std::int64_t> kernel,
                       const Sizes& stride, const Sizes& padding, const Sizes& dilation) {
  Sizes out(kernel.size());
  for (std::size_t d = 0; d < kernel.size(); ++d) {
    const std::int64_t in = x[d + 2];
    const Wide positions =
        spatial::conv_output_size<Wide>(in, kernel[d], stride[d], padding[d], dilation[d]);
    if (positions < 1) {
      const Wide extent = Wide{dilation[d]} * (kernel[d] - 1) + 1;
      fail<ShapeMismatch>(c.op, "kernel ", list(kernel), " (dilated extent ",
                          static_cast<double>(extent), " in spatial dim ", d,
                          ") is larger than the padded input (", in, " + 2 * ", padding[d],
                          ") of shape ", x.to_string());
    }
    out[d] = checked_output(c, positions, "output size");
  }
  return out;
}

// [N, channels, spatial...] within the tensor limit.
Shape channels_first(const Context& c, std::int64_t batch, std::int64_t channels,
                     std::span<const std::int64_t> spatial) {
  DimVector dims{batch, channels};
  for (std::int64_t s : spatial) dims.push_back(s);
  Shape out(std::move(dims));
  check_count(c, out);
  return out;
}

void check_spatial_not_empty(const Context& c, const TensorType& x, std::string_view what) {
  for (std::size_t d = 2; d < x.shape.rank(); ++d) {
    if (x.shape[d] < 1) {
      fail<ShapeMismatch>(c.op, what, " ", x.shape.to_string(), " has an empty spatial dim");
    }
  }
}

// ---- convolution ---------------------------------------------------------------------------

// The float operands of a convolution, of one dtype.
void check_conv_operands(const Context& c, const TensorType& x, const TensorType& weight,
                         const TensorType* bias) {
  check_float(c, x, "the input");
  check_float(c, weight, "the weight");
  check_same_dtype(c, weight, "weight", x, "the input");
  if (bias) {
    check_float(c, *bias, "the bias");
    check_same_dtype(c, *bias, "bias", x, "the input");
  }
}

void check_bias(const Context& c, const TensorType* bias, std::int64_t channels) {
  if (bias && (bias->shape.rank() != 1 || bias->shape[0] != channels)) {
    fail<ShapeMismatch>(c.op, "bias must have shape [", channels,
                        "] (one per output channel), got ", bias->shape.to_string());
  }
}

// conv's checks but the bias; its output shape.
Shape conv_output(const Context& c, const TensorType& x, const TensorType& weight,
                  const ConvOptions& options) {
  const std::size_t dims = spatial_dims_of(c, x, "input");
  if (weight.shape.rank() != x.shape.rank()) {
    fail<ShapeMismatch>(c.op, "weight must have rank ", x.shape.rank(), " (", dims,
                        " spatial dims), got shape ", weight.shape.to_string());
  }
  check_option(c, options.stride, dims, 1, "stride");
  check_option(c, options.padding, dims, 0, "padding");
  check_option(c, options.dilation, dims, 1, "dilation");
  const std::int64_t in_channels = x.shape[1], out_channels = weight.shape[0];
  check_groups(c, options.groups, in_channels, "input channels");
  check_groups(c, options.groups, out_channels, "output channels (weight dim 0)");
  if (weight.shape[1] != in_channels / options.groups) {
    fail<ShapeMismatch>(c.op, "weight ", weight.shape.to_string(), " expects ", weight.shape[1],
                        " input channels per group, but input ", x.shape.to_string(), " has ",
                        in_channels, " channels in ", options.groups, " groups");
  }
  check_kernel_not_empty(c, weight);
  const Sizes positions = window_positions(c, x.shape, kernel_of(weight), options.stride,
                                           options.padding, options.dilation);
  return channels_first(c, x.shape[0], out_channels, positions);
}

Types infer_conv(const Context& c, const TensorType& x, const TensorType& weight,
                 const TensorType* bias, const ConvOptions& options) {
  check_conv_operands(c, x, weight, bias);
  const Shape out = conv_output(c, x, weight, options);
  check_bias(c, bias, weight.shape[0]);
  return {{x.dtype, out}};
}

Types infer_conv_transpose(const Context& c, const TensorType& x, const TensorType& weight,
                           const TensorType* bias, const ConvTransposeOptions& options) {
  check_conv_operands(c, x, weight, bias);
  const std::size_t dims = spatial_dims_of(c, x, "input");
  if (weight.shape.rank() != x.shape.rank()) {
    fail<ShapeMismatch>(c.op, "weight must have rank ", x.shape.rank(), " (", dims,
                        " spatial dims), got shape ", weight.shape.to_string());
  }
  check_option(c, options.stride, dims, 1, "stride");
  check_option(c, options.padding, dims, 0, "padding");
  check_option(c, options.padding_out, dims, 0, "padding_out");
  check_option(c, options.dilation, dims, 1, "dilation");
  const std::int64_t in_channels = x.shape[1];
  check_groups(c, options.groups, in_channels, "input channels");
  if (weight.shape[0] != in_channels) {
    fail<ShapeMismatch>(c.op, "weight ", weight.shape.to_string(),
                        " must have the input's channel count ", in_channels, " in dim 0 (input ",
                        x.shape.to_string(), ")");
  }
  check_kernel_not_empty(c, weight);
  const auto kernel = kernel_of(weight);
  Sizes sizes(dims);
  for (std::size_t d = 0; d < dims; ++d) {
    if (options.padding_out[d] >= std::max(options.stride[d], options.dilation[d])) {
      fail<InvalidArgument>(c.op, "padding_out ", list(options.padding_out),
                            " must be smaller than stride ", list(options.stride), " or dilation ",
                            list(options.dilation));
    }
    const Wide out = spatial::conv_transpose_output_size<Wide>(
        x.shape[d + 2], kernel[d], options.stride[d], options.padding[d], options.dilation[d],
        options.padding_out[d]);
    sizes[d] = checked_output(c, out, "output size");
    if (out < 1) {
      fail<ShapeMismatch>(c.op, "output size ", static_cast<double>(out), " in spatial dim ", d,
                          " is not positive (input ", x.shape.to_string(), ", kernel ",
                          list(kernel), ", padding ", list(options.padding), ")");
    }
  }
  const std::int64_t out_channels =
      checked::mul(weight.shape[1], options.groups, c.op, "output channels");
  check_bias(c, bias, out_channels);
  return {{x.dtype, channels_first(c, x.shape[0], out_channels, sizes)}};
}

// A gradient of the convolution's output: its shape and dtype.
void check_output_grad(const Context& c, const TensorType& output_grad, const TensorType& x,
                       const Shape& expected) {
  check_float(c, output_grad, "the output gradient");
  check_same_dtype(c, output_grad, "the output gradient", x, "the input");
  check_shape(c, output_grad.shape, expected, "output gradients");
}

Types infer_conv_x_backward(const Context& c, const TensorType& x, const TensorType& weight,
                            const TensorType& output_grad, const ConvOptions& options) {
  check_conv_operands(c, x, weight, nullptr);
  check_output_grad(c, output_grad, x, conv_output(c, x, weight, options));
  return {x};
}

Types infer_conv_weight_backward(const Context& c, const TensorType& x, const TensorType& weight,
                                 const TensorType& output_grad, const ConvOptions& options) {
  check_conv_operands(c, x, weight, nullptr);
  check_output_grad(c, output_grad, x, conv_output(c, x, weight, options));
  return {weight};
}

// The sum of a convolution's output gradient over batch and space: one value per channel.
Types infer_conv_bias_backward(const Context& c, const TensorType& output_grad) {
  check_float(c, output_grad, "the output gradient");
  // Any [N, C, ...]: batch norm's gradient sums its [N, C] channels with it too.
  check_min_rank(c, output_grad, 2, "output gradient (N, C, ...)");
  return {{output_grad.dtype, Shape{output_grad.shape[1]}}};
}

// ---- pooling -------------------------------------------------------------------------------

// Pooling's checks (the tensor layer's pool_options on complete options); its output shape.
Shape pool_output(const Context& c, const TensorType& x, const PoolOptions& o, bool is_max) {
  check_float(c, x, "the input");
  const std::size_t dims = spatial_dims_of(c, x, "input");
  check_option(c, o.kernel_size, dims, 1, "kernel_size");
  check_option(c, o.stride, dims, 1, "stride");
  check_option(c, o.padding, dims, 0, "padding");
  check_option(c, o.dilation, dims, 1, "dilation");
  Sizes sizes(dims);
  for (std::size_t d = 0; d < dims; ++d) {
    if (2 * o.padding[d] > o.kernel_size[d]) {
      fail<InvalidArgument>(c.op, "padding ", list(o.padding),
                            " must be at most half of kernel_size ", list(o.kernel_size));
    }
    if (!is_max && o.dilation[d] != 1) {
      fail<InvalidArgument>(c.op, "dilation ", list(o.dilation), " is for max pooling only");
    }
    const std::int64_t in = x.shape[d + 2];
    const Wide out = spatial::pool_output_size<Wide>(in, o.kernel_size[d], o.stride[d],
                                                     o.padding[d], o.dilation[d], o.ceil_mode);
    if (out < 1) {
      fail<ShapeMismatch>(c.op, "pooling window ", list(o.kernel_size), " with dilation ",
                          list(o.dilation), " does not fit the padded input of shape ",
                          x.shape.to_string(), " in spatial dim ", d, " (padding ", o.padding[d],
                          ")");
    }
    sizes[d] = checked_output(c, out, "output size");
  }
  return channels_first(c, x.shape[0], x.shape[1], sizes);
}

Types infer_avg_pool(const Context& c, const TensorType& x, const PoolOptions& options) {
  return {{x.dtype, pool_output(c, x, options, false)}};
}

Types infer_avg_pool_backward(const Context& c, const TensorType& x, const TensorType& output_grad,
                              const PoolOptions& options) {
  check_output_grad(c, output_grad, x, pool_output(c, x, options, false));
  return {x};
}

Types infer_max_pool(const Context& c, const TensorType& x, const PoolOptions& options) {
  return {{x.dtype, pool_output(c, x, options, true)}};
}

Types infer_max_pool_with_indices(const Context& c, const TensorType& x, const PoolOptions& options,
                                  DType index_dtype) {
  const Shape out = pool_output(c, x, options, true);
  check_index_dtype(c, index_dtype);
  return {{x.dtype, out}, {index_dtype, out}};
}

Types infer_max_pool_with_indices_backward(const Context& c, const TensorType& x,
                                           const TensorType& output_grad, const TensorType& indices,
                                           const PoolOptions& options) {
  const Shape out = pool_output(c, x, options, true);
  check_output_grad(c, output_grad, x, out);
  check_int(c, indices, "indices");
  check_shape(c, indices.shape, out, "indices");
  return {x};
}

// Output sizes given by the caller: `dims` of them, each positive.
void check_output_size(const Context& c, const Axes& size, std::size_t dims) {
  if (size.size() != dims) {
    fail<InvalidArgument>(c.op, "output size ", list(size), " must have ", dims, " entries");
  }
  for (std::int64_t s : size) {
    if (s < 1) fail<InvalidArgument>(c.op, "output size ", list(size), " must be positive");
  }
}

// Window bounds are i * in / out: that product must stay in int64.
void check_adaptive_windows(const Context& c, const Shape& x, std::span<const std::int64_t> out) {
  for (std::size_t d = 0; d < out.size(); ++d) {
    if (static_cast<Wide>(out[d]) * x[d + 2] > (std::int64_t{1} << 62)) {
      fail<InvalidArgument>(c.op, "output size ", list(out), " is too large for input ",
                            x.to_string());
    }
  }
}

Types infer_adaptive_avg_pool(const Context& c, const TensorType& x, const Axes& output_size) {
  check_float(c, x, "the input");
  const std::size_t dims = output_size.size();
  if (dims < 1 || dims > 3) {
    fail<InvalidArgument>(c.op, "takes 1 to 3 spatial dims, got ", dims);
  }
  check_rank(c, x, dims + 2, "input");
  check_output_size(c, output_size, dims);
  check_spatial_not_empty(c, x, "input");
  const Shape out = channels_first(c, x.shape[0], x.shape[1], output_size);
  check_adaptive_windows(c, x.shape, output_size);
  return {{x.dtype, out}};
}

// The output gradient's spatial sizes are the forward's output size.
Types infer_adaptive_avg_pool_backward(const Context& c, const TensorType& x,
                                       const TensorType& output_grad) {
  check_float(c, x, "the input");
  spatial_dims_of(c, x, "input");
  check_spatial_not_empty(c, x, "input");
  check_float(c, output_grad, "the output gradient");
  check_same_dtype(c, output_grad, "the output gradient", x, "the input");
  check_rank(c, output_grad, x.shape.rank(), "the output gradient");
  if (output_grad.shape[0] != x.shape[0] || output_grad.shape[1] != x.shape[1]) {
    fail<ShapeMismatch>(c.op, "output gradients of shape ", output_grad.shape.to_string(),
                        " do not match the batch and channels of the input ", x.shape.to_string());
  }
  check_spatial_not_empty(c, output_grad, "the output gradient");
  check_adaptive_windows(c, x.shape, output_grad.shape.dims().subspan(2));
  return {x};
}

// ---- interpolation, patches ----------------------------------------------------------------

void check_mode(const Context& c, const InterpolateOptions& options) {
  if (static_cast<std::uint8_t>(options.mode) >
      static_cast<std::uint8_t>(InterpolateMode::Bicubic)) {
    fail<InvalidArgument>(c.op, "unknown interpolation mode ", static_cast<int>(options.mode));
  }
}

Shape interpolate_output(const Context& c, const TensorType& x, const Axes& output_size,
                         const InterpolateOptions& options) {
  check_float(c, x, "the input");
  check_rank(c, x, 4, "input");
  check_output_size(c, output_size, 2);
  check_spatial_not_empty(c, x, "input");
  check_mode(c, options);
  return channels_first(c, x.shape[0], x.shape[1], output_size);
}

Types infer_interpolate(const Context& c, const TensorType& x, const Axes& output_size,
                        const InterpolateOptions& options) {
  return {{x.dtype, interpolate_output(c, x, output_size, options)}};
}

Types infer_interpolate_backward(const Context& c, const TensorType& x,
                                 const TensorType& output_grad, const Axes& output_size,
                                 const InterpolateOptions& options) {
  check_output_grad(c, output_grad, x, interpolate_output(c, x, output_size, options));
  return {x};
}

// im2col / col2im over 2 spatial dims, options complete.
void check_unfold_options(const Context& c, const UnfoldOptions& o) {
  check_option(c, o.kernel_size, 2, 1, "kernel_size");
  check_option(c, o.stride, 2, 1, "stride");
  check_option(c, o.padding, 2, 0, "padding");
  check_option(c, o.dilation, 2, 1, "dilation");
}

Types infer_unfold_patches(const Context& c, const TensorType& x, const UnfoldOptions& options) {
  check_float(c, x, "the input");
  check_rank(c, x, 4, "input");
  check_unfold_options(c, options);
  const Sizes positions = window_positions(c, x.shape, options.kernel_size, options.stride,
                                           options.padding, options.dilation);
  const std::int64_t taps = checked::product(options.kernel_size, c.op, "the kernel taps");
  const std::int64_t rows = checked::mul(x.shape[1], taps, c.op, "the patch rows");
  const std::int64_t columns = checked::product(positions, c.op, "the window positions");
  const Shape out{x.shape[0], rows, columns};
  check_count(c, out);
  return {{x.dtype, out}};
}

Types infer_fold_patches(const Context& c, const TensorType& x, const Axes& output_size,
                         const UnfoldOptions& options) {
  check_float(c, x, "the input");
  if (x.shape.rank() != 3) {
    fail<ShapeMismatch>(c.op, "input must have rank 3 [N, C * kernel taps, L], got shape ",
                        x.shape.to_string());
  }
  check_output_size(c, output_size, 2);
  check_unfold_options(c, options);
  const Shape image{x.shape[0], 1, output_size[0], output_size[1]};
  const Sizes positions = window_positions(c, image, options.kernel_size, options.stride,
                                           options.padding, options.dilation);
  const std::int64_t taps = checked::product(options.kernel_size, c.op, "the kernel taps");
  if (x.shape[1] % taps != 0) {
    fail<ShapeMismatch>(c.op, "input dim 1 (", x.shape[1], ") is not a multiple of the ", taps,
                        " taps of kernel ", list(options.kernel_size));
  }
  const Shape out{x.shape[0], x.shape[1] / taps, output_size[0], output_size[1]};
  check_count(c, out);
  const std::int64_t windows =
      checked::mul(positions[0], positions[1], c.op, "the window positions");
  if (x.shape[2] != windows) {
    fail<ShapeMismatch>(c.op, "input has ", x.shape[2], " window positions but output size ",
                        list(output_size), " with kernel ", list(options.kernel_size), " gives ",
                        windows);
  }
  return {{x.dtype, out}};
}

// ---- linear algebra, normalisation, attention ------------------------------------------------

// indices [...] pick rows of weights [V, E]: [..., E].
Shape embedding_output(const Context& c, const TensorType& weights, const TensorType& indices) {
  if (!quantized(weights)) check_float(c, weights, "the weights");
  check_int(c, indices, "indices");
  check_rank(c, weights, 2, "weights [V, E]");
  DimVector dims(indices.shape.vector());
  dims.push_back(weights.shape[1]);
  Shape out(std::move(dims));
  check_count(c, out);
  return out;
}

// A QFloat table's rows are looked up decoded, as f32.
Types infer_embedding(const Context& c, const TensorType& weights, const TensorType& indices) {
  const DType dtype = quantized(weights) ? DType::F32 : weights.dtype;
  return {{dtype, embedding_output(c, weights, indices)}};
}

Types infer_embedding_backward(const Context& c, const TensorType& weights,
                               const TensorType& output_grad, const TensorType& indices) {
  check_output_grad(c, output_grad, weights, embedding_output(c, weights, indices));
  return {weights};
}

// x [..., in] @ weight [in, out] (+ bias [out]); a QFloat weight gives x's dtype.
Types infer_linear(const Context& c, const TensorType& x, const TensorType& weight,
                   const TensorType* bias) {
  check_float(c, x, "the input");
  if (!quantized(weight)) check_float(c, weight, "the weight");
  if (bias) check_float(c, *bias, "the bias");
  check_rank(c, weight, 2, "weight [in, out]");
  check_min_rank(c, x, 1, "input");
  const std::int64_t in = x.shape[x.shape.rank() - 1];
  if (weight.shape[0] != in) {
    fail<ShapeMismatch>(c.op, "input shape ", x.shape.to_string(), " has ", in,
                        " features but weight [in, out] has shape ", weight.shape.to_string());
  }
  if (bias) check_vector(c, *bias, weight.shape[1], "bias");
  if (!quantized(weight)) check_same_dtype(c, weight, "weight", x, "the input");
  if (bias) check_same_dtype(c, *bias, "bias", x, "the input");
  const Shape out = with_dim(x.shape, x.shape.rank() - 1, weight.shape[1]);
  check_count(c, out);
  return {{x.dtype, out}};
}

void check_epsilon(const Context& c, double epsilon) {
  if (!(epsilon >= 0) || std::isinf(epsilon)) {
    fail<InvalidArgument>(c.op, "epsilon must be finite and >= 0, got ", epsilon);
  }
}

Types infer_layer_norm(const Context& c, const TensorType& x, const TensorType& gamma,
                       const TensorType* beta, double epsilon) {
  check_float(c, x, "the input");
  check_float(c, gamma, "gamma");
  if (beta) check_float(c, *beta, "beta");
  check_min_rank(c, x, 1, "input");
  const std::int64_t width = x.shape[x.shape.rank() - 1];
  check_vector(c, gamma, width, "gamma");
  if (beta) check_vector(c, *beta, width, "beta");
  check_epsilon(c, epsilon);
  check_same_dtype(c, gamma, "gamma", x, "the input");
  if (beta) check_same_dtype(c, *beta, "beta", x, "the input");
  return {x};
}

Types infer_layer_norm_backward(const Context& c, const TensorType& x, const TensorType& gamma,
                                const TensorType& grad, double epsilon) {
  check_float(c, x, "the input");
  check_float(c, gamma, "gamma");
  check_float(c, grad, "grad");
  check_min_rank(c, x, 1, "input");
  const std::int64_t width = x.shape[x.shape.rank() - 1];
  check_vector(c, gamma, width, "gamma");
  check_shape(c, grad.shape, x.shape, "grad");
  check_epsilon(c, epsilon);
  check_same_dtype(c, gamma, "gamma", x, "the input");
  check_same_dtype(c, grad, "grad", x, "the input");
  return {x, {x.dtype, Shape{width}}};
}

Types infer_batch_norm(const Context& c, const TensorType& x, const TensorType& gamma,
                       const TensorType& beta, const TensorType& mean, const TensorType& variance,
                       double epsilon) {
  const std::pair<const TensorType*, const char*> parameters[] = {
      {&gamma, "gamma"}, {&beta, "beta"}, {&mean, "mean"}, {&variance, "variance"}};
  check_float(c, x, "the input");
  for (const auto& [p, name] : parameters) check_float(c, *p, name);
  check_min_rank(c, x, 2, "input (N, C, ...)");
  for (const auto& [p, name] : parameters) check_vector(c, *p, x.shape[1], name);
  check_epsilon(c, epsilon);
  for (const auto& [p, name] : parameters) check_same_dtype(c, *p, name, x, "the input");
  return {x};
}

// softmax(q k^T * scale + bias, masked) v on [batch, heads, seq, dim]; batch and heads broadcast.
Types infer_attention(const Context& c, const TensorType& query, const TensorType& key,
                      const TensorType& value, const TensorType* mask, const TensorType* bias,
                      const TensorType* dropout_seed, const AttentionOptions& options) {
  if (!(options.dropout >= 0.0 && options.dropout <= 1.0)) {
    fail<InvalidArgument>(c.op, "dropout must be in [0, 1], got ", options.dropout);
  }
  if ((dropout_seed != nullptr) != (options.dropout > 0.0)) {
    fail<InvalidArgument>(c.op, "a dropout seed goes with a dropout above 0 (dropout ",
                          options.dropout, ", ", dropout_seed ? "a seed" : "no seed", ")");
  }
  if (dropout_seed && (dropout_seed->dtype != DType::I64 || dropout_seed->shape != Shape{1})) {
    fail<InvalidArgument>(c.op, "the dropout seed must be I64 [1], got ",
                          dtype_text(dropout_seed->dtype), " ", dropout_seed->shape.to_string());
  }
  check_float(c, query, "the query");
  check_float(c, key, "the key");
  check_float(c, value, "the value");
  if (mask) check_bool(c, *mask, "the mask");
  if (bias) check_float(c, *bias, "the bias");
  check_rank(c, query, 4, "query [B, H, Sq, D]");
  check_rank(c, key, 4, "key [B, H, Sk, D]");
  check_rank(c, value, 4, "value [B, H, Sk, Dv]");
  const Shape& q = query.shape;
  const Shape& k = key.shape;
  const Shape& v = value.shape;
  auto shapes = [&] {
    return detail::concat("query ", q.to_string(), ", key ", k.to_string(), ", value ",
                          v.to_string());
  };
  if (k[3] != q[3]) fail<ShapeMismatch>(c.op, "query and key dims differ: ", shapes());
  if (v[2] != k[2]) fail<ShapeMismatch>(c.op, "key and value lengths differ: ", shapes());
  Shape scores{1, 1, q[2], k[2]};
  for (std::size_t d = 0; d < 2; ++d) {
    std::int64_t n = 1;
    for (const Shape* s : {&q, &k, &v}) {
      if ((*s)[d] != 1 && n != 1 && (*s)[d] != n) {
        fail<ShapeMismatch>(c.op, "batch and head dims cannot be broadcast: ", shapes());
      }
      if ((*s)[d] != 1) n = (*s)[d];
    }
    scores[d] = n;
  }
  check_count(c, scores);
  if (mask && !broadcasts_to(mask->shape, scores)) {
    fail<ShapeMismatch>(c.op, "mask shape ", mask->shape.to_string(),
                        " does not broadcast to the scores ", scores.to_string());
  }
  if (bias && !broadcasts_to(bias->shape, scores)) {
    fail<ShapeMismatch>(c.op, "bias shape ", bias->shape.to_string(),
                        " does not broadcast to the scores ", scores.to_string());
  }
  if (options.scale && !std::isfinite(*options.scale)) {
    fail<InvalidArgument>(c.op, "scale must be finite, got ", *options.scale);
  }
  check_same_dtype(c, key, "key", query, "query");
  check_same_dtype(c, value, "value", query, "query");
  if (bias) check_same_dtype(c, *bias, "bias", query, "query");
  const Shape out{scores[0], scores[1], q[2], v[3]};
  check_count(c, out);
  return {{query.dtype, out}};
}

// The backward ops' arguments: an attention the forward rule takes, and its output and the
// output's gradient of the forward's type.
void check_attention_backward(const Context& c, const TensorType& query, const TensorType& key,
                              const TensorType& value, const TensorType& output,
                              const TensorType& output_grad, const TensorType* mask,
                              const TensorType* bias, const TensorType* dropout_seed,
                              const AttentionOptions& options) {
  const TensorType forward =
      infer_attention(c, query, key, value, mask, bias, dropout_seed, options)[0];
  for (const TensorType* t : {&output, &output_grad}) {
    const char* what = t == &output ? "output" : "output gradient";
    if (t->shape != forward.shape) {
      fail<ShapeMismatch>(c.op, "the ", what, " has shape ", t->shape.to_string(),
                          ", the attention's is ", forward.shape.to_string());
    }
    check_same_dtype(c, *t, what, query, "query");
  }
}

Types infer_attention_query_backward(const Context& c, const TensorType& query,
                                     const TensorType& key, const TensorType& value,
                                     const TensorType& output, const TensorType& output_grad,
                                     const TensorType* mask, const TensorType* bias,
                                     const TensorType* dropout_seed,
                                     const AttentionOptions& options) {
  check_attention_backward(c, query, key, value, output, output_grad, mask, bias, dropout_seed,
                           options);
  return {query};
}

Types infer_attention_key_value_backward(const Context& c, const TensorType& query,
                                         const TensorType& key, const TensorType& value,
                                         const TensorType& output, const TensorType& output_grad,
                                         const TensorType* mask, const TensorType* bias,
                                         const TensorType* dropout_seed,
                                         const AttentionOptions& options) {
  check_attention_backward(c, query, key, value, output, output_grad, mask, bias, dropout_seed,
                           options);
  return {key, value};
}

// ---- activations ---------------------------------------------------------------------------

Types float_same(const Context& c, const TensorType& x) {
  check_float(c, x, "the input");
  return {x};
}

Types infer_relu(const Context& c, const TensorType& x) { return float_same(c, x); }
Types infer_gelu(const Context& c, const TensorType& x) { return float_same(c, x); }
Types infer_silu(const Context& c, const TensorType& x) { return float_same(c, x); }
Types infer_log_sigmoid(const Context& c, const TensorType& x) { return float_same(c, x); }
Types infer_leaky_relu(const Context& c, const TensorType& x, const Scalar&) {
  return float_same(c, x);
}
Types infer_hard_sigmoid(const Context& c, const TensorType& x, const Scalar&, const Scalar&) {
  return float_same(c, x);
}

// The fused gradients of activations: the forward's tensor and the output gradient, one dtype
// and one shape.
Types activation_backward(const Context& c, const TensorType& forward, const TensorType& grad) {
  check_float(c, forward, "the forward tensor");
  check_float(c, grad, "the gradient");
  check_same_dtype(c, grad, "the gradient", forward, "the forward tensor");
  check_shape(c, grad.shape, forward.shape, "gradients");
  return {grad};
}

Types infer_relu_backward(const Context& c, const TensorType& output, const TensorType& grad) {
  return activation_backward(c, output, grad);
}
Types infer_gelu_backward(const Context& c, const TensorType& x, const TensorType& grad) {
  return activation_backward(c, x, grad);
}
Types infer_sigmoid_backward(const Context& c, const TensorType& output, const TensorType& grad) {
  return activation_backward(c, output, grad);
}

Types infer_prelu(const Context& c, const TensorType& x, const TensorType& alpha) {
  check_float(c, x, "the input");
  check_float(c, alpha, "alpha");
  if (alpha.shape.rank() != x.shape.rank() || broadcast(c, x.shape, alpha.shape) != x.shape) {
    fail<ShapeMismatch>(c.op, "alpha of shape ", alpha.shape.to_string(),
                        " does not broadcast to the input's shape ", x.shape.to_string());
  }
  check_same_dtype(c, alpha, "alpha", x, "the input");
  return {x};
}

Types along(const Context& c, const TensorType& x, std::int64_t dim) {
  check_float(c, x, "the input");
  dim_of(c, dim, x.shape.rank());
  return {x};
}

Types infer_softmax(const Context& c, const TensorType& x, std::int64_t dim) {
  return along(c, x, dim);
}
Types infer_log_softmax(const Context& c, const TensorType& x, std::int64_t dim) {
  return along(c, x, dim);
}
Types infer_softmin(const Context& c, const TensorType& x, std::int64_t dim) {
  return along(c, x, dim);
}
Types infer_softmax_cross_entropy(const Context& c, const TensorType& logits,
                                  const TensorType& target) {
  check_float(c, logits, "logits");
  check_int(c, target, "target");
  if (logits.shape.rank() != 2 || target.shape.rank() != 1 || target.shape[0] != logits.shape[0]) {
    fail<ShapeMismatch>(c.op, "logits ", logits.shape.to_string(),
                        " must be [rows, classes] and target ", target.shape.to_string(),
                        " [rows]");
  }
  if (logits.shape[1] == 0 && logits.shape[0] > 0) {
    fail<InvalidArgument>(c.op, "logits ", logits.shape.to_string(),
                          " have no classes to pick from");
  }
  return {{defaults::compute_dtype(logits.dtype), Shape{logits.shape[0]}}};
}

// ---- dispatch ------------------------------------------------------------------------------

// An op declared for an issue not yet landed: no backend runs it (the base throws).
constexpr auto kLater = [](const Context& c, const auto&...) -> Types {
  fail<UnsupportedOperation>(c.op, "is declared for an issue not yet landed (ops.def: LATER)");
};

// Collectives never travel: a client's RemoteBackend runs them through its own process group
// (the contract's defaults, which read the values back), so a server refuses them.
constexpr auto kLocalOnly = [](const Context& c, const auto&...) -> Types {
  fail<UnsupportedOperation>(c.op,
                             "is a collective: it runs in the process of its group, "
                             "never on a server");
};
constexpr auto infer_all_reduce = kLocalOnly;
constexpr auto infer_broadcast_from = kLocalOnly;
constexpr auto infer_all_gather = kLocalOnly;
constexpr auto infer_reduce_scatter = kLocalOnly;
constexpr auto infer_send = kLocalOnly;
constexpr auto infer_recv = kLocalOnly;

// The op's arguments, read by the Backend method's parameter positions.
struct Arguments {
  const ir::Op& op;
  std::span<const TensorType* const> types;
  std::size_t list_size;
};

// What a rule takes for a parameter of type P.
template <class P>
struct RuleArgument {
  using type = const P&;
};
template <>
struct RuleArgument<Primitive> {
  using type = const TensorType&;
};
template <>
struct RuleArgument<OptionalPrimitive> {
  using type = const TensorType*;
};
template <>
struct RuleArgument<PrimitiveList> {
  using type = std::span<const TensorType* const>;
};
template <>
struct RuleArgument<Device> {
  using type = const ir::DeviceAttr&;
};
template <>
struct RuleArgument<ProcessGroup> {
  using type = const ir::GroupAttr&;
};

template <OpCode code, std::size_t I, class P>
typename RuleArgument<P>::type argument(const Arguments& in) {
  constexpr std::size_t first = ir::internal::tensors_before<code>(I);
  const std::size_t k = ir::internal::list_before<code>(I) ? first + in.list_size - 1 : first;
  if constexpr (std::is_same_v<P, Primitive>) {
    return *in.types[k];
  } else if constexpr (std::is_same_v<P, OptionalPrimitive>) {
    return in.types[k];
  } else if constexpr (std::is_same_v<P, PrimitiveList>) {
    return in.types.subspan(k, in.list_size);
  } else {
    using A = typename ir::internal::AttributeFor<P>::type;
    return std::get<A>(in.op.attributes[ir::internal::attributes_before<code>(I)]);
  }
}

// rule(c, arguments...) with the op's arguments as the rule's parameter types.
template <OpCode code, class... P, class Rule, std::size_t... I>
Types call_rule(const Arguments& in, const Context& c, Rule rule, std::index_sequence<I...>) {
  return rule(c, argument<code, I, P>(in)...);
}

template <OpCode code, class Rule, class R, class... P>
Types apply_rule(const Arguments& in, const Context& c, Rule rule, R (Backend::*)(P...)) {
  return call_rule<code, P...>(in, c, rule, std::index_sequence_for<P...>{});
}

template <OpCode code, class Rule>
Types apply(const Arguments& in, const Context& c, Rule rule) {
  return apply_rule<code>(in, c, rule, ir::OpTraits<code>::kMethod);
}

// The rule of each op: by availability (LATER ops have none), then by form.
#define KILN_INFER_RULE_REQUIRED(name, group, form) KILN_INFER_FORM_##form(name, group)
#define KILN_INFER_RULE_DEFAULT(name, group, form) KILN_INFER_FORM_##form(name, group)
#define KILN_INFER_RULE_LATER(name, group, form) kLater
#define KILN_INFER_FORM_UNARY(name, group) infer_unary
#define KILN_INFER_FORM_BINARY(name, group) infer_binary
#define KILN_INFER_FORM_SCALAR(name, group) infer_scalar
#define KILN_INFER_FORM_COMPARE(name, group) infer_compare
#define KILN_INFER_FORM_COMPARE_SCALAR(name, group) infer_compare_scalar
#define KILN_INFER_FORM_PREDICATE(name, group) infer_predicate
#define KILN_INFER_FORM_REDUCE(name, group) infer_reduce
#define KILN_INFER_FORM_REDUCE_NONEMPTY(name, group) infer_reduce_nonempty
#define KILN_INFER_FORM_DIM(name, group)                        \
  [](const Context& c, const TensorType& x, std::int64_t dim) { \
    return along_dim(c, x, dim, kDimReduces_##group, false);    \
  }
#define KILN_INFER_FORM_DIM_NONEMPTY(name, group)               \
  [](const Context& c, const TensorType& x, std::int64_t dim) { \
    return along_dim(c, x, dim, kDimReduces_##group, true);     \
  }
#define KILN_INFER_FORM_MANUAL(name, group) infer_##name

Types dispatch(const Arguments& in) {
  switch (in.op.code) {
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  case OpCode::name:                                                                     \
    return apply<OpCode::name>(in, Context{#name, kKinds_##kinds},                       \
                               KILN_INFER_RULE_##availability(name, group, form));
#include "kiln/detail/ops.def"
#undef KILN_OP
  }
  fail<InvalidArgument>("infer_types", "unknown op code ", static_cast<int>(in.op.code));
}

#undef KILN_INFER_RULE_REQUIRED
#undef KILN_INFER_RULE_DEFAULT
#undef KILN_INFER_RULE_LATER
#undef KILN_INFER_FORM_UNARY
#undef KILN_INFER_FORM_BINARY
#undef KILN_INFER_FORM_SCALAR
#undef KILN_INFER_FORM_COMPARE
#undef KILN_INFER_FORM_COMPARE_SCALAR
#undef KILN_INFER_FORM_PREDICATE
#undef KILN_INFER_FORM_REDUCE
#undef KILN_INFER_FORM_REDUCE_NONEMPTY
#undef KILN_INFER_FORM_DIM
#undef KILN_INFER_FORM_DIM_NONEMPTY
#undef KILN_INFER_FORM_MANUAL

// ---- the op's structure and its inputs' types ------------------------------------------------

// op against its ops.def signature (what check_op checks, so that no attribute is read as the
// wrong type), and inputs against op.inputs. Returns the length of its tensor list.
std::size_t check_structure(const ir::Op& op, std::span<const TensorType* const> inputs,
                            std::string_view name) {
  const ir::OpSignature& sig = ir::signature(op.code);
  const std::size_t fixed = sig.tensors;
  if (sig.tensor_list ? op.inputs.size() < fixed : op.inputs.size() != fixed) {
    fail<InvalidArgument>(name, op.inputs.size(), " tensor inputs where ops.def has ",
                          sig.tensor_list ? "at least " : "", fixed);
  }
  if (inputs.size() != op.inputs.size()) {
    fail<InvalidArgument>(name, inputs.size(), " input types given for ", op.inputs.size(),
                          " tensor inputs");
  }
  if (op.attributes.size() != sig.attributes) {
    fail<InvalidArgument>(name, op.attributes.size(), " attributes where ops.def has ",
                          static_cast<int>(sig.attributes));
  }
  const std::size_t list_size = sig.tensor_list ? op.inputs.size() - fixed : 0;
  std::size_t input = 0, attribute = 0;
  for (const ir::Param& param : sig.params) {
    if (param.slot == ir::SlotKind::Attribute) {
      const ir::AttributeKind kind = ir::kind_of(op.attributes[attribute++]);
      if (kind != param.attribute) {
        fail<InvalidArgument>(name, "attribute ", param.name, " is a ",
                              ir::attribute_kind_name(kind), " where ops.def has a ",
                              ir::attribute_kind_name(param.attribute));
      }
      continue;
    }
    const std::size_t count = param.slot == ir::SlotKind::TensorList ? list_size : 1;
    for (std::size_t k = input; k < input + count; ++k) {
      const bool absent = op.inputs[k] == ir::kNoTensor;
      if (absent && param.slot != ir::SlotKind::OptionalTensor) {
        fail<InvalidArgument>(name, "tensor ", param.name, " is missing");
      }
      if (absent != (inputs[k] == nullptr)) {
        fail<InvalidArgument>(name, "input ", k, " ",
                              absent ? "is absent but has a type" : "has no type");
      }
    }
    input += count;
  }
  return list_size;
}

// Whether input k of the op may be QFloat: where the tensor layer hands a QFloat tensor over as
// it is (ops.def's quantized group names them), the reads and moves; every other op gets it
// dequantized.
bool takes_quantized(OpCode code, std::size_t k) {
  switch (code) {
    case OpCode::matmul:
    case OpCode::linear:
      return k == 1;
    case OpCode::embedding:
    case OpCode::permute:
    case OpCode::swap_dims:
    case OpCode::slice:
    case OpCode::dequantize:
    case OpCode::into_data:
    case OpCode::to_device:
      return k == 0;
    case OpCode::read_many:
      return true;
    default:
      return false;
  }
}

// An input type a tensor could have: a dtype the enum defines, dims >= 0, at most 2^48
// elements; a QFloat one where the op takes it, with blocks its shape can have.
void check_input_type(const TensorType& type, std::size_t k, OpCode code, std::string_view name) {
  if (!valid_dtype(type.dtype)) {
    fail<InvalidArgument>(name, "input ", k, " has an unknown dtype ",
                          static_cast<int>(type.dtype));
  }
  checked::check_shape(type.shape, name);
  if (!quantized(type)) return;
  if (!takes_quantized(code, k)) {
    fail<UnsupportedDType>(name, "input ", k,
                           " is qfloat: the tensor layer gives this op its values dequantized");
  }
  if (std::string problem = quant_problem(type); !problem.empty()) {
    fail<InvalidArgument>(name, "input ", k, ": ", problem);
  }
}

// A result: dims >= 0 (or -1 where the values decide, ops of impl V) and at most 2^48 elements.
void check_result(const TensorType& type, bool value_shape, std::string_view name) {
  DimVector known;
  for (std::int64_t d : type.shape.dims()) {
    if (value_shape && d == -1) continue;
    if (d < 0) fail<InvalidArgument>(name, "result shape ", type.shape.to_string(), " is negative");
    known.push_back(d);
  }
  checked::check_shape(Shape(std::move(known)), name);
}

}  // namespace

ir::TensorType type_of(const TensorData& data) {
  if (data.dtype() != DType::QFloat) return {data.dtype(), data.shape()};
  return {DType::QFloat, data.shape(), data.scheme()};
}

Shape stored_shape(const TensorType& type) {
  Shape stored = type.shape;
  for (std::size_t i = 0; i < type.axes.size(); ++i)
    stored[static_cast<std::size_t>(type.axes[i])] = type.shape[i];
  return stored;
}

std::string quant_problem(const TensorType& type) {
  if (type.dtype != DType::QFloat) return {};
  const std::size_t rank = type.shape.rank();
  std::vector<bool> seen(rank, false);
  for (std::int64_t axis : type.axes) {
    if (type.axes.size() != rank || axis < 0 || static_cast<std::size_t>(axis) >= rank ||
        seen[static_cast<std::size_t>(axis)]) {
      return "qfloat axes " + list(type.axes) + " are not a permutation of the dims of " +
             type.shape.to_string();
    }
    seen[static_cast<std::size_t>(axis)] = true;
  }
  try {
    (void)quantized_bytes(stored_shape(type), type.scheme, "qfloat");
  } catch (const Error& error) {
    return error.what();
  }
  return {};
}

std::vector<ir::TensorType> infer_types(const ir::Op& op,
                                        std::span<const ir::TensorType* const> inputs) {
  if (static_cast<std::size_t>(op.code) >= all_ops().size()) {
    fail<InvalidArgument>("infer_types", "unknown op code ", static_cast<int>(op.code));
  }
  const std::string_view name = ir::signature(op.code).name;
  const std::size_t list_size = check_structure(op, inputs, name);
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k]) check_input_type(*inputs[k], k, op.code, name);
  }
  Types out = dispatch(Arguments{op, inputs, list_size});
  const bool value_shape = op_info(op.code).value_shape;
  for (const TensorType& type : out) check_result(type, value_shape, name);
  return out;
}

}  // namespace kiln::remote
