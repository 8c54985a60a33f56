// remote::infer_types against the CPU backend: every op of ops.def run on real tensors with
// valid arguments (every dtype kind it accepts, broadcasting, zero-size shapes, rank 0 to 4),
// its recorded result types compared with what infer_types computes from the input types and the
// attributes alone; then hostile arguments, each refused with the tensor layer's error type and a
// message naming the op. Built where the remote backend is (it links src/remote).
#ifdef KILN_HAVE_REMOTE_SERVER

#include "remote/infer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_quant_tensor.h"
#include "ir/op_ir.h"
#include "kiln/detail/tensor_ops.h"
#include "kiln/quant.h"
#include "runtime/registry.h"
#include "support/error_message.h"

namespace kiln::remote_test {

namespace {

using ir::TensorType;

Backend& cpu() { return hardware_backend_for(Device::cpu()); }

// ---- real tensors, and the comparison with the CPU backend -------------------------------------

// A CPU tensor of dtype and shape, every element `value` (1 by default: a safe divisor and shift).
Primitive tensor(DType dtype, const Shape& shape, double value = 1) {
  return cpu().full(shape, Scalar(value), dtype, Device::cpu());
}
// Index tensors of zeros: in range along any dim that is not empty.
Primitive zeros(DType dtype, const Shape& shape) { return tensor(dtype, shape, 0); }
Primitive floats(const Shape& shape) { return tensor(DType::F32, shape); }
Primitive indices(const Shape& shape) { return zeros(DType::I64, shape); }
Primitive mask(const Shape& shape) { return tensor(DType::Bool, shape); }
// The blocks of a CPU tensor of ones in scheme (Q8_0 by default), and views of them.
Primitive blocks(const Shape& shape, QuantScheme scheme = quant_scheme(QuantScheme::Kind::Q8_0)) {
  return cpu().quantize(floats(shape), scheme);
}
Primitive permuted(Primitive x, Axes axes) { return cpu().permute(std::move(x), std::move(axes)); }

// A CPU tensor's type, with a QFloat tensor's scheme and axes (a Recorder records neither).
TensorType cpu_type(const Primitive& p) {
  TensorType type{p->dtype(), p->shape()};
  if (p->dtype() != DType::QFloat) return type;
  const cpu::CpuQuantTensor& q = cpu::as_quantized(p);
  type.scheme = q.scheme();
  if (!q.in_stored_order()) type.axes = q.axes();
  return type;
}

// The distinct tensors among a call's arguments, in order: the inputs a Recorder numbers.
void collect(std::vector<Primitive>& out, const Primitive& p) {
  if (std::ranges::find(out, p) == out.end()) out.push_back(p);
}
void collect(std::vector<Primitive>& out, const OptionalPrimitive& p) {
  if (p) collect(out, *p);
}
void collect(std::vector<Primitive>& out, const PrimitiveList& list) {
  for (const Primitive& p : list) collect(out, p);
}
void collect(std::vector<Primitive>& out, const PrimitivePair& pair) {
  out.push_back(pair.first);
  out.push_back(pair.second);
}
template <class T>
void collect(std::vector<Primitive>&, const T&) {}

// The comparisons each op had (the coverage test expects at least one per op).
std::map<OpCode, int>& comparisons() {
  static std::map<OpCode, int> counts;
  return counts;
}

// -1 in an inferred shape (a value-dependent dim) matches any size.
bool matches(const TensorType& inferred, const TensorType& real) {
  if (inferred.dtype != real.dtype || inferred.shape.rank() != real.shape.rank() ||
      inferred.scheme != real.scheme || inferred.axes != real.axes) {
    return false;
  }
  for (std::size_t i = 0; i < real.shape.rank(); ++i) {
    if (inferred.shape[i] != -1 && inferred.shape[i] != real.shape[i]) return false;
  }
  return true;
}

std::string text(const TensorType& type) {
  std::string out = std::string(dtype_name(type.dtype)) + " " + type.shape.to_string();
  if (type.dtype != DType::QFloat) return out;
  return out + " " + std::string(quant_kind_name(type.scheme.kind)) + " axes " +
         Shape(type.axes).to_string();
}

// A recorded call: the op, and the types of its tensor inputs as infer_types takes them.
struct Recorded {
  ir::Program program;

  const ir::Op& op() const { return program.ops.back(); }
  // Pointers into program's inputs, nullptr for an absent optional tensor.
  std::vector<const TensorType*> inputs() const {
    std::map<std::uint32_t, const TensorType*> by_id;
    for (const ir::ProgramInput& input : program.inputs) by_id[input.id.index] = &input.type;
    std::vector<const TensorType*> out;
    for (ir::TensorId id : op().inputs) {
      out.push_back(id == ir::kNoTensor ? nullptr : by_id.at(id.index));
    }
    return out;
  }
  std::vector<TensorType> infer() const { return remote::infer_types(op(), inputs()); }
};

// Calls the op on the CPU backend (with copies of args: the recorder reads them after), records
// the call (a QFloat tensor's type as the CPU holds it), and expects infer_types, given only the
// input types and the attributes, to give the types of the real results.
template <OpCode code, class R, class... P>
void expect_inferred(R (Backend::*method)(P...), const std::type_identity_t<P>&... args) {
  ++comparisons()[code];
  R result{};
  try {
    result = (cpu().*method)(P(args)...);
  } catch (const std::exception& error) {
    ADD_FAILURE() << op_info(code).name << ": the CPU backend refused the case: " << error.what();
    return;
  }
  ir::Recorder recorder;
  recorder.record<code>(result, args...);
  Recorded recorded{recorder.program()};
  std::vector<Primitive> inputs, outputs;
  (collect(inputs, args), ...);
  collect(outputs, result);
  ir::Program& program = recorded.program;
  ASSERT_EQ(program.inputs.size(), inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) program.inputs[i].type = cpu_type(inputs[i]);
  for (std::size_t i = 0; i < outputs.size(); ++i)
    program.ops.back().output_types[i] = cpu_type(outputs[i]);
  const ir::Op& op = recorded.op();
  std::vector<TensorType> inferred;
  try {
    inferred = recorded.infer();
  } catch (const std::exception& error) {
    ADD_FAILURE() << ir::to_string(op)
                  << ": infer_types refused what the CPU ran: " << error.what();
    return;
  }
  ASSERT_EQ(inferred.size(), op.output_types.size()) << ir::to_string(op);
  for (std::size_t i = 0; i < inferred.size(); ++i) {
    EXPECT_TRUE(matches(inferred[i], op.output_types[i]))
        << ir::to_string(op) << ": inferred " << text(inferred[i]) << " for output " << i
        << ", the CPU gave " << text(op.output_types[i]);
  }
}

#define EXPECT_INFERRED(name, ...) \
  expect_inferred<OpCode::name>(ir::OpTraits<OpCode::name>::kMethod, __VA_ARGS__)

// ---- arguments -------------------------------------------------------------------------------

std::mt19937& rng() {
  static std::mt19937 generator(20240611);
  return generator;
}

std::int64_t uniform(std::int64_t low, std::int64_t high) {
  return std::uniform_int_distribution<std::int64_t>(low, high)(rng());
}

// A shape of rank in [min_rank, max_rank] and dims in [min_dim, max_dim].
Shape random_shape(std::size_t min_rank, std::size_t max_rank, std::int64_t min_dim = 0,
                   std::int64_t max_dim = 4) {
  const auto rank = static_cast<std::size_t>(
      uniform(static_cast<std::int64_t>(min_rank), static_cast<std::int64_t>(max_rank)));
  detail::DimVector dims(rank);
  for (std::size_t i = 0; i < rank; ++i) dims[i] = uniform(min_dim, max_dim);
  return Shape(std::move(dims));
}

std::int64_t random_dim(const Shape& shape) {
  return uniform(0, static_cast<std::int64_t>(shape.rank()) - 1);
}

Shape with_dim(const Shape& shape, std::size_t dim, std::int64_t size) {
  Shape out = shape;
  out[dim] = size;
  return out;
}

constexpr DType kFloats[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
constexpr DType kInts[] = {DType::I64, DType::I32, DType::I16, DType::I8,
                           DType::U64, DType::U32, DType::U16, DType::U8};

// The dtypes of the kinds an op accepts (ops.def's kinds column).
std::vector<DType> dtypes_of(OpCode code) {
  const std::uint8_t kinds = op_info(code).kinds;
  std::vector<DType> out;
  if (kinds & kKindFloat) out.insert(out.end(), std::begin(kFloats), std::end(kFloats));
  if (kinds & kKindInt) out.insert(out.end(), std::begin(kInts), std::end(kInts));
  if (kinds & kKindBool) out.push_back(DType::Bool);
  return out;
}

// Rank 0 to 4, with empty dims.
const std::vector<Shape>& some_shapes() {
  static const std::vector<Shape> shapes{{}, {0}, {5}, {2, 3}, {3, 0, 2}, {2, 3, 4}, {1, 2, 3, 2}};
  return shapes;
}

// Pairs of one rank that broadcast.
const std::vector<std::pair<Shape, Shape>>& broadcast_pairs() {
  static const std::vector<std::pair<Shape, Shape>> pairs{{{}, {}},
                                                          {{4}, {4}},
                                                          {{4}, {1}},
                                                          {{1}, {4}},
                                                          {{0}, {1}},
                                                          {{2, 3}, {2, 3}},
                                                          {{2, 1}, {1, 3}},
                                                          {{0, 3}, {1, 3}},
                                                          {{1, 0}, {3, 1}},
                                                          {{2, 1, 4}, {1, 3, 1}},
                                                          {{2, 3, 4, 5}, {2, 1, 4, 1}}};
  return pairs;
}

// ---- the common forms: cases from the form column -------------------------------------------

template <OpCode code>
void unary_cases() {
  for (DType dtype : dtypes_of(code)) {
    for (const Shape& shape : some_shapes()) {
      expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape));
    }
  }
}

template <OpCode code>
void nonempty_cases() {
  for (DType dtype : dtypes_of(code)) {
    for (const Shape& shape : some_shapes()) {
      if (shape.num_elements() == 0) continue;
      expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape));
    }
  }
}

template <OpCode code>
void binary_cases() {
  for (DType dtype : dtypes_of(code)) {
    for (const auto& [a, b] : broadcast_pairs()) {
      expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, a), tensor(dtype, b));
    }
  }
}

template <OpCode code>
void scalar_cases() {
  for (DType dtype : dtypes_of(code)) {
    for (const Shape& shape : some_shapes()) {
      expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape), Scalar(2));
      if (is_float(dtype)) {
        expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape), Scalar(2.5));
      }
    }
  }
}

template <OpCode code>
void compare_scalar_cases() {
  for (DType dtype : dtypes_of(code)) {
    for (const Shape& shape : some_shapes()) {
      for (Scalar value : {Scalar(2.5), Scalar(std::int64_t{-1}), Scalar(true)}) {
        expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape), value);
      }
    }
  }
}

template <OpCode code, bool kNonEmpty>
void dim_cases() {
  for (DType dtype : dtypes_of(code)) {
    for (const Shape& shape : some_shapes()) {
      for (std::size_t dim = 0; dim < shape.rank(); ++dim) {
        if (kNonEmpty && shape[dim] == 0) continue;
        expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape),
                              static_cast<std::int64_t>(dim));
      }
    }
  }
}

// ---- MANUAL ops: cases written out, registered by op ---------------------------------------

using Cases = void (*)();

std::map<OpCode, Cases>& manual_cases() {
  static std::map<OpCode, Cases> cases;
  return cases;
}

struct Registration {
  Registration(OpCode code, Cases cases) { manual_cases()[code] = cases; }
};

#define MANUAL_CASES(name)                                             \
  void name##_cases();                                                 \
  const Registration name##_registration(OpCode::name, &name##_cases); \
  void name##_cases()

// creation and movement

MANUAL_CASES(from_data) {
  EXPECT_INFERRED(from_data, TensorData::from_vec(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}),
                  Device::cpu());
  EXPECT_INFERRED(from_data, TensorData::from_vec(std::vector<std::int16_t>{}, {0, 3}),
                  Device::cpu());
  EXPECT_INFERRED(from_data, TensorData::from_vec(std::vector<bool>{true}, Shape{}), Device::cpu());
  EXPECT_INFERRED(from_data, TensorData::full({2, 1, 2}, 3, DType::BF16), Device::cpu());
  EXPECT_INFERRED(from_data,
                  TensorData::full({3, 64}, 1, DType::F32).quantize(int8_block_scheme(16)),
                  Device::cpu());
}

template <OpCode code>
void creation_cases() {
  for (DType dtype : dtypes_of(code)) {
    for (const Shape& shape : some_shapes()) {
      if constexpr (code == OpCode::full) {
        expect_inferred<code>(ir::OpTraits<code>::kMethod, shape, Scalar(3), dtype, Device::cpu());
      } else {
        expect_inferred<code>(ir::OpTraits<code>::kMethod, shape, dtype, Device::cpu());
      }
    }
  }
}
MANUAL_CASES(empty) { creation_cases<OpCode::empty>(); }
MANUAL_CASES(full) { creation_cases<OpCode::full>(); }
MANUAL_CASES(zeros) { creation_cases<OpCode::zeros>(); }
MANUAL_CASES(ones) { creation_cases<OpCode::ones>(); }

MANUAL_CASES(arange) {
  for (DType dtype : dtypes_of(OpCode::arange)) {
    EXPECT_INFERRED(arange, 0, 10, 3, dtype, Device::cpu());
    EXPECT_INFERRED(arange, 10, 0, -3, dtype, Device::cpu());
    EXPECT_INFERRED(arange, 5, 5, 1, dtype, Device::cpu());
    EXPECT_INFERRED(arange, 5, 0, 1, dtype, Device::cpu());
    EXPECT_INFERRED(arange, -7, 7, 2, dtype, Device::cpu());
  }
}

MANUAL_CASES(random) {
  for (DType dtype : dtypes_of(OpCode::random)) {
    for (const Shape& shape : some_shapes()) {
      for (const Distribution& d : {Distribution::standard(), Distribution::uniform(0, 10),
                                    Distribution::normal(1, 2), Distribution::bernoulli(0.3)}) {
        EXPECT_INFERRED(random, shape, d, dtype, Device::cpu());
      }
    }
  }
}

MANUAL_CASES(into_data) {
  for (DType dtype : dtypes_of(OpCode::into_data)) {
    EXPECT_INFERRED(into_data, tensor(dtype, {2, 3}));
  }
  EXPECT_INFERRED(into_data, permuted(blocks({2, 32}), {1, 0}));
}

MANUAL_CASES(to_device) {
  for (const Shape& shape : some_shapes()) {
    EXPECT_INFERRED(to_device, tensor(DType::I32, shape), Device::cpu());
  }
  EXPECT_INFERRED(to_device, permuted(blocks({2, 32}), {1, 0}), Device::cpu());
}

MANUAL_CASES(cast) {
  for (DType from : dtypes_of(OpCode::cast)) {
    for (DType to : dtypes_of(OpCode::cast)) EXPECT_INFERRED(cast, tensor(from, {2, 3}), to);
  }
  EXPECT_INFERRED(cast, floats({}), DType::I8);
  EXPECT_INFERRED(cast, floats({0, 4}), DType::Bool);
}

MANUAL_CASES(read_many) {
  EXPECT_INFERRED(read_many, PrimitiveList{floats({2}), tensor(DType::Bool, {0, 1})});
  EXPECT_INFERRED(read_many, PrimitiveList{blocks({1, 32}), floats({2})});
  EXPECT_INFERRED(read_many, PrimitiveList{tensor(DType::I64, {3})});
  EXPECT_INFERRED(read_many, PrimitiveList{});
}

// arithmetic extras

MANUAL_CASES(clamp) {
  for (DType dtype : dtypes_of(OpCode::clamp)) {
    for (const Shape& shape : some_shapes()) {
      EXPECT_INFERRED(clamp, tensor(dtype, shape), Scalar(0), Scalar(3));
    }
  }
}
MANUAL_CASES(clamp_min) {
  for (DType dtype : dtypes_of(OpCode::clamp_min)) {
    EXPECT_INFERRED(clamp_min, tensor(dtype, {2, 0}), Scalar(1));
    EXPECT_INFERRED(clamp_min, tensor(dtype, {3, 2}), Scalar(1));
  }
}
MANUAL_CASES(clamp_max) {
  for (DType dtype : dtypes_of(OpCode::clamp_max)) {
    EXPECT_INFERRED(clamp_max, tensor(dtype, {}), Scalar(1));
    EXPECT_INFERRED(clamp_max, tensor(dtype, {3, 2}), Scalar(1));
  }
}

MANUAL_CASES(matmul) {
  const std::pair<Shape, Shape> pairs[] = {
      {{2, 3}, {3, 4}}, {{5, 2, 3}, {3, 4}}, {{2, 3}, {4, 3, 5}},    {{2, 1, 2, 3}, {3, 3, 2}},
      {{0, 3}, {3, 2}}, {{2, 0}, {0, 3}},    {{3, 1, 2}, {1, 2, 2}}, {{0, 2, 3}, {1, 3, 4}}};
  for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::I64, DType::I32, DType::U8}) {
    for (const auto& [a, b] : pairs) EXPECT_INFERRED(matmul, tensor(dtype, a), tensor(dtype, b));
  }
  // A QFloat rhs: a weight's transpose, a weight in stored order, a batch of them.
  for (DType dtype : kFloats) {
    EXPECT_INFERRED(matmul, tensor(dtype, {3, 64}), permuted(blocks({5, 64}), {1, 0}));
    EXPECT_INFERRED(matmul, tensor(dtype, {2, 3, 64}), blocks({64, 32}));
    EXPECT_INFERRED(matmul, tensor(dtype, {0, 32}), permuted(blocks({4, 32}), {1, 0}));
  }
  EXPECT_INFERRED(matmul, floats({2, 3, 4}), blocks({2, 4, 6}, int8_channel_scheme()));
}

MANUAL_CASES(cross) {
  for (DType dtype : {DType::F32, DType::F64, DType::I32}) {
    EXPECT_INFERRED(cross, tensor(dtype, {4, 3}), tensor(dtype, {4, 3}), 1);
    EXPECT_INFERRED(cross, tensor(dtype, {3, 5}), tensor(dtype, {3, 1}), 0);
    EXPECT_INFERRED(cross, tensor(dtype, {2, 1, 3}), tensor(dtype, {1, 0, 3}), 2);
  }
}

// reductions

template <OpCode code>
void extremum_cases() {
  for (DType dtype : dtypes_of(code)) {
    for (int i = 0; i < 6; ++i) {
      const Shape shape = random_shape(1, 4);
      const std::int64_t dim = random_dim(shape);
      if (shape[static_cast<std::size_t>(dim)] == 0) continue;
      for (DType index : {DType::I64, DType::I32, DType::U8}) {
        expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape), dim, index);
      }
    }
  }
}
MANUAL_CASES(argmax) { extremum_cases<OpCode::argmax>(); }
MANUAL_CASES(argmin) { extremum_cases<OpCode::argmin>(); }
MANUAL_CASES(max_dim_with_indices) { extremum_cases<OpCode::max_dim_with_indices>(); }
MANUAL_CASES(min_dim_with_indices) { extremum_cases<OpCode::min_dim_with_indices>(); }

template <OpCode code>
void truth_cases() {
  for (DType dtype : dtypes_of(code)) {
    for (const Shape& shape : some_shapes()) {
      if constexpr (code == OpCode::any || code == OpCode::all) {
        expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape));
      } else {
        for (std::size_t dim = 0; dim < shape.rank(); ++dim) {
          expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape),
                                static_cast<std::int64_t>(dim));
        }
      }
    }
  }
}
MANUAL_CASES(any) { truth_cases<OpCode::any>(); }
MANUAL_CASES(all) { truth_cases<OpCode::all>(); }
MANUAL_CASES(any_dim) { truth_cases<OpCode::any_dim>(); }
MANUAL_CASES(all_dim) { truth_cases<OpCode::all_dim>(); }

// indexing

constexpr IndexingUpdate kUpdates[] = {IndexingUpdate::Assign, IndexingUpdate::Add,
                                       IndexingUpdate::Mul, IndexingUpdate::Min,
                                       IndexingUpdate::Max};

// x of rank 1 to 4 with no empty dim, a dim, and gather indices no larger than x off that dim.
struct GatherCase {
  Shape x, indices;
  std::int64_t dim;
};
GatherCase random_gather() {
  GatherCase g;
  g.x = random_shape(1, 4, 1, 4);
  g.dim = random_dim(g.x);
  g.indices = g.x;
  for (std::size_t d = 0; d < g.x.rank(); ++d) {
    g.indices[d] = static_cast<std::int64_t>(d) == g.dim ? uniform(0, 5) : uniform(0, g.x[d]);
  }
  return g;
}

MANUAL_CASES(gather) {
  for (DType dtype : dtypes_of(OpCode::gather)) {
    for (int i = 0; i < 3; ++i) {
      const GatherCase g = random_gather();
      EXPECT_INFERRED(gather, g.dim, tensor(dtype, g.x), indices(g.indices));
    }
  }
  EXPECT_INFERRED(gather, 1, floats({3, 4}), zeros(DType::I32, {2, 6}));
}

MANUAL_CASES(scatter) {
  for (DType dtype : dtypes_of(OpCode::scatter)) {
    for (IndexingUpdate update : kUpdates) {
      const GatherCase g = random_gather();
      EXPECT_INFERRED(scatter, g.dim, tensor(dtype, g.x), indices(g.indices),
                      tensor(dtype, g.indices), update);
    }
  }
}

MANUAL_CASES(select) {
  for (DType dtype : dtypes_of(OpCode::select)) {
    for (int i = 0; i < 3; ++i) {
      const Shape x = random_shape(1, 4, 1, 4);
      EXPECT_INFERRED(select, tensor(dtype, x), random_dim(x), indices({uniform(0, 5)}));
    }
  }
  EXPECT_INFERRED(select, floats({0, 3}), 1, zeros(DType::U16, {2}));
}

MANUAL_CASES(select_assign) {
  for (DType dtype : dtypes_of(OpCode::select_assign)) {
    for (IndexingUpdate update : kUpdates) {
      const Shape x = random_shape(1, 4, 1, 4);
      const std::int64_t dim = random_dim(x);
      const std::int64_t k = uniform(0, 5);
      EXPECT_INFERRED(select_assign, tensor(dtype, x), dim, indices({k}),
                      tensor(dtype, with_dim(x, static_cast<std::size_t>(dim), k)), update);
    }
  }
}

// x of rank 1 to 4 with no empty dim, and [..., k] indices into it.
std::pair<Shape, Shape> random_nd() {
  const Shape x = random_shape(1, 4, 1, 4);
  Shape index = random_shape(1, 2, 0, 3);
  const std::int64_t k = uniform(0, static_cast<std::int64_t>(x.rank()) - 1);
  detail::DimVector dims(index.vector());
  dims.push_back(k);
  return {x, Shape(std::move(dims))};
}

MANUAL_CASES(gather_nd) {
  for (DType dtype : dtypes_of(OpCode::gather_nd)) {
    for (int i = 0; i < 4; ++i) {
      const auto [x, index] = random_nd();
      EXPECT_INFERRED(gather_nd, tensor(dtype, x), indices(index));
    }
  }
  EXPECT_INFERRED(gather_nd, floats({3, 4, 5}), zeros(DType::I32, {2, 3}));
  EXPECT_INFERRED(gather_nd, floats({3, 4, 5}), indices({2}));
  // A single tuple addressing every dim reads one element: a rank-0 result (the tensor layer
  // makes such indices [1, k] first, but a backend takes [k] as well).
  EXPECT_INFERRED(gather_nd, floats({3, 4}), indices({2}));
}

MANUAL_CASES(scatter_nd) {
  for (DType dtype : dtypes_of(OpCode::scatter_nd)) {
    for (IndexingUpdate update : kUpdates) {
      const auto [x, index] = random_nd();
      detail::DimVector read;
      for (std::size_t i = 0; i + 1 < index.rank(); ++i) read.push_back(index[i]);
      for (auto i = static_cast<std::size_t>(index[index.rank() - 1]); i < x.rank(); ++i) {
        read.push_back(x[i]);
      }
      EXPECT_INFERRED(scatter_nd, tensor(dtype, x), indices(index),
                      tensor(dtype, Shape(std::move(read))), update);
    }
  }
  EXPECT_INFERRED(scatter_nd, floats({3, 4}), indices({2}), floats({}), IndexingUpdate::Add);
}

// A slice of a dim of size n as the tensor layer resolves it: any step, in bounds.
ResolvedSlice random_slice(std::int64_t n) {
  const std::int64_t step = uniform(1, 3) * (uniform(0, 1) ? 1 : -1);
  if (n == 0 || uniform(0, 5) == 0) return {0, 0, step};
  const std::int64_t start = uniform(0, n - 1);
  // Indices reachable from start by step inside [0, n).
  const std::int64_t room = step > 0 ? (n - 1 - start) / step : start / -step;
  return {start, uniform(1, room + 1), step};
}

ResolvedSlices random_slices(const Shape& shape) {
  ResolvedSlices slices;
  for (std::int64_t n : shape.dims()) slices.push_back(random_slice(n));
  return slices;
}

Shape region(const ResolvedSlices& slices) {
  detail::DimVector dims;
  for (const ResolvedSlice& s : slices) dims.push_back(s.length);
  return Shape(std::move(dims));
}

MANUAL_CASES(slice) {
  for (DType dtype : dtypes_of(OpCode::slice)) {
    for (int i = 0; i < 4; ++i) {
      const Shape x = random_shape(0, 4);
      EXPECT_INFERRED(slice, tensor(dtype, x), random_slices(x));
    }
  }
  EXPECT_INFERRED(slice, floats({5, 6}), ResolvedSlices{{1, 2, 1}, {5, 2, -2}});
  // Of QFloat: whole rows in stored order are a view of the blocks, any other slice is f32.
  const Primitive q = blocks({4, 3, 32});
  EXPECT_INFERRED(slice, q, ResolvedSlices{{1, 2, 1}, {0, 3, 1}, {0, 32, 1}});
  EXPECT_INFERRED(slice, q, ResolvedSlices{{4, 0, 1}, {0, 3, 1}, {0, 32, 1}});
  EXPECT_INFERRED(slice, q, ResolvedSlices{{0, 2, 2}, {0, 3, 1}, {0, 32, 1}});
  EXPECT_INFERRED(slice, q, ResolvedSlices{{0, 4, 1}, {1, 2, 1}, {0, 32, 1}});
  EXPECT_INFERRED(slice, q, ResolvedSlices{{0, 4, 1}, {0, 3, 1}, {0, 16, 1}});
  EXPECT_INFERRED(slice, permuted(q, {1, 0, 2}), ResolvedSlices{{0, 3, 1}, {0, 4, 1}, {0, 32, 1}});
  EXPECT_INFERRED(slice, permuted(permuted(q, {1, 0, 2}), {1, 0, 2}),
                  ResolvedSlices{{0, 1, 1}, {0, 3, 1}, {0, 32, 1}});
}

MANUAL_CASES(slice_assign) {
  for (DType dtype : dtypes_of(OpCode::slice_assign)) {
    for (int i = 0; i < 4; ++i) {
      const Shape x = random_shape(0, 4);
      const ResolvedSlices slices = random_slices(x);
      EXPECT_INFERRED(slice_assign, tensor(dtype, x), slices, tensor(dtype, region(slices)));
    }
  }
}

// A shape broadcasting to `to`: some dims 1.
Shape thinned(const Shape& to) {
  Shape out = to;
  for (std::size_t d = 0; d < to.rank(); ++d) {
    if (uniform(0, 2) == 0) out[d] = 1;
  }
  return out;
}

MANUAL_CASES(mask_where) {
  for (DType dtype : dtypes_of(OpCode::mask_where)) {
    for (int i = 0; i < 3; ++i) {
      const Shape full = random_shape(0, 4);
      EXPECT_INFERRED(mask_where, tensor(dtype, thinned(full)), mask(thinned(full)),
                      tensor(dtype, thinned(full)));
    }
  }
}

MANUAL_CASES(mask_fill) {
  for (DType dtype : dtypes_of(OpCode::mask_fill)) {
    for (int i = 0; i < 3; ++i) {
      const Shape full = random_shape(0, 4);
      EXPECT_INFERRED(mask_fill, tensor(dtype, thinned(full)), mask(thinned(full)), Scalar(7));
    }
  }
}

MANUAL_CASES(mask_select) {
  for (DType dtype : dtypes_of(OpCode::mask_select)) {
    for (int i = 0; i < 3; ++i) {
      const Shape full = random_shape(1, 4);
      EXPECT_INFERRED(mask_select, tensor(dtype, thinned(full)), mask(thinned(full)));
    }
  }
  EXPECT_INFERRED(mask_select, floats({2, 3}), zeros(DType::Bool, {2, 3}));
}

MANUAL_CASES(argwhere) {
  for (DType index : {DType::I64, DType::I32}) {
    for (const Shape& shape : some_shapes()) EXPECT_INFERRED(argwhere, mask(shape), index);
  }
}

// layout

MANUAL_CASES(reshape) {
  for (DType dtype : dtypes_of(OpCode::reshape)) {
    for (int i = 0; i < 3; ++i) {
      const Shape x = random_shape(0, 4);
      const std::int64_t n = x.num_elements();
      EXPECT_INFERRED(reshape, tensor(dtype, x), Shape{n});
      EXPECT_INFERRED(reshape, tensor(dtype, x), Shape{1, n, 1});
      Shape reversed = x;
      std::reverse(reversed.vector().begin(), reversed.vector().end());
      EXPECT_INFERRED(reshape, tensor(dtype, x), reversed);
    }
  }
  EXPECT_INFERRED(reshape, floats({1}), Shape{});
  EXPECT_INFERRED(reshape, floats({0, 3}), Shape{5, 0});
}

MANUAL_CASES(expand) {
  for (DType dtype : dtypes_of(OpCode::expand)) {
    for (int i = 0; i < 3; ++i) {
      const Shape target = random_shape(0, 4);
      Shape x = thinned(target);
      // Drop some leading dims: expand adds them back.
      const auto drop = static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(x.rank())));
      x = Shape(x.dims().subspan(drop));
      EXPECT_INFERRED(expand, tensor(dtype, x), target);
    }
  }
}

MANUAL_CASES(permute) {
  for (DType dtype : dtypes_of(OpCode::permute)) {
    for (int i = 0; i < 3; ++i) {
      const Shape x = random_shape(0, 4);
      Axes axes(x.rank());
      std::iota(axes.begin(), axes.end(), 0);
      std::shuffle(axes.begin(), axes.end(), rng());
      EXPECT_INFERRED(permute, tensor(dtype, x), axes);
    }
  }
  // Of QFloat: views of the blocks, their axes composed (back in stored order: none).
  const Primitive q = permuted(blocks({2, 3, 32}), {2, 0, 1});
  for (const Axes& axes : {Axes{0, 1, 2}, Axes{1, 2, 0}, Axes{2, 1, 0}, Axes{1, 0, 2}}) {
    EXPECT_INFERRED(permute, q, axes);
  }
}

MANUAL_CASES(swap_dims) {
  for (DType dtype : dtypes_of(OpCode::swap_dims)) {
    for (int i = 0; i < 3; ++i) {
      const Shape x = random_shape(1, 4);
      EXPECT_INFERRED(swap_dims, tensor(dtype, x), random_dim(x), random_dim(x));
    }
  }
  EXPECT_INFERRED(swap_dims, blocks({3, 32}), 0, 1);
  EXPECT_INFERRED(swap_dims, permuted(blocks({3, 32}), {1, 0}), 1, 0);
  EXPECT_INFERRED(swap_dims, blocks({2, 3, 32}), 1, 1);
}

MANUAL_CASES(flip) {
  for (DType dtype : dtypes_of(OpCode::flip)) {
    for (int i = 0; i < 3; ++i) {
      const Shape x = random_shape(0, 4);
      Axes axes;
      for (std::size_t d = 0; d < x.rank(); ++d) {
        if (uniform(0, 1)) axes.push_back(static_cast<std::int64_t>(d));
      }
      std::shuffle(axes.begin(), axes.end(), rng());
      EXPECT_INFERRED(flip, tensor(dtype, x), axes);
    }
  }
}

MANUAL_CASES(unfold) {
  for (DType dtype : dtypes_of(OpCode::unfold)) {
    for (int i = 0; i < 4; ++i) {
      const Shape x = random_shape(1, 4, 1, 5);
      const std::int64_t dim = random_dim(x);
      const std::int64_t size = uniform(1, x[static_cast<std::size_t>(dim)]);
      EXPECT_INFERRED(unfold, tensor(dtype, x), dim, size, uniform(1, 3));
    }
  }
  EXPECT_INFERRED(unfold, floats({0, 5}), 1, 5, std::numeric_limits<std::int64_t>::max());
}

MANUAL_CASES(cat) {
  for (DType dtype : dtypes_of(OpCode::cat)) {
    for (int i = 0; i < 3; ++i) {
      const Shape shape = random_shape(1, 4);
      const std::int64_t dim = random_dim(shape);
      PrimitiveList xs;
      const std::int64_t count = uniform(1, 3);
      for (std::int64_t k = 0; k < count; ++k) {
        xs.push_back(tensor(dtype, with_dim(shape, static_cast<std::size_t>(dim), uniform(0, 3))));
      }
      EXPECT_INFERRED(cat, xs, dim);
    }
  }
}

MANUAL_CASES(repeat_dim) {
  for (DType dtype : dtypes_of(OpCode::repeat_dim)) {
    for (int i = 0; i < 3; ++i) {
      const Shape x = random_shape(1, 4);
      EXPECT_INFERRED(repeat_dim, tensor(dtype, x), random_dim(x), uniform(0, 3));
    }
  }
}

// sorting

MANUAL_CASES(sort) {
  for (DType dtype : dtypes_of(OpCode::sort)) {
    const Shape x = random_shape(1, 4);
    EXPECT_INFERRED(sort, tensor(dtype, x), random_dim(x), dtype == DType::F32);
  }
}
MANUAL_CASES(sort_with_indices) {
  for (DType dtype : dtypes_of(OpCode::sort_with_indices)) {
    const Shape x = random_shape(1, 4);
    EXPECT_INFERRED(sort_with_indices, tensor(dtype, x), random_dim(x), true, DType::I32);
  }
}
MANUAL_CASES(argsort) {
  for (DType dtype : dtypes_of(OpCode::argsort)) {
    const Shape x = random_shape(1, 4);
    EXPECT_INFERRED(argsort, tensor(dtype, x), random_dim(x), false, DType::I64);
  }
}
MANUAL_CASES(topk_with_indices) {
  for (DType dtype : dtypes_of(OpCode::topk_with_indices)) {
    for (int i = 0; i < 2; ++i) {
      const Shape x = random_shape(1, 4);
      const std::int64_t dim = random_dim(x);
      const std::int64_t k = uniform(0, x[static_cast<std::size_t>(dim)]);
      EXPECT_INFERRED(topk_with_indices, tensor(dtype, x), k, dim, i == 0, DType::I64);
    }
  }
}

// convolution

struct ConvCase {
  Shape x, weight;
  ConvOptions options;
};
const std::vector<ConvCase>& conv_examples() {
  static const std::vector<ConvCase> cases{
      {{2, 3, 7}, {4, 3, 3}, {{1}, {0}, {1}, 1}},
      {{1, 4, 9}, {6, 2, 2}, {{2}, {1}, {2}, 2}},
      {{2, 2, 5, 6}, {3, 2, 3, 2}, {{1, 2}, {1, 0}, {1, 1}, 1}},
      {{0, 4, 5, 5}, {4, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 2}, 4}},
      {{1, 2, 4, 5, 3}, {2, 2, 2, 3, 1}, {{1, 1, 2}, {0, 1, 0}, {1, 1, 1}, 1}}};
  return cases;
}

// The output shape of conv, from the CPU itself.
Shape conv_output(const ConvCase& c, DType dtype) {
  return cpu().conv(tensor(dtype, c.x), tensor(dtype, c.weight), std::nullopt, c.options)->shape();
}

MANUAL_CASES(conv) {
  for (DType dtype : dtypes_of(OpCode::conv)) {
    for (const ConvCase& c : conv_examples()) {
      EXPECT_INFERRED(conv, tensor(dtype, c.x), tensor(dtype, c.weight), std::nullopt, c.options);
      EXPECT_INFERRED(conv, tensor(dtype, c.x), tensor(dtype, c.weight),
                      tensor(dtype, {c.weight[0]}), c.options);
    }
  }
}

MANUAL_CASES(conv_transpose) {
  struct Case {
    Shape x, weight;
    ConvTransposeOptions options;
  };
  const Case cases[] = {
      {{2, 3, 4}, {3, 2, 3}, {{2}, {1}, {1}, {1}, 1}},
      {{1, 4, 3, 3}, {4, 1, 2, 3}, {{1, 2}, {0, 1}, {0, 1}, {1, 1}, 2}},
      {{0, 2, 3, 2}, {2, 3, 3, 3}, {{3, 1}, {1, 1}, {2, 1}, {1, 2}, 1}},
      {{1, 2, 2, 2, 2}, {2, 1, 2, 2, 2}, {{1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, 1}}};
  for (DType dtype : dtypes_of(OpCode::conv_transpose)) {
    for (const Case& c : cases) {
      EXPECT_INFERRED(conv_transpose, tensor(dtype, c.x), tensor(dtype, c.weight), std::nullopt,
                      c.options);
      EXPECT_INFERRED(conv_transpose, tensor(dtype, c.x), tensor(dtype, c.weight),
                      tensor(dtype, {c.weight[1] * c.options.groups}), c.options);
    }
  }
}

MANUAL_CASES(conv_x_backward) {
  for (DType dtype : dtypes_of(OpCode::conv_x_backward)) {
    for (const ConvCase& c : conv_examples()) {
      EXPECT_INFERRED(conv_x_backward, tensor(dtype, c.x), tensor(dtype, c.weight),
                      tensor(dtype, conv_output(c, dtype)), c.options);
    }
  }
}

MANUAL_CASES(conv_weight_backward) {
  for (DType dtype : dtypes_of(OpCode::conv_weight_backward)) {
    for (const ConvCase& c : conv_examples()) {
      EXPECT_INFERRED(conv_weight_backward, tensor(dtype, c.x), tensor(dtype, c.weight),
                      tensor(dtype, conv_output(c, dtype)), c.options);
    }
  }
}

MANUAL_CASES(conv_bias_backward) {
  for (DType dtype : dtypes_of(OpCode::conv_bias_backward)) {
    for (const ConvCase& c : conv_examples()) {
      EXPECT_INFERRED(conv_bias_backward, tensor(dtype, conv_output(c, dtype)));
    }
    // Batch norm's channel sums: [N, C].
    EXPECT_INFERRED(conv_bias_backward, tensor(dtype, Shape{4, 3}));
  }
}

// pooling

struct PoolCase {
  Shape x;
  PoolOptions options;
};
const std::vector<PoolCase>& pool_cases(bool is_max) {
  static const std::vector<PoolCase> average{
      {{2, 3, 7}, {{3}, {2}, {1}, {1}, false, true}},
      {{1, 2, 5, 6}, {{2, 3}, {2, 1}, {1, 0}, {1, 1}, true, false}},
      {{0, 2, 4, 4}, {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true}},
      {{1, 1, 4, 3, 5}, {{2, 1, 3}, {1, 1, 2}, {1, 0, 1}, {1, 1, 1}, true, true}}};
  static const std::vector<PoolCase> max{
      {{2, 3, 7}, {{3}, {2}, {1}, {2}, false, true}},
      {{1, 2, 5, 6}, {{2, 3}, {2, 1}, {1, 0}, {2, 1}, true, false}},
      {{0, 2, 4, 4}, {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true}},
      {{1, 1, 4, 3, 5}, {{2, 1, 3}, {1, 1, 2}, {1, 0, 1}, {1, 1, 1}, true, true}}};
  return is_max ? max : average;
}

MANUAL_CASES(avg_pool) {
  for (DType dtype : dtypes_of(OpCode::avg_pool)) {
    for (const PoolCase& c : pool_cases(false))
      EXPECT_INFERRED(avg_pool, tensor(dtype, c.x), c.options);
  }
}

MANUAL_CASES(avg_pool_backward) {
  for (DType dtype : dtypes_of(OpCode::avg_pool_backward)) {
    for (const PoolCase& c : pool_cases(false)) {
      const Shape out = cpu().avg_pool(tensor(dtype, c.x), c.options)->shape();
      EXPECT_INFERRED(avg_pool_backward, tensor(dtype, c.x), tensor(dtype, out), c.options);
    }
  }
}

MANUAL_CASES(max_pool) {
  for (DType dtype : dtypes_of(OpCode::max_pool)) {
    for (const PoolCase& c : pool_cases(true))
      EXPECT_INFERRED(max_pool, tensor(dtype, c.x), c.options);
  }
}

MANUAL_CASES(max_pool_with_indices) {
  for (DType dtype : dtypes_of(OpCode::max_pool_with_indices)) {
    for (const PoolCase& c : pool_cases(true)) {
      EXPECT_INFERRED(max_pool_with_indices, tensor(dtype, c.x), c.options, DType::I64);
      EXPECT_INFERRED(max_pool_with_indices, tensor(dtype, c.x), c.options, DType::I32);
    }
  }
}

MANUAL_CASES(max_pool_with_indices_backward) {
  for (DType dtype : dtypes_of(OpCode::max_pool_with_indices_backward)) {
    for (const PoolCase& c : pool_cases(true)) {
      const Shape out = cpu().max_pool(tensor(dtype, c.x), c.options)->shape();
      EXPECT_INFERRED(max_pool_with_indices_backward, tensor(dtype, c.x), tensor(dtype, out),
                      zeros(DType::I32, out), c.options);
    }
  }
}

MANUAL_CASES(adaptive_avg_pool) {
  for (DType dtype : dtypes_of(OpCode::adaptive_avg_pool)) {
    EXPECT_INFERRED(adaptive_avg_pool, tensor(dtype, {2, 3, 7}), Axes{3});
    EXPECT_INFERRED(adaptive_avg_pool, tensor(dtype, {1, 2, 5, 6}), Axes{7, 2});
    EXPECT_INFERRED(adaptive_avg_pool, tensor(dtype, {0, 2, 2, 3, 4}), Axes{1, 2, 3});
  }
}

MANUAL_CASES(adaptive_avg_pool_backward) {
  for (DType dtype : dtypes_of(OpCode::adaptive_avg_pool_backward)) {
    EXPECT_INFERRED(adaptive_avg_pool_backward, tensor(dtype, {2, 3, 7}), tensor(dtype, {2, 3, 3}));
    EXPECT_INFERRED(adaptive_avg_pool_backward, tensor(dtype, {1, 2, 5, 6}),
                    tensor(dtype, {1, 2, 7, 2}));
    EXPECT_INFERRED(adaptive_avg_pool_backward, tensor(dtype, {0, 2, 2, 3, 4}),
                    tensor(dtype, {0, 2, 1, 2, 3}));
  }
}

// interpolation, patches

constexpr InterpolateOptions kInterpolations[] = {{InterpolateMode::Nearest, false},
                                                  {InterpolateMode::Bilinear, true},
                                                  {InterpolateMode::Bicubic, false}};

MANUAL_CASES(interpolate) {
  for (DType dtype : dtypes_of(OpCode::interpolate)) {
    for (const InterpolateOptions& options : kInterpolations) {
      EXPECT_INFERRED(interpolate, tensor(dtype, {2, 3, 4, 5}), Axes{8, 3}, options);
      EXPECT_INFERRED(interpolate, tensor(dtype, {0, 1, 1, 1}), Axes{2, 2}, options);
    }
  }
}

MANUAL_CASES(interpolate_backward) {
  for (DType dtype : dtypes_of(OpCode::interpolate_backward)) {
    for (const InterpolateOptions& options : kInterpolations) {
      EXPECT_INFERRED(interpolate_backward, tensor(dtype, {2, 3, 4, 5}),
                      tensor(dtype, {2, 3, 8, 3}), Axes{8, 3}, options);
    }
  }
}

const UnfoldOptions kPatches[] = {{{3, 3}, {1, 1}, {1, 1}, {1, 1}},
                                  {{2, 3}, {2, 1}, {0, 1}, {1, 2}},
                                  {{1, 1}, {3, 2}, {0, 0}, {1, 1}}};

MANUAL_CASES(unfold_patches) {
  for (DType dtype : dtypes_of(OpCode::unfold_patches)) {
    for (const UnfoldOptions& options : kPatches) {
      EXPECT_INFERRED(unfold_patches, tensor(dtype, {2, 3, 5, 6}), options);
      EXPECT_INFERRED(unfold_patches, tensor(dtype, {0, 2, 4, 4}), options);
    }
  }
}

MANUAL_CASES(fold_patches) {
  for (DType dtype : dtypes_of(OpCode::fold_patches)) {
    for (const UnfoldOptions& options : kPatches) {
      const Shape patches = cpu().unfold_patches(tensor(dtype, {2, 3, 5, 6}), options)->shape();
      EXPECT_INFERRED(fold_patches, tensor(dtype, patches), Axes{5, 6}, options);
    }
  }
}

// linear algebra, normalisation, attention

MANUAL_CASES(embedding) {
  for (DType dtype : dtypes_of(OpCode::embedding)) {
    EXPECT_INFERRED(embedding, tensor(dtype, {10, 4}), indices({2, 3}));
    EXPECT_INFERRED(embedding, tensor(dtype, {10, 4}), zeros(DType::I32, {5}));
    EXPECT_INFERRED(embedding, tensor(dtype, {3, 0}), indices({0}));
  }
  // A QFloat table, in stored order or not: its rows decoded, f32.
  EXPECT_INFERRED(embedding, blocks({10, 32}), indices({2, 3}));
  EXPECT_INFERRED(embedding, blocks({10, 256}, quant_scheme(QuantScheme::Kind::Q4_K)),
                  zeros(DType::I32, {5}));
  EXPECT_INFERRED(embedding, permuted(blocks({10, 32}), {1, 0}), indices({4}));
}

MANUAL_CASES(embedding_backward) {
  for (DType dtype : dtypes_of(OpCode::embedding_backward)) {
    EXPECT_INFERRED(embedding_backward, tensor(dtype, {10, 4}), tensor(dtype, {2, 3, 4}),
                    indices({2, 3}));
    EXPECT_INFERRED(embedding_backward, tensor(dtype, {10, 4}), tensor(dtype, {0, 4}),
                    indices({0}));
  }
}

MANUAL_CASES(linear) {
  for (DType dtype : dtypes_of(OpCode::linear)) {
    for (const Shape& x : {Shape{3}, Shape{2, 3}, Shape{4, 0, 3}, Shape{2, 2, 2, 3}}) {
      EXPECT_INFERRED(linear, tensor(dtype, x), tensor(dtype, {3, 5}), std::nullopt);
      EXPECT_INFERRED(linear, tensor(dtype, x), tensor(dtype, {3, 5}), tensor(dtype, {5}));
    }
    // A QFloat weight [in, out], the transpose of one stored [out, in].
    const Primitive weight = permuted(blocks({5, 64}), {1, 0});
    EXPECT_INFERRED(linear, tensor(dtype, {2, 64}), weight, std::nullopt);
    EXPECT_INFERRED(linear, tensor(dtype, {3, 2, 64}), weight, tensor(dtype, {5}));
  }
}

// quantization

MANUAL_CASES(quantize) {
  const QuantScheme schemes[] = {
      quant_scheme(QuantScheme::Kind::Q8_0), quant_scheme(QuantScheme::Kind::Q4_0),
      quant_scheme(QuantScheme::Kind::Q4_K), int8_channel_scheme(), int8_block_scheme(16)};
  for (DType dtype : kFloats) {
    for (const QuantScheme& scheme : schemes) {
      for (const Shape& shape : {Shape{256}, Shape{2, 256}, Shape{0, 256}, Shape{2, 0, 256}}) {
        EXPECT_INFERRED(quantize, tensor(dtype, shape), scheme);
      }
    }
  }
  EXPECT_INFERRED(quantize, floats({3, 5}), int8_channel_scheme());
  EXPECT_INFERRED(quantize, floats({3, 0}), quant_scheme(QuantScheme::Kind::Q4_K));
}

MANUAL_CASES(dequantize) {
  for (DType dtype : kFloats) {
    EXPECT_INFERRED(dequantize, blocks({2, 64}), dtype);
    EXPECT_INFERRED(dequantize, blocks({0, 256}, quant_scheme(QuantScheme::Kind::Q6_K)), dtype);
    EXPECT_INFERRED(dequantize, permuted(blocks({2, 3, 32}), {2, 0, 1}), dtype);
  }
}

MANUAL_CASES(layer_norm_backward) {
  for (DType dtype : dtypes_of(OpCode::layer_norm_backward)) {
    for (const Shape& x : {Shape{2, 4}, Shape{3, 2, 4}, Shape{0, 4}, Shape{4}}) {
      EXPECT_INFERRED(layer_norm_backward, tensor(dtype, x), tensor(dtype, {4}), tensor(dtype, x),
                      1e-5);
    }
  }
}

MANUAL_CASES(layer_norm) {
  for (DType dtype : dtypes_of(OpCode::layer_norm)) {
    for (const Shape& x : {Shape{4}, Shape{2, 4}, Shape{0, 3, 4}}) {
      EXPECT_INFERRED(layer_norm, tensor(dtype, x), tensor(dtype, {4}), std::nullopt, 1e-5);
      EXPECT_INFERRED(layer_norm, tensor(dtype, x), tensor(dtype, {4}), tensor(dtype, {4}), 0.0);
    }
  }
}

MANUAL_CASES(batch_norm) {
  for (DType dtype : dtypes_of(OpCode::batch_norm)) {
    for (const Shape& x : {Shape{2, 3}, Shape{2, 3, 4}, Shape{0, 3, 2, 2}}) {
      EXPECT_INFERRED(batch_norm, tensor(dtype, x), tensor(dtype, {3}), tensor(dtype, {3}),
                      tensor(dtype, {3}), tensor(dtype, {3}), 1e-5);
    }
  }
}

MANUAL_CASES(attention) {
  for (DType dtype : dtypes_of(OpCode::attention)) {
    EXPECT_INFERRED(attention, tensor(dtype, {2, 3, 4, 8}), tensor(dtype, {2, 3, 5, 8}),
                    tensor(dtype, {2, 3, 5, 6}), std::nullopt, std::nullopt, std::nullopt,
                    AttentionOptions{});
    EXPECT_INFERRED(attention, tensor(dtype, {1, 3, 4, 8}), tensor(dtype, {2, 1, 5, 8}),
                    tensor(dtype, {2, 3, 5, 6}), mask({1, 1, 4, 5}), tensor(dtype, {2, 1, 1, 5}),
                    std::nullopt, AttentionOptions{0.5, true});
    EXPECT_INFERRED(attention, tensor(dtype, {2, 1, 0, 4}), tensor(dtype, {2, 2, 3, 4}),
                    tensor(dtype, {1, 2, 3, 1}), mask({2, 2, 1, 3}), std::nullopt, std::nullopt,
                    AttentionOptions{std::nullopt, true});
    EXPECT_INFERRED(attention, tensor(dtype, {2, 3, 4, 8}), tensor(dtype, {2, 3, 5, 8}),
                    tensor(dtype, {2, 3, 5, 6}), std::nullopt, std::nullopt,
                    tensor(DType::I64, {1}), AttentionOptions{std::nullopt, false, 0.25});
  }
}

MANUAL_CASES(attention_query_backward) {
  for (DType dtype : dtypes_of(OpCode::attention_query_backward)) {
    EXPECT_INFERRED(attention_query_backward, tensor(dtype, {1, 3, 4, 8}),
                    tensor(dtype, {2, 1, 5, 8}), tensor(dtype, {2, 3, 5, 6}),
                    tensor(dtype, {2, 3, 4, 6}), tensor(dtype, {2, 3, 4, 6}), mask({1, 1, 4, 5}),
                    tensor(dtype, {2, 1, 1, 5}), std::nullopt, AttentionOptions{0.5, true});
  }
}

MANUAL_CASES(attention_key_value_backward) {
  for (DType dtype : dtypes_of(OpCode::attention_key_value_backward)) {
    EXPECT_INFERRED(attention_key_value_backward, tensor(dtype, {1, 3, 4, 8}),
                    tensor(dtype, {2, 1, 5, 8}), tensor(dtype, {2, 3, 5, 6}),
                    tensor(dtype, {2, 3, 4, 6}), tensor(dtype, {2, 3, 4, 6}), std::nullopt,
                    std::nullopt, std::nullopt, AttentionOptions{});
  }
}

// activations

template <OpCode code>
void float_cases() {
  for (DType dtype : dtypes_of(code)) {
    for (const Shape& shape : some_shapes()) {
      if constexpr (code == OpCode::leaky_relu) {
        expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape), Scalar(0.1));
      } else if constexpr (code == OpCode::hard_sigmoid) {
        expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape), Scalar(0.2),
                              Scalar(0.5));
      } else if constexpr (code == OpCode::relu_backward || code == OpCode::gelu_backward ||
                           code == OpCode::sigmoid_backward) {
        expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape),
                              tensor(dtype, shape));
      } else {
        expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape));
      }
    }
  }
}
MANUAL_CASES(relu) { float_cases<OpCode::relu>(); }
MANUAL_CASES(relu_backward) { float_cases<OpCode::relu_backward>(); }
MANUAL_CASES(leaky_relu) { float_cases<OpCode::leaky_relu>(); }
MANUAL_CASES(gelu) { float_cases<OpCode::gelu>(); }
MANUAL_CASES(gelu_backward) { float_cases<OpCode::gelu_backward>(); }
MANUAL_CASES(sigmoid_backward) { float_cases<OpCode::sigmoid_backward>(); }
MANUAL_CASES(silu) { float_cases<OpCode::silu>(); }
MANUAL_CASES(hard_sigmoid) { float_cases<OpCode::hard_sigmoid>(); }
MANUAL_CASES(log_sigmoid) { float_cases<OpCode::log_sigmoid>(); }

MANUAL_CASES(prelu) {
  for (DType dtype : dtypes_of(OpCode::prelu)) {
    for (int i = 0; i < 3; ++i) {
      const Shape x = random_shape(0, 4);
      EXPECT_INFERRED(prelu, tensor(dtype, x), tensor(dtype, thinned(x)));
    }
  }
}

template <OpCode code>
void along_dim_cases() {
  for (DType dtype : dtypes_of(code)) {
    for (const Shape& shape : some_shapes()) {
      for (std::size_t dim = 0; dim < shape.rank(); ++dim) {
        expect_inferred<code>(ir::OpTraits<code>::kMethod, tensor(dtype, shape),
                              static_cast<std::int64_t>(dim));
      }
    }
  }
}
MANUAL_CASES(softmax) { along_dim_cases<OpCode::softmax>(); }
MANUAL_CASES(log_softmax) { along_dim_cases<OpCode::log_softmax>(); }
MANUAL_CASES(softmin) { along_dim_cases<OpCode::softmin>(); }
MANUAL_CASES(softmax_cross_entropy) {
  // Targets of zeros: in range wherever there is a class.
  for (DType dtype : dtypes_of(OpCode::softmax_cross_entropy)) {
    for (const Shape& logits : {Shape{3, 4}, Shape{1, 1}, Shape{0, 5}, Shape{0, 0}}) {
      for (DType index : {DType::I64, DType::I32, DType::U8}) {
        EXPECT_INFERRED(softmax_cross_entropy, tensor(dtype, logits), zeros(index, {logits[0]}));
      }
    }
  }
}

#undef MANUAL_CASES

// ---- calls recorded without running them ---------------------------------------------------

// A tensor with a type and nothing behind it: refusals need no memory, so shapes may be huge.
class TypeOnly : public TensorPrimitive {
 public:
  using TensorPrimitive::TensorPrimitive;
  bool storage_unique() const noexcept override { return false; }
};

Primitive typed(DType dtype, Shape shape) {
  return std::make_shared<TypeOnly>(dtype, std::move(shape), Device::cpu());
}
Primitive f32(Shape shape) { return typed(DType::F32, std::move(shape)); }
Primitive i64(Shape shape) { return typed(DType::I64, std::move(shape)); }

// The op of a call with args, recorded without running it.
template <OpCode code, class R, class... P>
Recorded record_only(R (Backend::*)(P...), const std::type_identity_t<P>&... args) {
  ir::Recorder recorder;
  ir::Op op = ir::Call<code>::make(recorder, args...);
  Recorded recorded{recorder.program()};
  recorded.program.ops.push_back(std::move(op));
  return recorded;
}

#define RECORD(name, ...) \
  record_only<OpCode::name>(ir::OpTraits<OpCode::name>::kMethod, __VA_ARGS__)

// infer_types refuses the op with E, a message starting "[name] " and containing parts.
template <class E>
void expect_refused(const Recorded& recorded, const std::vector<std::string>& parts = {}) {
  SCOPED_TRACE(ir::to_string(recorded.op()));
  test::expect_error<E>([&] { (void)recorded.infer(); },
                        std::string(op_info(recorded.op().code).name), parts);
}

constexpr std::int64_t kBig = std::int64_t{1} << 40;
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

// An argument of type P for a call that is refused before any value is read.
template <class P>
P placeholder_argument() {
  if constexpr (std::is_same_v<P, Primitive>) {
    return f32({2});
  } else if constexpr (std::is_same_v<P, Device>) {
    return Device::cpu();
  } else if constexpr (std::is_same_v<P, ProcessGroup>) {
    return ProcessGroup::single();
  } else {
    return P{};
  }
}

template <OpCode code, class R, class... P>
Recorded placeholder_call(R (Backend::*method)(P...)) {
  return record_only<code>(method, placeholder_argument<P>()...);
}

// The op of code with placeholder arguments.
Recorded placeholder_call(OpCode code) {
  switch (code) {
#define KILN_OP(name, ...) \
  case OpCode::name:       \
    return placeholder_call<OpCode::name>(ir::OpTraits<OpCode::name>::kMethod);
#include "kiln/detail/ops.def"
#undef KILN_OP
  }
  return {};
}

// ---- every op of ops.def ----------------------------------------------------------------------

// The cases of an op: generated from its form, or written out above for a MANUAL op (null when
// missing).
Cases cases_for(OpCode code) {
  switch (code) {
#define KILN_TEST_CASES_UNARY(name) &unary_cases<OpCode::name>
#define KILN_TEST_CASES_PREDICATE(name) &unary_cases<OpCode::name>
#define KILN_TEST_CASES_REDUCE(name) &unary_cases<OpCode::name>
#define KILN_TEST_CASES_REDUCE_NONEMPTY(name) &nonempty_cases<OpCode::name>
#define KILN_TEST_CASES_BINARY(name) &binary_cases<OpCode::name>
#define KILN_TEST_CASES_COMPARE(name) &binary_cases<OpCode::name>
#define KILN_TEST_CASES_SCALAR(name) &scalar_cases<OpCode::name>
#define KILN_TEST_CASES_COMPARE_SCALAR(name) &compare_scalar_cases<OpCode::name>
#define KILN_TEST_CASES_DIM(name) &dim_cases<OpCode::name, false>
#define KILN_TEST_CASES_DIM_NONEMPTY(name) &dim_cases<OpCode::name, true>
#define KILN_TEST_CASES_MANUAL(name) nullptr
#define KILN_OP(name, group, kinds, result, params, args, availability, impl, form, amp) \
  case OpCode::name:                                                                     \
    return KILN_TEST_CASES_##form(name);
#include "kiln/detail/ops.def"
#undef KILN_OP
#undef KILN_TEST_CASES_UNARY
#undef KILN_TEST_CASES_PREDICATE
#undef KILN_TEST_CASES_REDUCE
#undef KILN_TEST_CASES_REDUCE_NONEMPTY
#undef KILN_TEST_CASES_BINARY
#undef KILN_TEST_CASES_COMPARE
#undef KILN_TEST_CASES_SCALAR
#undef KILN_TEST_CASES_COMPARE_SCALAR
#undef KILN_TEST_CASES_DIM
#undef KILN_TEST_CASES_DIM_NONEMPTY
#undef KILN_TEST_CASES_MANUAL
  }
  return nullptr;
}

Cases any_cases_for(OpCode code) {
  if (Cases cases = cases_for(code)) return cases;
  const auto found = manual_cases().find(code);
  return found == manual_cases().end() ? nullptr : found->second;
}

std::vector<OpCode> every_op() {
  std::vector<OpCode> codes;
  for (const OpInfo& info : all_ops()) codes.push_back(info.code);
  return codes;
}

}  // namespace

class InferMatchesCpu : public testing::TestWithParam<OpCode> {};

// The op's cases run on the CPU backend; infer_types agrees with every result. A LATER op has no
// backend to run it, and a collective runs in its process group's process (a remote device's
// client runs it there), so a server refuses both.
bool refused_by_servers(const OpInfo& info) {
  return info.availability == OpAvailability::Later || info.group == "distributed";
}

TEST_P(InferMatchesCpu, ResultTypes) {
  const OpCode code = GetParam();
  const OpInfo& info = op_info(code);
  if (refused_by_servers(info)) {
    // Refused before its arguments are read.
    expect_refused<UnsupportedOperation>(placeholder_call(code));
    return;
  }
  const Cases cases = any_cases_for(code);
  ASSERT_NE(cases, nullptr) << info.name << " has no cases in tests/remote/infer_test.cpp";
  const int before = comparisons()[code];
  cases();
  EXPECT_GT(comparisons()[code], before) << info.name << "'s cases compared nothing";
}

INSTANTIATE_TEST_SUITE_P(Infer, InferMatchesCpu, testing::ValuesIn(every_op()),
                         [](const testing::TestParamInfo<OpCode>& param) {
                           return std::string(op_info(param.param).name);
                         });

// Coverage: every op of ops.def but those servers refuse has cases here (form-generated or
// written out), so an op added to ops.def without them fails.
TEST(InferCoverage, EveryOpOfOpsDefHasCases) {
  std::size_t ops = 0;
  for (const OpInfo& info : all_ops()) {
    ++ops;
    if (refused_by_servers(info)) continue;
    EXPECT_NE(any_cases_for(info.code), nullptr) << info.name << " has no cases";
  }
  std::size_t listed = 0;
#define KILN_OP(name, ...) ++listed;
#include "kiln/detail/ops.def"
#undef KILN_OP
  EXPECT_EQ(ops, listed);
}

// ---- hostile arguments ------------------------------------------------------------------------

TEST(InferRefuses, CreationOfShapesNoMachineHolds) {
  expect_refused<OutOfMemory>(RECORD(empty, Shape{kBig, kBig}, DType::F32, Device::cpu()),
                              {"too large"});
  expect_refused<OutOfMemory>(RECORD(zeros, Shape{0, kBig, kBig}, DType::U8, Device::cpu()));
  expect_refused<OutOfMemory>(
      RECORD(full, Shape{kMax, kMax}, Scalar(1), DType::F64, Device::cpu()));
  // 2^48 elements fit the element limit, not the byte limit of 2^50.
  expect_refused<OutOfMemory>(
      RECORD(ones, Shape{std::int64_t{1} << 48}, DType::F64, Device::cpu()));
  expect_refused<InvalidArgument>(RECORD(empty, Shape{2, -3}, DType::F32, Device::cpu()),
                                  {"negative"});
  expect_refused<InvalidArgument>(
      RECORD(random, Shape{kMin}, Distribution::standard(), DType::F32, Device::cpu()));
  expect_refused<OutOfMemory>(RECORD(arange, kMin, kMax, 1, DType::I64, Device::cpu()));
  expect_refused<InvalidArgument>(RECORD(arange, 0, 10, 0, DType::I64, Device::cpu()), {"step"});
}

TEST(InferRefuses, CreationDTypes) {
  expect_refused<InvalidArgument>(RECORD(empty, Shape{2}, static_cast<DType>(200), Device::cpu()),
                                  {"200"});
  expect_refused<UnsupportedDType>(RECORD(empty, Shape{2}, DType::QFloat, Device::cpu()));
  expect_refused<DTypeMismatch>(RECORD(arange, 0, 3, 1, DType::Bool, Device::cpu()), {"bool"});
  expect_refused<DTypeMismatch>(
      RECORD(random, Shape{2}, Distribution::standard(), DType::Bool, Device::cpu()));
  expect_refused<InvalidArgument>(
      RECORD(random, Shape{2}, Distribution{Distribution::Kind::Normal, 0, -1}, DType::F32,
             Device::cpu()),
      {"standard deviation"});
  expect_refused<InvalidArgument>(RECORD(cast, f32({2}), static_cast<DType>(77)), {"77"});
  expect_refused<UnsupportedDType>(RECORD(cast, f32({2}), DType::QFloat));
}

TEST(InferRefuses, InputTypesNoTensorHas) {
  expect_refused<InvalidArgument>(RECORD(add, f32({kBig, kBig}), f32({kBig, kBig})), {"2^48"});
  expect_refused<InvalidArgument>(RECORD(neg, f32({3, -1})), {"negative"});
  expect_refused<InvalidArgument>(RECORD(neg, typed(static_cast<DType>(99), {3})), {"99"});
  expect_refused<UnsupportedDType>(RECORD(reshape, typed(DType::QFloat, {3}), Shape{3}));
}

// A QFloat tensor reaches only the ops the tensor layer hands it to as it is, with a type its
// blocks can have; quantize and dequantize check what the tensor layer checks.
TEST(InferRefuses, QuantizedTensors) {
  const Primitive q = typed(DType::QFloat, {4, 32});  // Q8_0, the default scheme of a type
  expect_refused<UnsupportedDType>(RECORD(add, q, q), {"input 0 is qfloat", "dequantized"});
  expect_refused<UnsupportedDType>(RECORD(matmul, q, f32({32, 2})), {"input 0"});
  expect_refused<UnsupportedDType>(RECORD(quantize, q, quant_scheme(QuantScheme::Kind::Q8_0)));
  expect_refused<DTypeMismatch>(RECORD(matmul, i64({2, 4}), q), {"lhs"});
  expect_refused<InvalidArgument>(RECORD(permute, typed(DType::QFloat, {4, 30}), Axes{1, 0}),
                                  {"not a multiple", "32"});
  expect_refused<InvalidArgument>(RECORD(permute, typed(DType::QFloat, {}), Axes{}));
  Recorded bad_axes = RECORD(dequantize, q, DType::F32);
  bad_axes.program.inputs[0].type.axes = {0, 0};
  expect_refused<InvalidArgument>(bad_axes, {"axes [0, 0]", "permutation"});
  Recorded unknown_scheme = RECORD(dequantize, q, DType::F32);
  unknown_scheme.program.inputs[0].type.scheme.block_size = 7;
  expect_refused<InvalidArgument>(unknown_scheme, {"7"});

  expect_refused<DTypeMismatch>(RECORD(dequantize, f32({4, 32}), DType::F32), {"not qfloat"});
  expect_refused<DTypeMismatch>(RECORD(dequantize, q, DType::I32), {"i32"});
  expect_refused<UnsupportedDType>(RECORD(dequantize, q, DType::QFloat));
  expect_refused<DTypeMismatch>(
      RECORD(quantize, i64({2, 32}), quant_scheme(QuantScheme::Kind::Q8_0)));
  expect_refused<ShapeMismatch>(
      RECORD(quantize, f32({2, 30}), quant_scheme(QuantScheme::Kind::Q8_0)), {"[2, 30]", "32"});
  expect_refused<ShapeMismatch>(RECORD(quantize, f32({}), int8_channel_scheme()));
  expect_refused<UnsupportedOperation>(
      RECORD(quantize, f32({1, 256}), quant_scheme(QuantScheme::Kind::Q2_K)), {"Q2_K"});
  expect_refused<InvalidArgument>(
      RECORD(quantize, f32({1, 64}), QuantScheme{QuantScheme::Kind::Q8_0, 64}), {"64"});
}

TEST(InferRefuses, ElementwiseOperands) {
  expect_refused<ShapeMismatch>(RECORD(add, f32({2, 3}), f32({4, 3})), {"[2, 3]", "[4, 3]"});
  expect_refused<ShapeMismatch>(RECORD(mul, f32({2, 3}), f32({3})), {"different ranks"});
  expect_refused<DTypeMismatch>(RECORD(sub, f32({2}), typed(DType::F64, {2})), {"f32", "f64"});
  expect_refused<DTypeMismatch>(RECORD(add, typed(DType::Bool, {2}), typed(DType::Bool, {2})),
                                {"bool"});
  expect_refused<DTypeMismatch>(RECORD(logical_and, f32({2}), f32({2})));
  expect_refused<DTypeMismatch>(RECORD(bitwise_xor, f32({2}), f32({2})));
  expect_refused<DTypeMismatch>(RECORD(exp, i64({2})), {"i64"});
  expect_refused<DTypeMismatch>(RECORD(greater, typed(DType::I8, {2}), typed(DType::U8, {2})));
  expect_refused<DTypeMismatch>(RECORD(add_scalar, i64({2}), Scalar(2.5)), {"2.5"});
  expect_refused<DTypeMismatch>(
      RECORD(div_scalar, i64({2}), Scalar(std::numeric_limits<double>::quiet_NaN())));
  expect_refused<DTypeMismatch>(RECORD(clamp, i64({2}), Scalar(0), Scalar(0.5)));
  expect_refused<DTypeMismatch>(RECORD(is_nan, i64({2})));
  expect_refused<ShapeMismatch>(
      RECORD(mask_fill, f32({2, 3}), typed(DType::Bool, {3, 3}), Scalar(0)));
  expect_refused<DTypeMismatch>(RECORD(mask_where, f32({2}), f32({2}), f32({2})), {"mask"});
  expect_refused<DTypeMismatch>(
      RECORD(mask_where, f32({2}), typed(DType::Bool, {2}), typed(DType::F16, {2})));
  expect_refused<ShapeMismatch>(RECORD(prelu, f32({2, 3}), f32({2, 4})));
  expect_refused<ShapeMismatch>(RECORD(relu_backward, f32({2, 3}), f32({2, 1})));
}

TEST(InferRefuses, DimsOutOfRange) {
  expect_refused<InvalidArgument>(RECORD(sum_dim, f32({2, 3}), 2), {"dim 2", "rank 2"});
  // A backend takes dims the tensor layer normalised: a negative one is refused.
  expect_refused<InvalidArgument>(RECORD(cumsum, f32({2, 3}), -1), {"dim -1"});
  expect_refused<InvalidArgument>(RECORD(softmax, f32({2, 3}), kMin));
  expect_refused<InvalidArgument>(RECORD(sum_dim, f32({}), 0));
  expect_refused<InvalidArgument>(RECORD(argmax, f32({2, 3}), kMax, DType::I64));
  expect_refused<InvalidArgument>(RECORD(swap_dims, f32({2, 3}), 0, 2), {"dim2"});
  expect_refused<InvalidArgument>(RECORD(any_dim, f32({2, 3}), 5));
  expect_refused<InvalidArgument>(RECORD(sort, f32({2, 3}), -2, false));
  expect_refused<InvalidArgument>(RECORD(gather, 3, f32({2, 3}), i64({2, 3})));
  expect_refused<InvalidArgument>(RECORD(cat, PrimitiveList{f32({2, 3})}, 2));
}

TEST(InferRefuses, Reductions) {
  expect_refused<InvalidArgument>(RECORD(max, f32({0, 3})), {"empty"});
  expect_refused<InvalidArgument>(RECORD(min_dim, f32({2, 0}), 1), {"size 0"});
  expect_refused<InvalidArgument>(RECORD(argmin, f32({0, 3}), 0, DType::I64));
  expect_refused<DTypeMismatch>(RECORD(argmax, f32({2, 3}), 1, DType::F32), {"index dtype"});
  expect_refused<InvalidArgument>(
      RECORD(max_dim_with_indices, f32({2, 3}), 1, static_cast<DType>(42)));
  expect_refused<DTypeMismatch>(RECORD(mean_dim, i64({2, 3}), 1));
  expect_refused<InvalidArgument>(RECORD(topk_with_indices, f32({2, 3}), 4, 1, true, DType::I64),
                                  {"k = 4"});
  expect_refused<InvalidArgument>(RECORD(topk_with_indices, f32({2, 3}), -1, 1, true, DType::I64));
  expect_refused<DTypeMismatch>(RECORD(argwhere, f32({2, 3}), DType::I64));
}

TEST(InferRefuses, Products) {
  expect_refused<ShapeMismatch>(RECORD(matmul, f32({2, 3}), f32({4, 5})), {"inner dims"});
  expect_refused<ShapeMismatch>(RECORD(matmul, f32({3}), f32({3, 5})), {"rank >= 2"});
  expect_refused<ShapeMismatch>(RECORD(matmul, f32({2, 2, 3}), f32({3, 3, 5})), {"batch"});
  expect_refused<DTypeMismatch>(RECORD(matmul, f32({2, 3}), typed(DType::F64, {3, 5})));
  // Each operand is small; the product is 2^60 elements.
  expect_refused<InvalidArgument>(RECORD(matmul, f32({1 << 30, 1}), f32({1, 1 << 30})), {"2^48"});
  expect_refused<ShapeMismatch>(RECORD(cross, f32({4, 3}), f32({4, 3}), 0), {"size 3"});
  expect_refused<ShapeMismatch>(RECORD(linear, f32({2, 3}), f32({4, 5}), std::nullopt),
                                {"features"});
  expect_refused<ShapeMismatch>(RECORD(linear, f32({2, 3}), f32({3, 5}), f32({4})), {"bias"});
  expect_refused<ShapeMismatch>(RECORD(linear, f32({}), f32({3, 5}), std::nullopt));
  expect_refused<ShapeMismatch>(RECORD(layer_norm, f32({2, 3}), f32({4}), std::nullopt, 0.0),
                                {"gamma"});
  expect_refused<ShapeMismatch>(RECORD(layer_norm, f32({}), f32({1}), std::nullopt, 0.0));
  expect_refused<InvalidArgument>(RECORD(layer_norm, f32({2, 3}), f32({3}), std::nullopt,
                                         std::numeric_limits<double>::quiet_NaN()),
                                  {"epsilon"});
  expect_refused<ShapeMismatch>(
      RECORD(batch_norm, f32({2}), f32({2}), f32({2}), f32({2}), f32({2}), 0.0));
  expect_refused<ShapeMismatch>(RECORD(embedding, f32({10}), i64({3})), {"weights"});
  expect_refused<DTypeMismatch>(RECORD(embedding, f32({10, 2}), f32({3})), {"indices"});
  expect_refused<ShapeMismatch>(RECORD(embedding_backward, f32({10, 2}), f32({3, 3}), i64({3})));
}

TEST(InferRefuses, Attention) {
  const AttentionOptions plain{};
  expect_refused<ShapeMismatch>(
      RECORD(attention, f32({2, 3, 4}), f32({2, 3, 5, 8}), f32({2, 3, 5, 8}), std::nullopt,
             std::nullopt, std::nullopt, plain),
      {"query"});
  expect_refused<ShapeMismatch>(
      RECORD(attention, f32({2, 3, 4, 8}), f32({2, 3, 5, 7}), f32({2, 3, 5, 8}), std::nullopt,
             std::nullopt, std::nullopt, plain),
      {"dims differ"});
  expect_refused<ShapeMismatch>(
      RECORD(attention, f32({2, 3, 4, 8}), f32({3, 3, 5, 8}), f32({2, 3, 5, 8}), std::nullopt,
             std::nullopt, std::nullopt, plain),
      {"broadcast"});
  expect_refused<DTypeMismatch>(
      RECORD(attention, f32({2, 3, 4, 8}), f32({2, 3, 5, 8}), f32({2, 3, 5, 8}), f32({1, 1, 4, 5}),
             std::nullopt, std::nullopt, plain),
      {"mask"});
  expect_refused<ShapeMismatch>(
      RECORD(attention, f32({2, 3, 4, 8}), f32({2, 3, 5, 8}), f32({2, 3, 5, 8}),
             typed(DType::Bool, {1, 1, 5, 4}), std::nullopt, std::nullopt, plain),
      {"mask shape"});
  expect_refused<InvalidArgument>(
      RECORD(attention, f32({2, 3, 4, 8}), f32({2, 3, 5, 8}), f32({2, 3, 5, 8}), std::nullopt,
             std::nullopt, std::nullopt,
             AttentionOptions{std::numeric_limits<double>::infinity(), false}),
      {"scale"});
  const OptionalPrimitive seed = typed(DType::I64, {1});
  expect_refused<InvalidArgument>(
      RECORD(attention, f32({2, 3, 4, 8}), f32({2, 3, 5, 8}), f32({2, 3, 5, 8}), std::nullopt,
             std::nullopt, seed, plain),
      {"dropout seed goes with a dropout above 0"});
  expect_refused<InvalidArgument>(
      RECORD(attention, f32({2, 3, 4, 8}), f32({2, 3, 5, 8}), f32({2, 3, 5, 8}), std::nullopt,
             std::nullopt, std::nullopt, AttentionOptions{std::nullopt, false, 0.5}),
      {"dropout seed goes with a dropout above 0"});
  expect_refused<InvalidArgument>(
      RECORD(attention, f32({2, 3, 4, 8}), f32({2, 3, 5, 8}), f32({2, 3, 5, 8}), std::nullopt,
             std::nullopt, seed, AttentionOptions{std::nullopt, false, 1.5}),
      {"dropout must be in [0, 1]"});
  expect_refused<InvalidArgument>(
      RECORD(attention, f32({2, 3, 4, 8}), f32({2, 3, 5, 8}), f32({2, 3, 5, 8}), std::nullopt,
             std::nullopt, typed(DType::I32, {1}), AttentionOptions{std::nullopt, false, 0.5}),
      {"I64 [1]"});
}

TEST(InferRefuses, AttentionBackward) {
  const AttentionOptions plain{};
  expect_refused<ShapeMismatch>(
      RECORD(attention_query_backward, f32({2, 3, 4, 8}), f32({2, 3, 5, 8}), f32({2, 3, 5, 8}),
             f32({2, 3, 4, 7}), f32({2, 3, 4, 8}), std::nullopt, std::nullopt, std::nullopt, plain),
      {"output has shape"});
  expect_refused<DTypeMismatch>(
      RECORD(attention_key_value_backward, f32({2, 3, 4, 8}), f32({2, 3, 5, 8}), f32({2, 3, 5, 8}),
             f32({2, 3, 4, 8}), typed(DType::F64, {2, 3, 4, 8}), std::nullopt, std::nullopt,
             std::nullopt, plain),
      {"output gradient"});
  expect_refused<ShapeMismatch>(
      RECORD(attention_key_value_backward, f32({2, 3, 4, 8}), f32({2, 3, 5, 7}), f32({2, 3, 5, 8}),
             f32({2, 3, 4, 8}), f32({2, 3, 4, 8}), std::nullopt, std::nullopt, std::nullopt, plain),
      {"dims differ"});
}

TEST(InferRefuses, Indexing) {
  expect_refused<DTypeMismatch>(RECORD(gather, 0, f32({2, 3}), f32({2, 3})), {"indices"});
  expect_refused<ShapeMismatch>(RECORD(gather, 0, f32({2, 3}), i64({2})), {"rank"});
  expect_refused<ShapeMismatch>(RECORD(gather, 0, f32({2, 3}), i64({2, 4})), {"larger"});
  expect_refused<ShapeMismatch>(
      RECORD(scatter, 0, f32({2, 3}), i64({2, 3}), f32({2, 2}), IndexingUpdate::Add), {"values"});
  expect_refused<DTypeMismatch>(
      RECORD(scatter, 0, f32({2, 3}), i64({2, 3}), i64({2, 3}), IndexingUpdate::Add));
  expect_refused<InvalidArgument>(
      RECORD(scatter, 0, f32({2, 3}), i64({2, 3}), f32({2, 3}), static_cast<IndexingUpdate>(9)),
      {"update"});
  expect_refused<ShapeMismatch>(RECORD(select, f32({2, 3}), 0, i64({2, 1})), {"rank 1"});
  expect_refused<ShapeMismatch>(
      RECORD(select_assign, f32({2, 3}), 0, i64({4}), f32({2, 3}), IndexingUpdate::Assign));
  expect_refused<ShapeMismatch>(RECORD(gather_nd, f32({2, 3}), i64({})), {"indices"});
  expect_refused<ShapeMismatch>(RECORD(gather_nd, f32({2, 3}), i64({4, 3})), {"address 3"});
  expect_refused<ShapeMismatch>(
      RECORD(scatter_nd, f32({2, 3}), i64({4, 1}), f32({4, 2}), IndexingUpdate::Add));
  // The gathered rows are within limits one by one, not all together.
  expect_refused<InvalidArgument>(RECORD(gather_nd, f32({1, 1 << 30}), i64({1 << 30, 1})));
}

TEST(InferRefuses, Slices) {
  const auto x = f32({4, 5});
  expect_refused<InvalidArgument>(RECORD(slice, x, ResolvedSlices{{0, 4, 1}}), {"1 slices"});
  expect_refused<InvalidArgument>(RECORD(slice, x, ResolvedSlices{{0, 4, 1}, {0, 6, 1}}),
                                  {"reaches outside"});
  expect_refused<InvalidArgument>(RECORD(slice, x, ResolvedSlices{{4, 1, 1}, {0, 5, 1}}),
                                  {"starts outside"});
  expect_refused<InvalidArgument>(RECORD(slice, x, ResolvedSlices{{-1, 1, 1}, {0, 5, 1}}));
  expect_refused<InvalidArgument>(RECORD(slice, x, ResolvedSlices{{3, 3, -2}, {0, 5, 1}}));
  expect_refused<InvalidArgument>(RECORD(slice, x, ResolvedSlices{{0, 2, 0}, {0, 5, 1}}),
                                  {"step 0"});
  expect_refused<InvalidArgument>(RECORD(slice, x, ResolvedSlices{{0, -1, 1}, {0, 5, 1}}),
                                  {"negative length"});
  expect_refused<InvalidArgument>(RECORD(slice, x, ResolvedSlices{{1, kMax, kMax}, {0, 5, 1}}));
  expect_refused<InvalidArgument>(RECORD(slice, x, ResolvedSlices{{3, kMax, kMin}, {0, 5, 1}}));
  expect_refused<ShapeMismatch>(
      RECORD(slice_assign, x, ResolvedSlices{{0, 2, 1}, {0, 5, 1}}, f32({1, 5})), {"values"});
  expect_refused<DTypeMismatch>(
      RECORD(slice_assign, x, ResolvedSlices{{0, 2, 1}, {0, 5, 1}}, i64({2, 5})));
}

TEST(InferRefuses, Layout) {
  expect_refused<ShapeMismatch>(RECORD(reshape, f32({2, 3}), Shape{4, 2}), {"6 elements"});
  // -1 is the tensor layer's to resolve.
  expect_refused<InvalidArgument>(RECORD(reshape, f32({2, 3}), Shape{-1, 3}), {"negative"});
  expect_refused<InvalidArgument>(RECORD(reshape, f32({0}), Shape{0, 1 << 30, 1 << 30}));
  expect_refused<ShapeMismatch>(RECORD(expand, f32({2, 3}), Shape{3}), {"lower rank"});
  expect_refused<ShapeMismatch>(RECORD(expand, f32({2, 3}), Shape{4, 3}));
  expect_refused<ShapeMismatch>(RECORD(expand, f32({1, 3}), Shape{-1, 3}));
  expect_refused<InvalidArgument>(RECORD(expand, f32({1, 1}), Shape{kBig, kBig}), {"2^48"});
  expect_refused<InvalidArgument>(RECORD(permute, f32({2, 3}), Axes{0}), {"1 axes"});
  expect_refused<InvalidArgument>(RECORD(permute, f32({2, 3}), Axes{1, 1}), {"repeated"});
  expect_refused<InvalidArgument>(RECORD(permute, f32({2, 3}), Axes{0, -1}));
  expect_refused<InvalidArgument>(RECORD(flip, f32({2, 3}), Axes{0, 0}), {"repeated"});
  expect_refused<InvalidArgument>(RECORD(flip, f32({2, 3}), Axes{2}));
  expect_refused<InvalidArgument>(RECORD(unfold, f32({2, 3}), 1, 0, 1), {"positive"});
  expect_refused<InvalidArgument>(RECORD(unfold, f32({2, 3}), 1, 2, kMin));
  expect_refused<ShapeMismatch>(RECORD(unfold, f32({2, 3}), 1, 4, 1), {"larger"});
  expect_refused<InvalidArgument>(RECORD(unfold, f32({1 << 25, 1}), 0, 1 << 24, 1), {"2^48"});
  expect_refused<InvalidArgument>(RECORD(cat, PrimitiveList{}, 0), {"empty list"});
  expect_refused<DTypeMismatch>(RECORD(cat, PrimitiveList{f32({2}), i64({2})}, 0));
  expect_refused<DTypeMismatch>(RECORD(cat, PrimitiveList{f32({2}), typed(DType::F64, {2})}, 0));
  expect_refused<ShapeMismatch>(RECORD(cat, PrimitiveList{f32({2, 3}), f32({2})}, 0), {"rank"});
  expect_refused<ShapeMismatch>(RECORD(cat, PrimitiveList{f32({2, 3}), f32({2, 4})}, 0));
  expect_refused<InvalidArgument>(
      RECORD(cat, PrimitiveList{f32({std::int64_t{1} << 48}), f32({std::int64_t{1} << 48})}, 0));
  expect_refused<InvalidArgument>(RECORD(repeat_dim, f32({2, 3}), 0, -1), {"negative"});
  expect_refused<OutOfMemory>(RECORD(repeat_dim, f32({2, 3}), 0, kMax));
  expect_refused<OutOfMemory>(RECORD(repeat_dim, f32({2, 3}), 0, std::int64_t{1} << 47));
}

// Complete conv options for rank-4 inputs.
ConvOptions conv2d(Axes stride = {1, 1}, Axes padding = {0, 0}, Axes dilation = {1, 1},
                   std::int64_t groups = 1) {
  return {std::move(stride), std::move(padding), std::move(dilation), groups};
}

TEST(InferRefuses, Convolution) {
  const auto x = f32({2, 4, 8, 8});
  const auto w = f32({6, 4, 3, 3});
  expect_refused<ShapeMismatch>(RECORD(conv, f32({4, 8}), f32({6, 4}), std::nullopt, conv2d()),
                                {"rank 3 to 5"});
  expect_refused<ShapeMismatch>(RECORD(conv, x, f32({6, 4, 3}), std::nullopt, conv2d()),
                                {"weight"});
  // A backend takes complete options: the tensor layer fills in the defaults.
  expect_refused<InvalidArgument>(RECORD(conv, x, w, std::nullopt, ConvOptions{}), {"stride"});
  expect_refused<InvalidArgument>(RECORD(conv, x, w, std::nullopt, conv2d({0, 1})), {">= 1"});
  expect_refused<InvalidArgument>(RECORD(conv, x, w, std::nullopt, conv2d({1, 1}, {-1, 0})));
  expect_refused<InvalidArgument>(RECORD(conv, x, w, std::nullopt, conv2d({kMax, 1})), {"2^48"});
  expect_refused<InvalidArgument>(RECORD(conv, x, w, std::nullopt, conv2d({1, 1}, {kMax, kMax})));
  expect_refused<InvalidArgument>(
      RECORD(conv, x, w, std::nullopt, conv2d({1, 1}, {0, 0}, {1, 1}, 0)), {"groups"});
  expect_refused<ShapeMismatch>(RECORD(conv, x, w, std::nullopt, conv2d({1, 1}, {0, 0}, {1, 1}, 3)),
                                {"divisible"});
  expect_refused<ShapeMismatch>(RECORD(conv, x, f32({6, 2, 3, 3}), std::nullopt, conv2d()),
                                {"input channels per group"});
  expect_refused<ShapeMismatch>(RECORD(conv, x, f32({6, 4, 9, 3}), std::nullopt, conv2d()),
                                {"larger than the padded input"});
  expect_refused<ShapeMismatch>(RECORD(conv, x, f32({6, 4, 0, 3}), std::nullopt, conv2d()),
                                {"empty kernel"});
  expect_refused<ShapeMismatch>(
      RECORD(conv, x, w, std::nullopt, conv2d({1, 1}, {0, 0}, {kBig, 1})));
  expect_refused<ShapeMismatch>(RECORD(conv, x, w, f32({4}), conv2d()), {"bias"});
  expect_refused<DTypeMismatch>(
      RECORD(conv, x, typed(DType::F64, {6, 4, 3, 3}), std::nullopt, conv2d()));
  expect_refused<DTypeMismatch>(
      RECORD(conv, i64({2, 4, 8, 8}), i64({6, 4, 3, 3}), std::nullopt, conv2d()));
  expect_refused<InvalidArgument>(RECORD(conv_transpose, x, f32({4, 2, 3, 3}), std::nullopt,
                                         ConvTransposeOptions{{1, 1}, {0, 0}, {1, 0}, {1, 1}, 1}),
                                  {"padding_out"});
  expect_refused<ShapeMismatch>(RECORD(conv_transpose, x, f32({3, 2, 3, 3}), std::nullopt,
                                       ConvTransposeOptions{{1, 1}, {0, 0}, {0, 0}, {1, 1}, 1}));
  expect_refused<ShapeMismatch>(RECORD(conv_transpose, x, f32({4, 2, 1, 1}), std::nullopt,
                                       ConvTransposeOptions{{1, 1}, {5, 5}, {0, 0}, {1, 1}, 1}),
                                {"not positive"});
  expect_refused<InvalidArgument>(
      RECORD(conv_transpose, x, f32({4, 2, 3, 3}), std::nullopt,
             ConvTransposeOptions{{kBig, 1}, {0, 0}, {0, 0}, {1, 1}, 1}),
      {"2^48"});
  expect_refused<ShapeMismatch>(RECORD(conv_x_backward, x, w, f32({2, 6, 5, 6}), conv2d()),
                                {"output gradients"});
  expect_refused<ShapeMismatch>(RECORD(conv_weight_backward, x, w, f32({2, 6, 6}), conv2d()));
  expect_refused<ShapeMismatch>(RECORD(conv_bias_backward, f32({6})));
}

TEST(InferRefuses, Pooling) {
  const auto x = f32({2, 3, 8, 8});
  auto pool = [](Axes kernel, Axes stride, Axes padding, Axes dilation) {
    return PoolOptions{
        std::move(kernel), std::move(stride), std::move(padding), std::move(dilation), false, true};
  };
  expect_refused<InvalidArgument>(RECORD(avg_pool, x, PoolOptions{{2, 2}}), {"stride"});
  expect_refused<InvalidArgument>(RECORD(avg_pool, x, pool({2}, {2}, {0}, {1})), {"kernel_size"});
  expect_refused<InvalidArgument>(RECORD(avg_pool, x, pool({2, 2}, {2, 2}, {2, 0}, {1, 1})),
                                  {"half"});
  expect_refused<InvalidArgument>(RECORD(avg_pool, x, pool({2, 2}, {2, 2}, {0, 0}, {2, 1})),
                                  {"max pooling only"});
  expect_refused<ShapeMismatch>(RECORD(max_pool, x, pool({9, 2}, {1, 1}, {0, 0}, {1, 1})),
                                {"does not fit"});
  expect_refused<InvalidArgument>(RECORD(max_pool, x, pool({2, 2}, {0, 1}, {0, 0}, {1, 1})));
  expect_refused<ShapeMismatch>(RECORD(max_pool, f32({8, 8}), pool({2}, {2}, {0}, {1})));
  expect_refused<DTypeMismatch>(
      RECORD(max_pool_with_indices, x, pool({2, 2}, {2, 2}, {0, 0}, {1, 1}), DType::F32));
  expect_refused<ShapeMismatch>(
      RECORD(avg_pool_backward, x, f32({2, 3, 3, 4}), pool({2, 2}, {2, 2}, {0, 0}, {1, 1})));
  expect_refused<DTypeMismatch>(RECORD(max_pool_with_indices_backward, x, f32({2, 3, 4, 4}),
                                       f32({2, 3, 4, 4}), pool({2, 2}, {2, 2}, {0, 0}, {1, 1})),
                                {"indices"});
  expect_refused<InvalidArgument>(RECORD(adaptive_avg_pool, x, Axes{0, 2}), {"positive"});
  expect_refused<InvalidArgument>(RECORD(adaptive_avg_pool, x, Axes{}));
  expect_refused<ShapeMismatch>(RECORD(adaptive_avg_pool, x, Axes{2}));
  expect_refused<ShapeMismatch>(RECORD(adaptive_avg_pool, f32({2, 3, 0}), Axes{2}), {"empty"});
  // Window bounds i * in / out would leave int64.
  expect_refused<InvalidArgument>(RECORD(adaptive_avg_pool, f32({1, 1, 1 << 24}), Axes{kBig}),
                                  {"too large"});
  expect_refused<ShapeMismatch>(RECORD(adaptive_avg_pool_backward, x, f32({2, 4, 2, 2})));
  expect_refused<InvalidArgument>(
      RECORD(interpolate, x, Axes{4, 4}, InterpolateOptions{static_cast<InterpolateMode>(7)}),
      {"mode"});
  expect_refused<InvalidArgument>(RECORD(interpolate, x, Axes{4}, InterpolateOptions{}));
  expect_refused<ShapeMismatch>(
      RECORD(interpolate_backward, x, f32({2, 3, 4, 5}), Axes{4, 4}, InterpolateOptions{}));
  const UnfoldOptions patches{{3, 3}, {1, 1}, {0, 0}, {1, 1}};
  expect_refused<InvalidArgument>(RECORD(unfold_patches, x, UnfoldOptions{{3, 3}}), {"stride"});
  expect_refused<ShapeMismatch>(RECORD(unfold_patches, f32({2, 3, 2, 8}), patches), {"kernel"});
  expect_refused<ShapeMismatch>(RECORD(fold_patches, f32({2, 27, 35}), Axes{8, 8}, patches),
                                {"window positions"});
  expect_refused<ShapeMismatch>(RECORD(fold_patches, f32({2, 28, 36}), Axes{8, 8}, patches),
                                {"multiple"});
}

TEST(InferRefuses, Collectives) {
  const ProcessGroup group = ProcessGroup::single();
  const std::vector<std::string> why{"collective", "never on a server"};
  expect_refused<UnsupportedOperation>(RECORD(all_reduce, f32({2}), ReduceOperation::Sum, group),
                                       why);
  expect_refused<UnsupportedOperation>(RECORD(broadcast_from, f32({2}), 0, group), why);
  expect_refused<UnsupportedOperation>(RECORD(all_gather, f32({2}), group), why);
  expect_refused<UnsupportedOperation>(
      RECORD(reduce_scatter, f32({2}), ReduceOperation::Max, group), why);
  expect_refused<UnsupportedOperation>(RECORD(send, f32({2}), 1, group), why);
  expect_refused<UnsupportedOperation>(RECORD(recv, Shape{2}, DType::F32, Device::cpu(), 1, group),
                                       why);
}

// The op and its input types must agree with ops.def and with each other.
TEST(InferRefuses, MalformedCalls) {
  const Recorded add = RECORD(add, f32({2}), f32({2}));
  const TensorType type{DType::F32, Shape{2}};
  const TensorType* one[] = {&type};
  test::expect_error<InvalidArgument>([&] { (void)remote::infer_types(add.op(), one); }, "add",
                                      {"input types"});
  const TensorType* absent[] = {&type, nullptr};
  test::expect_error<InvalidArgument>([&] { (void)remote::infer_types(add.op(), absent); }, "add",
                                      {"no type"});
  ir::Op wrong = RECORD(sum_dim, f32({2}), 0).op();
  wrong.attributes[0] = 2.5;
  test::expect_error<InvalidArgument>([&] { (void)remote::infer_types(wrong, one); }, "sum_dim",
                                      {"attribute dim"});
  wrong.attributes.clear();
  test::expect_error<InvalidArgument>([&] { (void)remote::infer_types(wrong, one); }, "sum_dim",
                                      {"attributes"});
  ir::Op unknown = add.op();
  unknown.code = static_cast<OpCode>(60000);
  test::expect_error<InvalidArgument>([&] { (void)remote::infer_types(unknown, one); },
                                      "infer_types", {"60000"});
  // An absent optional tensor is null; a present one needs its type.
  const Recorded conv =
      RECORD(conv, f32({1, 1, 3}), f32({1, 1, 1}), f32({1}), ConvOptions{{1}, {0}, {1}, 1});
  std::vector<const TensorType*> no_bias = conv.inputs();
  no_bias[2] = nullptr;
  test::expect_error<InvalidArgument>([&] { (void)remote::infer_types(conv.op(), no_bias); },
                                      "conv", {"no type"});
}

// Value-dependent dims are -1, the rest known.
TEST(InferTypes, ValueDependentShapes) {
  const auto select = RECORD(mask_select, f32({2, 3}), typed(DType::Bool, {1, 3})).infer();
  ASSERT_EQ(select.size(), 1u);
  EXPECT_EQ(select[0], (TensorType{DType::F32, Shape{-1}}));
  const auto where = RECORD(argwhere, typed(DType::Bool, {4, 5, 6}), DType::I32).infer();
  ASSERT_EQ(where.size(), 1u);
  EXPECT_EQ(where[0], (TensorType{DType::I32, Shape{-1, 3}}));
  EXPECT_TRUE(RECORD(into_data, f32({2})).infer().empty());
}

// ---- random arguments, mostly invalid: what infer_types accepts, the CPU runs ---------------

namespace {

// Sizes around the edges: negative, zero, small, past the shape.
std::int64_t edgy(std::int64_t high = 4) { return uniform(-2, high); }

Shape small_shape(std::size_t max_rank = 3, std::int64_t min_dim = 0) {
  return random_shape(0, max_rank, min_dim, 3);
}

// A shape that often broadcasts with `to`: some of its dims 1, or any other small shape.
Shape near(const Shape& to) { return uniform(0, 2) ? thinned(to) : small_shape(); }

DType some_dtype() {
  constexpr DType dtypes[] = {DType::F32, DType::F64, DType::I64, DType::I32, DType::Bool};
  return dtypes[uniform(0, 4)];
}

Axes random_axes(std::size_t max_size, std::int64_t high) {
  Axes axes(static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(max_size))));
  for (std::int64_t& a : axes) a = uniform(-1, high);
  return axes;
}

struct FuzzCounts {
  int accepted = 0;
  int refused = 0;
};

std::map<OpCode, FuzzCounts>& fuzz_counts() {
  static std::map<OpCode, FuzzCounts> counts;
  return counts;
}

// infer_types on the call's types; where it accepts, the CPU must run the call and agree (a
// server hands the CPU whatever infer_types accepts). Refusals need no agreement: infer_types may
// be stricter than one backend.
template <OpCode code, class R, class... P>
void expect_consistent(R (Backend::*method)(P...), const std::type_identity_t<P>&... args) {
  const Recorded recorded = record_only<code>(method, args...);
  try {
    (void)recorded.infer();
  } catch (const Error&) {
    ++fuzz_counts()[code].refused;
    return;
  }
  ++fuzz_counts()[code].accepted;
  expect_inferred<code>(method, args...);
}

#define EXPECT_CONSISTENT(name, ...) \
  expect_consistent<OpCode::name>(ir::OpTraits<OpCode::name>::kMethod, __VA_ARGS__)

ResolvedSlices edgy_slices(const Shape& shape) {
  ResolvedSlices slices(static_cast<std::size_t>(
      uniform(0, 5) == 0 ? uniform(0, 4) : static_cast<std::int64_t>(shape.rank())));
  for (std::size_t d = 0; d < slices.size(); ++d) {
    const std::int64_t n = d < shape.rank() ? shape[d] : 2;
    slices[d] = uniform(0, 2) == 0 ? random_slice(n)
                                   : ResolvedSlice{uniform(-1, n), uniform(-1, n + 1), edgy(2)};
  }
  return slices;
}

Axes edgy_options(std::size_t dims, std::int64_t low, std::int64_t high) {
  Axes values(uniform(0, 6) == 0 ? static_cast<std::size_t>(uniform(0, 3)) : dims);
  for (std::int64_t& v : values) v = uniform(low, high);
  return values;
}

// v, or one time in eight a value near it: arguments mostly valid, a few fields off.
std::int64_t nudged(std::int64_t v) { return uniform(0, 7) ? v : v + uniform(-2, 2); }

Axes nudged(Axes values) {
  for (std::int64_t& v : values) v = nudged(v);
  if (uniform(0, 15) == 0) values.resize(static_cast<std::size_t>(uniform(0, 3)));
  return values;
}

// A tensor's shape stays a shape: dims nudged below 0 are 0.
Shape nudged(const Shape& shape) {
  Axes dims = nudged(shape.to_vector());
  for (std::int64_t& d : dims) d = std::max<std::int64_t>(d, 0);
  return Shape(dims);
}

// A sliding window over `dims` spatial dims of sizes at least the kernel: mostly valid options.
struct Window {
  Axes in, kernel, stride, padding, dilation;
};
Window random_window(std::size_t dims) {
  Window w;
  for (std::size_t d = 0; d < dims; ++d) {
    w.kernel.push_back(uniform(1, 3));
    w.dilation.push_back(uniform(1, 2));
    w.stride.push_back(uniform(1, 2));
    w.padding.push_back(uniform(0, w.kernel.back() / 2));
    w.in.push_back(uniform(w.dilation.back() * (w.kernel.back() - 1) + 1, 5));
  }
  return w;
}

// [N, C, spatial...] from the window's input sizes.
Shape image_of(std::int64_t batch, std::int64_t channels, const Axes& spatial) {
  Axes dims{batch, channels};
  dims.insert(dims.end(), spatial.begin(), spatial.end());
  return Shape(dims);
}

void fuzz_once() {
  const DType dtype = some_dtype();
  const Shape shape = small_shape();
  const auto x = tensor(dtype, shape);
  const auto rank = static_cast<std::int64_t>(shape.rank());
  switch (uniform(0, 33)) {
    case 0:
      EXPECT_CONSISTENT(sum_dim, x, edgy(rank));
      break;
    case 1:
      EXPECT_CONSISTENT(cumprod, x, edgy(rank));
      break;
    case 2:
      EXPECT_CONSISTENT(max_dim, x, edgy(rank));
      break;
    case 3:
      EXPECT_CONSISTENT(argmin, x, edgy(rank), uniform(0, 3) ? DType::I32 : DType::F32);
      break;
    case 4:
      EXPECT_CONSISTENT(topk_with_indices, x, edgy(), edgy(rank), true, DType::I64);
      break;
    case 5: {
      const Shape data = random_shape(1, 3, 1, 4);
      EXPECT_CONSISTENT(unfold, tensor(dtype, data), edgy(static_cast<std::int64_t>(data.rank())),
                        edgy(), edgy(3));
      break;
    }
    case 6:
      EXPECT_CONSISTENT(repeat_dim, x, edgy(rank), edgy(3));
      break;
    case 7:
      EXPECT_CONSISTENT(swap_dims, x, edgy(rank), edgy(rank));
      break;
    case 8:
      EXPECT_CONSISTENT(permute, x, random_axes(3, rank));
      break;
    case 9:
      EXPECT_CONSISTENT(flip, x, random_axes(3, rank));
      break;
    case 10:
      EXPECT_CONSISTENT(reshape, x, small_shape(3, -1));
      break;
    case 11:
      EXPECT_CONSISTENT(expand, x, small_shape(4, -1));
      break;
    case 12:
      EXPECT_CONSISTENT(slice, x, edgy_slices(shape));
      break;
    case 13: {
      const ResolvedSlices slices = edgy_slices(shape);
      const Shape values = uniform(0, 1) ? small_shape() : region(random_slices(shape));
      EXPECT_CONSISTENT(slice_assign, x, slices, tensor(dtype, values));
      break;
    }
    case 14:
      EXPECT_CONSISTENT(add, x, tensor(uniform(0, 4) ? dtype : DType::F64, near(shape)));
      break;
    case 15:
      EXPECT_CONSISTENT(matmul, x, tensor(dtype, small_shape(4)));
      break;
    case 16: {
      PrimitiveList xs{x};
      for (std::int64_t i = uniform(0, 2); i > 0; --i) xs.push_back(tensor(dtype, small_shape()));
      EXPECT_CONSISTENT(cat, xs, edgy(rank));
      break;
    }
    case 17: {
      const auto data = tensor(dtype, small_shape(3, 1));
      EXPECT_CONSISTENT(gather, edgy(rank), data, indices(small_shape()));
      break;
    }
    case 18: {
      const auto data = tensor(dtype, small_shape(3, 1));
      const Shape index = small_shape();
      EXPECT_CONSISTENT(scatter, edgy(rank), data, indices(index),
                        tensor(dtype, uniform(0, 1) ? index : small_shape()), IndexingUpdate::Add);
      break;
    }
    case 19: {
      const auto data = tensor(dtype, small_shape(3, 1));
      EXPECT_CONSISTENT(select, data, edgy(rank), indices(small_shape(2)));
      break;
    }
    case 20: {
      const auto data = tensor(dtype, small_shape(3, 1));
      EXPECT_CONSISTENT(gather_nd, data, indices(small_shape(3)));
      break;
    }
    case 21:
      EXPECT_CONSISTENT(mask_where, x, mask(near(shape)), tensor(dtype, near(shape)));
      break;
    case 22:
      EXPECT_CONSISTENT(mask_fill, x, tensor(uniform(0, 3) ? DType::Bool : dtype, near(shape)),
                        Scalar(1));
      break;
    case 23: {
      const auto dims = static_cast<std::size_t>(uniform(1, 3));
      const Window w = random_window(dims);
      const std::int64_t groups = uniform(1, 2), per_group = uniform(1, 2);
      const std::int64_t out = groups * uniform(1, 2);
      const ConvOptions options{nudged(w.stride), nudged(w.padding), nudged(w.dilation),
                                nudged(groups)};
      const OptionalPrimitive bias =
          uniform(0, 1) ? OptionalPrimitive(floats(nudged(Shape{out}))) : std::nullopt;
      EXPECT_CONSISTENT(conv, floats(nudged(image_of(uniform(0, 2), groups * per_group, w.in))),
                        floats(nudged(image_of(out, per_group, w.kernel))), bias, options);
      break;
    }
    case 24: {
      const auto dims = static_cast<std::size_t>(uniform(1, 3));
      const Window w = random_window(dims);
      const std::int64_t groups = uniform(1, 2), channels = groups * uniform(1, 2);
      Axes padding_out;
      for (std::size_t d = 0; d < dims; ++d) {
        padding_out.push_back(uniform(0, std::max(w.stride[d], w.dilation[d]) - 1));
      }
      const ConvTransposeOptions options{nudged(w.stride), nudged(w.padding), nudged(padding_out),
                                         nudged(w.dilation), nudged(groups)};
      EXPECT_CONSISTENT(conv_transpose, floats(nudged(image_of(uniform(0, 2), channels, w.in))),
                        floats(nudged(image_of(channels, uniform(1, 2), w.kernel))), std::nullopt,
                        options);
      break;
    }
    case 25: {
      const auto dims = static_cast<std::size_t>(uniform(1, 3));
      const Window w = random_window(dims);
      const Shape image = nudged(image_of(uniform(0, 2), uniform(1, 2), w.in));
      if (uniform(0, 1)) {
        const PoolOptions options{nudged(w.kernel),   nudged(w.stride),   nudged(w.padding),
                                  nudged(w.dilation), uniform(0, 1) == 1, true};
        EXPECT_CONSISTENT(max_pool_with_indices, floats(image), options, DType::I32);
      } else {
        const PoolOptions options{nudged(w.kernel),      nudged(w.stride),   nudged(w.padding),
                                  nudged(Axes(dims, 1)), uniform(0, 1) == 1, uniform(0, 1) == 1};
        EXPECT_CONSISTENT(avg_pool, floats(image), options);
      }
      break;
    }
    case 26:
      EXPECT_CONSISTENT(adaptive_avg_pool, floats(random_shape(2, 5, 0, 4)),
                        edgy_options(uniform(0, 3), 0, 4));
      break;
    case 27:
      EXPECT_CONSISTENT(interpolate, floats(random_shape(3, 5, 0, 4)), edgy_options(2, 0, 5),
                        InterpolateOptions{InterpolateMode::Bilinear, uniform(0, 1) == 1});
      break;
    case 28: {
      const Window w = random_window(2);
      const UnfoldOptions options{nudged(w.kernel), nudged(w.stride), nudged(w.padding),
                                  nudged(w.dilation)};
      const Shape image = image_of(uniform(0, 2), uniform(1, 2), w.in);
      if (uniform(0, 1)) {
        EXPECT_CONSISTENT(unfold_patches, floats(nudged(image)), options);
        break;
      }
      // fold_patches takes what unfold_patches gives (as infer_types computes it), or near it.
      Shape patches = small_shape();
      try {
        patches = RECORD(unfold_patches, typed(DType::F32, image), options).infer()[0].shape;
      } catch (const Error&) {
      }
      EXPECT_CONSISTENT(fold_patches, floats(nudged(patches)), nudged(w.in), options);
      break;
    }
    case 29:
      EXPECT_CONSISTENT(embedding, floats(small_shape(3, 1)), indices(small_shape()));
      break;
    case 30: {
      const std::int64_t in = rank > 0 ? shape[shape.rank() - 1] : 1, out = uniform(0, 3);
      EXPECT_CONSISTENT(
          linear, floats(shape), floats(nudged(Shape{in, out})),
          uniform(0, 1) ? OptionalPrimitive(floats(nudged(Shape{out}))) : std::nullopt);
      break;
    }
    case 31:
      EXPECT_CONSISTENT(layer_norm, floats(shape),
                        floats(nudged(Shape{rank > 0 ? shape[shape.rank() - 1] : 1})), std::nullopt,
                        static_cast<double>(edgy()));
      break;
    case 32: {
      // Batch and heads of at least 1: the CPU's kernel takes the largest of the operands' sizes,
      // not their broadcast, so a 0 against a 1 gives it 1 where infer_types (as the tensor
      // layer and the default attention) gives 0.
      const std::int64_t batch = uniform(1, 2), heads = uniform(1, 2), queries = uniform(0, 3);
      const std::int64_t keys = uniform(0, 3), depth = uniform(0, 3);
      auto spread = [](std::int64_t n) { return uniform(0, 2) ? n : 1; };
      auto lead = [&](Shape s) {
        s = nudged(s);
        for (std::size_t d = 0; d < 2 && d < s.rank(); ++d) s[d] = std::max<std::int64_t>(s[d], 1);
        return floats(s);
      };
      const auto query = lead(Shape{spread(batch), spread(heads), queries, depth});
      const auto key = lead(Shape{spread(batch), spread(heads), keys, depth});
      const auto value = lead(Shape{spread(batch), spread(heads), keys, uniform(0, 3)});
      const Shape scores{spread(batch), spread(heads), spread(queries), spread(keys)};
      EXPECT_CONSISTENT(attention, query, key, value,
                        uniform(0, 1) ? OptionalPrimitive(mask(nudged(scores))) : std::nullopt,
                        uniform(0, 1) ? OptionalPrimitive(floats(nudged(scores))) : std::nullopt,
                        std::nullopt, AttentionOptions{std::nullopt, uniform(0, 1) == 1});
      break;
    }
    default:
      EXPECT_CONSISTENT(prelu, floats(shape), floats(near(shape)));
      break;
  }
}

}  // namespace

TEST(InferFuzz, WhatInferAcceptsTheCpuRunsAlike) {
  for (int i = 0; i < 20000 && !HasFailure(); ++i) fuzz_once();
  // Each family had both outcomes: the draws reach past the valid region and into it.
  for (const auto& [code, counts] : fuzz_counts()) {
    EXPECT_GT(counts.accepted, 0) << op_info(code).name << " was never accepted";
    EXPECT_GT(counts.refused, 0) << op_info(code).name << " was never refused";
  }
  EXPECT_GE(fuzz_counts().size(), 34u);
}

// ---- the same refusals as the tensor layer ----------------------------------------------------

namespace {

// Which kiln error a call throws, if any.
enum class Outcome {
  Accepted,
  DTypeMismatch,
  ShapeMismatch,
  InvalidArgument,
  OutOfMemory,
  UnsupportedDType,
  Other
};

const char* outcome_name(Outcome outcome) {
  constexpr const char* names[] = {"accepted",        "DTypeMismatch", "ShapeMismatch",
                                   "InvalidArgument", "OutOfMemory",   "UnsupportedDType",
                                   "another error"};
  return names[static_cast<int>(outcome)];
}

template <class F>
Outcome outcome_of(F&& f) {
  try {
    f();
  } catch (const DTypeMismatch&) {
    return Outcome::DTypeMismatch;
  } catch (const ShapeMismatch&) {
    return Outcome::ShapeMismatch;
  } catch (const InvalidArgument&) {
    return Outcome::InvalidArgument;
  } catch (const OutOfMemory&) {
    return Outcome::OutOfMemory;
  } catch (const UnsupportedDType&) {
    return Outcome::UnsupportedDType;
  } catch (const std::exception&) {
    return Outcome::Other;
  }
  return Outcome::Accepted;
}

std::map<OpCode, int>& agreements() {
  static std::map<OpCode, int> counts;
  return counts;
}

// Where the tensor layer refuses a call, infer_types refuses the backend call it would have made
// with the same error type (index tensors hold zeros: their values are the backend's to check).
// (Where the tensor layer accepts, it may first normalise a dim or promote a dtype, which the
// backend call then no longer needs.)
void expect_same_refusal(Outcome tensor_layer, const Recorded& backend_call) {
  if (tensor_layer == Outcome::Accepted) return;
  ++agreements()[backend_call.op().code];
  const Outcome inferred = outcome_of([&] { (void)backend_call.infer(); });
  EXPECT_EQ(outcome_name(inferred), std::string(outcome_name(tensor_layer)))
      << ir::to_string(backend_call.op());
}

#define EXPECT_SAME_REFUSAL(tensor_layer_call, name, ...) \
  expect_same_refusal(outcome_of([&] { (void)tensor_layer_call; }), RECORD(name, __VA_ARGS__))

// The dim a backend receives for dim: the tensor layer counts a negative one from the end.
std::int64_t normalized(std::int64_t dim, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  return dim < 0 && dim >= -r ? dim + r : dim;
}

Axes normalized(Axes axes, std::size_t rank) {
  for (std::int64_t& a : axes) a = normalized(a, rank);
  return axes;
}

// An option vector as the tensor layer fills it in: empty takes `dims` copies of fallback.
Axes filled_option(const Axes& values, std::size_t dims, std::int64_t fallback) {
  return values.empty() ? Axes(dims, fallback) : values;
}

void compare_refusals_once() {
  const DType dtype = some_dtype();
  const Shape shape = random_shape(1, 3, 0, 3);
  const auto x = tensor(dtype, shape);
  const auto rank = static_cast<std::int64_t>(shape.rank());
  // Of x's dtype or of another kind: within a kind the tensor layer promotes before the call.
  const auto other =
      tensor(uniform(0, 3) ? dtype : (is_bool(dtype) ? DType::F32 : DType::Bool), near(shape));
  switch (uniform(0, 19)) {
    case 0:
      EXPECT_SAME_REFUSAL(detail::add(x, other), add, x, other);
      break;
    case 1: {
      const auto rhs = tensor(dtype, small_shape(4));
      EXPECT_SAME_REFUSAL(detail::matmul(x, rhs), matmul, x, rhs);
      break;
    }
    case 2: {
      const std::int64_t dim = edgy(rank);
      EXPECT_SAME_REFUSAL(detail::sum_dim(x, dim), sum_dim, x, normalized(dim, shape.rank()));
      break;
    }
    case 3: {
      const std::int64_t dim = edgy(rank);
      EXPECT_SAME_REFUSAL(detail::max_dim(x, dim), max_dim, x, normalized(dim, shape.rank()));
      break;
    }
    case 4: {
      const std::int64_t dim = edgy(rank);
      EXPECT_SAME_REFUSAL(detail::argmax(x, dim), argmax, x, normalized(dim, shape.rank()),
                          DType::I64);
      break;
    }
    case 5: {
      const auto data = tensor(dtype, random_shape(1, 3, 1, 3));
      const auto index = zeros(uniform(0, 3) ? DType::I64 : DType::F32, small_shape());
      const std::int64_t dim = edgy(rank);
      EXPECT_SAME_REFUSAL(detail::gather(dim, data, index), gather, normalized(dim, data->rank()),
                          data, index);
      break;
    }
    case 6: {
      const auto data = tensor(dtype, random_shape(1, 3, 1, 3));
      const auto index = indices(small_shape(2));
      const std::int64_t dim = edgy(rank);
      EXPECT_SAME_REFUSAL(detail::select(data, dim, index), select, data,
                          normalized(dim, data->rank()), index);
      break;
    }
    case 7: {
      const PrimitiveList xs{x, tensor(dtype, small_shape())};
      const std::int64_t dim = edgy(rank);
      EXPECT_SAME_REFUSAL(detail::cat(xs, dim), cat, xs, normalized(dim, shape.rank()));
      break;
    }
    case 8: {
      const Shape target = random_shape(1, 3, 0, 4);
      EXPECT_SAME_REFUSAL(detail::reshape(x, target, target.rank()), reshape, x, target);
      break;
    }
    case 9: {
      const Shape target = random_shape(0, 4, 0, 3);
      EXPECT_SAME_REFUSAL(detail::expand(x, target), expand, x, target);
      break;
    }
    case 10: {
      const Axes axes = random_axes(3, rank);
      EXPECT_SAME_REFUSAL(detail::permute(x, axes), permute, x, normalized(axes, shape.rank()));
      EXPECT_SAME_REFUSAL(detail::flip(x, axes), flip, x, normalized(axes, shape.rank()));
      break;
    }
    case 11: {
      const std::int64_t dim = edgy(rank), size = edgy(), step = edgy(3);
      EXPECT_SAME_REFUSAL(detail::unfold(x, dim, size, step), unfold, x,
                          normalized(dim, shape.rank()), size, step);
      break;
    }
    case 12: {
      const std::int64_t dim = edgy(rank), times = edgy(3);
      EXPECT_SAME_REFUSAL(detail::repeat_dim(x, dim, times), repeat_dim, x,
                          normalized(dim, shape.rank()), times);
      break;
    }
    case 13: {
      const std::int64_t k = edgy(), dim = edgy(rank);
      EXPECT_SAME_REFUSAL(detail::topk_with_indices(x, k, dim, true), topk_with_indices, x, k,
                          normalized(dim, shape.rank()), true, DType::I64);
      break;
    }
    case 14: {
      const auto dims = static_cast<std::size_t>(uniform(1, 3));
      const Window w = random_window(dims);
      const ConvOptions options{nudged(w.stride), nudged(w.padding), nudged(w.dilation),
                                nudged(std::int64_t{1})};
      const std::int64_t channels = uniform(1, 2);
      const auto image = tensor(uniform(0, 3) ? DType::F32 : dtype,
                                nudged(image_of(uniform(0, 2), channels, w.in)));
      const auto weight = floats(nudged(image_of(uniform(1, 2), channels, w.kernel)));
      if (image->rank() < 3 || image->rank() > 5) break;  // the tensor layer names spatial dims
      // The tensor layer fills in option vectors left empty; the backend call has them filled.
      const std::size_t spatial = image->rank() - 2;
      const ConvOptions filled{filled_option(options.stride, spatial, 1),
                               filled_option(options.padding, spatial, 0),
                               filled_option(options.dilation, spatial, 1), options.groups};
      EXPECT_SAME_REFUSAL(detail::conv(image, weight, std::nullopt, options, spatial), conv, image,
                          weight, std::nullopt, filled);
      break;
    }
    case 15: {
      const auto dims = static_cast<std::size_t>(uniform(1, 3));
      const Window w = random_window(dims);
      const auto image = floats(nudged(image_of(uniform(0, 2), uniform(1, 2), w.in)));
      if (image->rank() < 3 || image->rank() > 5) break;
      const PoolOptions options{nudged(w.kernel),   nudged(w.stride),   nudged(w.padding),
                                nudged(w.dilation), uniform(0, 1) == 1, true};
      const std::size_t spatial = image->rank() - 2;
      PoolOptions filled = options;
      if (filled.stride.empty()) filled.stride = filled.kernel_size;
      filled.padding = filled_option(filled.padding, spatial, 0);
      filled.dilation = filled_option(filled.dilation, spatial, 1);
      EXPECT_SAME_REFUSAL(detail::max_pool(image, options, spatial), max_pool, image, filled);
      EXPECT_SAME_REFUSAL(detail::avg_pool(image, options, spatial), avg_pool, image, filled);
      break;
    }
    case 16: {
      const auto weight = tensor(dtype, nudged(Shape{shape[shape.rank() - 1], 3}));
      EXPECT_SAME_REFUSAL(detail::linear(x, weight, std::nullopt), linear, x, weight, std::nullopt);
      const auto gamma = tensor(dtype, nudged(Shape{shape[shape.rank() - 1]}));
      EXPECT_SAME_REFUSAL(detail::layer_norm(x, gamma, std::nullopt, 1e-5), layer_norm, x, gamma,
                          std::nullopt, 1e-5);
      break;
    }
    case 17: {
      const auto index = zeros(uniform(0, 3) ? DType::I32 : DType::F32, small_shape());
      const auto weights = tensor(dtype, random_shape(1, 3, 1, 3));
      EXPECT_SAME_REFUSAL(detail::embedding(weights, index), embedding, weights, index);
      break;
    }
    case 18: {
      const auto where = tensor(uniform(0, 3) ? DType::Bool : dtype, near(shape));
      const Scalar value = uniform(0, 1) ? Scalar(2) : Scalar(0.5);
      EXPECT_SAME_REFUSAL(detail::mask_fill(x, where, value), mask_fill, x, where, value);
      break;
    }
    default: {
      const std::int64_t dim = edgy(rank);
      EXPECT_SAME_REFUSAL(detail::cross(x, other, dim), cross, x, other,
                          normalized(dim, shape.rank()));
      EXPECT_SAME_REFUSAL(detail::prelu(x, other), prelu, x, other);
      break;
    }
  }
}

}  // namespace

TEST(InferRefusesAsTheTensorLayer, RandomCalls) {
  for (int i = 0; i < 5000 && !HasFailure(); ++i) compare_refusals_once();
  EXPECT_GE(agreements().size(), 24u);
}

}  // namespace kiln::remote_test

#endif  // KILN_HAVE_REMOTE_SERVER
