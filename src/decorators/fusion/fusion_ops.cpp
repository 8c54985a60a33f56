// The ops the fusion decorator records (impl F in ops.def): each gives the dtype and shape of its
// result, its parameters (scalars, dim, dtype) and how to run it; the common forms are generated
// from ops.def, the MANUAL ones written out below.
#include <span>
#include <utility>

#include "contract/strided.h"
#include "decorators/fusion/fusion_backend.h"

namespace kiln::fusion {
namespace {

using Inputs = std::span<Primitive>;
using Params = const StepParams&;

Shape broadcast(const Primitive& a, const Primitive& b, const char* op) {
  return a->shape() == b->shape() ? a->shape()
                                  : strided::broadcast_shapes(a->shape(), b->shape(), op);
}

// An op along dim of x: a reduction keeps the dim with size 1, the others keep x's shape.
Shape along(const Primitive& x, std::int64_t dim, OpCode op) {
  Shape shape = x->shape();
  if (op_info(op).group == "reduce") shape[static_cast<std::size_t>(dim)] = 1;
  return shape;
}

StepParams scalars(Scalar a, Scalar b = Scalar()) {
  StepParams p;
  p.scalars = {a, b};
  return p;
}
StepParams along_dim(std::int64_t dim) {
  StepParams p;
  p.dim = dim;
  return p;
}

}  // namespace

#define KILN_FUSE_ELEMENTWISE_1(name, result_dtype)                                            \
  Primitive FusionBackend::name(Primitive x) {                                                 \
    const DType dtype = result_dtype;                                                          \
    Shape shape = x->shape();                                                                  \
    return record(                                                                             \
        OpCode::name, dtype, std::move(shape), {}, {std::move(x)},                             \
        [](Backend& b, Inputs in, Params, const Shape&) { return b.name(std::move(in[0])); }); \
  }
#define KILN_FUSE_ELEMENTWISE_2(name, result_dtype)                                            \
  Primitive FusionBackend::name(Primitive lhs, Primitive rhs) {                                \
    const DType dtype = result_dtype;                                                          \
    Shape shape = broadcast(lhs, rhs, #name);                                                  \
    return record(OpCode::name, dtype, std::move(shape), {}, {std::move(lhs), std::move(rhs)}, \
                  [](Backend& b, Inputs in, Params, const Shape&) {                            \
                    return b.name(std::move(in[0]), std::move(in[1]));                         \
                  });                                                                          \
  }
#define KILN_FUSE_ELEMENTWISE_SCALAR(name, result_dtype)                                 \
  Primitive FusionBackend::name(Primitive x, Scalar value) {                             \
    const DType dtype = result_dtype;                                                    \
    Shape shape = x->shape();                                                            \
    return record(OpCode::name, dtype, std::move(shape), scalars(value), {std::move(x)}, \
                  [](Backend& b, Inputs in, Params p, const Shape&) {                    \
                    return b.name(std::move(in[0]), p.scalars[0]);                       \
                  });                                                                    \
  }
#define KILN_FUSE_FORM_UNARY(name) KILN_FUSE_ELEMENTWISE_1(name, x->dtype())
#define KILN_FUSE_FORM_PREDICATE(name) KILN_FUSE_ELEMENTWISE_1(name, DType::Bool)
#define KILN_FUSE_FORM_BINARY(name) KILN_FUSE_ELEMENTWISE_2(name, lhs->dtype())
#define KILN_FUSE_FORM_COMPARE(name) KILN_FUSE_ELEMENTWISE_2(name, DType::Bool)
#define KILN_FUSE_FORM_SCALAR(name) KILN_FUSE_ELEMENTWISE_SCALAR(name, x->dtype())
#define KILN_FUSE_FORM_COMPARE_SCALAR(name) KILN_FUSE_ELEMENTWISE_SCALAR(name, DType::Bool)
#define KILN_FUSE_FORM_DIM(name)                                                         \
  Primitive FusionBackend::name(Primitive x, std::int64_t dim) {                         \
    const DType dtype = x->dtype();                                                      \
    Shape shape = along(x, dim, OpCode::name);                                           \
    return record(OpCode::name, dtype, std::move(shape), along_dim(dim), {std::move(x)}, \
                  [](Backend& b, Inputs in, Params p, const Shape&) {                    \
                    return b.name(std::move(in[0]), p.dim);                              \
                  });                                                                    \
  }
#define KILN_FUSE_FORM_DIM_NONEMPTY(name) KILN_FUSE_FORM_DIM(name)
#define KILN_FUSE_FORM_REDUCE(name)
#define KILN_FUSE_FORM_REDUCE_NONEMPTY(name)
#define KILN_FUSE_FORM_MANUAL(name)  // written out below
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  KILN_WHEN(KILN_IMPL_FUSE(impl))(KILN_FUSE_FORM_##form(name))
#include "kiln/detail/ops.def"
#undef KILN_OP

// ---- MANUAL ops with F ----

// The values random would draw now: their place in the device's stream is reserved at the call,
// in program order, so neither an op run in between nor a seed changes them. Where the inner
// backend cannot reserve (or cannot store the dtype: its error comes at the call), random runs
// at once.
Primitive FusionBackend::random(Shape shape, Distribution distribution, DType dtype,
                                Device device) {
  std::optional<RandomStream> at;
  if (inner().dtype_usage(dtype).contains(DTypeUsage::Storage)) {
    at = inner().reserve_random(static_cast<std::uint64_t>(shape.num_elements()));
  }
  if (!at) return FusionPassthrough::random(std::move(shape), distribution, dtype, device);
  StepParams params;
  params.dtype = dtype;
  params.distribution = distribution;
  params.stream = *at;
  return record(OpCode::random, dtype, std::move(shape), params, {},
                [](Backend& b, Inputs, Params p, const Shape& result) {
                  const DrawRandomAt pin(p.stream);
                  return b.random(result, p.distribution, p.dtype, b.device());
                });
}

Primitive FusionBackend::cast(Primitive x, DType dtype) {
  Shape shape = x->shape();
  StepParams params;
  params.dtype = dtype;
  return record(OpCode::cast, dtype, std::move(shape), params, {std::move(x)},
                [](Backend& b, Inputs in, Params p, const Shape&) {
                  return b.cast(std::move(in[0]), p.dtype);
                });
}

Primitive FusionBackend::clamp(Primitive x, Scalar min, Scalar max) {
  const DType dtype = x->dtype();
  Shape shape = x->shape();
  return record(OpCode::clamp, dtype, std::move(shape), scalars(min, max), {std::move(x)},
                [](Backend& b, Inputs in, Params p, const Shape&) {
                  return b.clamp(std::move(in[0]), p.scalars[0], p.scalars[1]);
                });
}
KILN_FUSE_ELEMENTWISE_SCALAR(clamp_min, x->dtype())
KILN_FUSE_ELEMENTWISE_SCALAR(clamp_max, x->dtype())
KILN_FUSE_ELEMENTWISE_SCALAR(leaky_relu, x->dtype())

Primitive FusionBackend::hard_sigmoid(Primitive x, Scalar alpha, Scalar beta) {
  const DType dtype = x->dtype();
  Shape shape = x->shape();
  return record(OpCode::hard_sigmoid, dtype, std::move(shape), scalars(alpha, beta), {std::move(x)},
                [](Backend& b, Inputs in, Params p, const Shape&) {
                  return b.hard_sigmoid(std::move(in[0]), p.scalars[0], p.scalars[1]);
                });
}

Primitive FusionBackend::mask_where(Primitive x, Primitive mask, Primitive values) {
  const DType dtype = x->dtype();
  Shape shape =
      strided::broadcast_shapes(broadcast(x, mask, "mask_where"), values->shape(), "mask_where");
  return record(OpCode::mask_where, dtype, std::move(shape), {},
                {std::move(x), std::move(mask), std::move(values)},
                [](Backend& b, Inputs in, Params, const Shape&) {
                  return b.mask_where(std::move(in[0]), std::move(in[1]), std::move(in[2]));
                });
}

Primitive FusionBackend::mask_fill(Primitive x, Primitive mask, Scalar value) {
  const DType dtype = x->dtype();
  Shape shape = broadcast(x, mask, "mask_fill");
  return record(OpCode::mask_fill, dtype, std::move(shape), scalars(value),
                {std::move(x), std::move(mask)}, [](Backend& b, Inputs in, Params p, const Shape&) {
                  return b.mask_fill(std::move(in[0]), std::move(in[1]), p.scalars[0]);
                });
}

// ---- products: a group's head (contract/fused_program.h) ----
// Their inputs are computed now: a product reads whole operands, so their groups would run before
// it anyway, and its own group starts with it; the ops after it may become its epilogue.

Primitive FusionBackend::matmul(Primitive lhs, Primitive rhs) {
  const Shape& a = lhs->shape();
  const Shape& b = rhs->shape();
  const Shape batch = strided::broadcast_shapes(
      Shape(std::span<const std::int64_t>(a.dims().data(), a.rank() - 2)),
      Shape(std::span<const std::int64_t>(b.dims().data(), b.rank() - 2)), "matmul");
  detail::DimVector dims(batch.vector());
  dims.push_back(a[a.rank() - 2]);
  dims.push_back(b[b.rank() - 1]);
  const DType dtype = lhs->dtype();
  Primitive l = computed(lhs), r = computed(rhs);
  lhs.reset();
  rhs.reset();
  return record(OpCode::matmul, dtype, Shape(std::move(dims)), {}, {std::move(l), std::move(r)},
                [](Backend& be, Inputs in, Params, const Shape&) {
                  return be.matmul(std::move(in[0]), std::move(in[1]));
                });
}

Primitive FusionBackend::linear(Primitive x, Primitive weight, OptionalPrimitive bias) {
  Shape shape = x->shape();
  shape[shape.rank() - 1] = weight->shape()[1];
  const DType dtype = x->dtype();
  RecordInputs inputs = bias ? RecordInputs(computed(x), computed(weight), computed(*bias))
                             : RecordInputs(computed(x), computed(weight));
  x.reset();
  weight.reset();
  bias.reset();
  return record(OpCode::linear, dtype, std::move(shape), {}, std::move(inputs),
                [](Backend& be, Inputs in, Params, const Shape&) {
                  // A third input is the bias.
                  OptionalPrimitive b;
                  if (in.size() == 3) b = std::move(in[2]);
                  return be.linear(std::move(in[0]), std::move(in[1]), std::move(b));
                });
}

KILN_FUSE_ELEMENTWISE_1(relu, x->dtype())
KILN_FUSE_ELEMENTWISE_1(gelu, x->dtype())
KILN_FUSE_ELEMENTWISE_1(silu, x->dtype())
KILN_FUSE_ELEMENTWISE_1(log_sigmoid, x->dtype())
KILN_FUSE_ELEMENTWISE_2(relu_backward, lhs->dtype())
KILN_FUSE_ELEMENTWISE_2(gelu_backward, lhs->dtype())
KILN_FUSE_ELEMENTWISE_2(sigmoid_backward, lhs->dtype())
KILN_FUSE_FORM_DIM(softmax)
KILN_FUSE_FORM_DIM(log_softmax)
KILN_FUSE_FORM_DIM(softmin)

}  // namespace kiln::fusion
