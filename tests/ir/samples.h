// Representative arguments for every parameter type of ops.def, and programs built from them:
// shared by the IR tests (the round trip of every op, the hash and the fuzzer).
#pragma once

#include <cmath>
#include <future>
#include <limits>

#include "ir/op_ir.h"

namespace kiln::ir_test {

// A tensor with a dtype and a shape and nothing behind it: recording reads no more.
class ShapeOnly : public TensorPrimitive {
 public:
  using TensorPrimitive::TensorPrimitive;
  bool storage_unique() const noexcept override { return false; }
};

inline Primitive tensor(DType dtype = DType::F32, Shape shape = {2, 3}) {
  return std::make_shared<ShapeOnly>(dtype, std::move(shape), Device::cpu());
}

// variant 0 and 1 differ in every value (optional tensors present or absent, lists of 2 or 3,
// scalars of each kind, a NaN among them), so both encodings of each field are exercised.
template <class T>
struct Sample;

template <>
struct Sample<Primitive> {
  static Primitive make(int variant) { return tensor(variant ? DType::I32 : DType::F32); }
};
template <>
struct Sample<OptionalPrimitive> {
  static OptionalPrimitive make(int variant) {
    if (variant) return std::nullopt;
    return tensor();
  }
};
template <>
struct Sample<PrimitiveList> {
  static PrimitiveList make(int variant) {
    PrimitiveList list;
    for (int i = 0; i < 2 + variant; ++i) list.push_back(tensor());
    return list;
  }
};
template <>
struct Sample<Scalar> {
  static Scalar make(int variant) {
    return variant ? Scalar(std::numeric_limits<double>::quiet_NaN()) : Scalar(std::int64_t{-3});
  }
};
template <>
struct Sample<std::int64_t> {
  static std::int64_t make(int variant) { return variant ? -1 : 1; }
};
template <>
struct Sample<bool> {
  static bool make(int variant) { return variant == 0; }
};
template <>
struct Sample<double> {
  static double make(int variant) { return variant ? -0.0 : 1e-5; }
};
template <>
struct Sample<DType> {
  static DType make(int variant) { return variant ? DType::BF16 : DType::I64; }
};
template <>
struct Sample<Shape> {
  static Shape make(int variant) { return variant ? Shape{} : Shape{4, 5, 6}; }
};
template <>
struct Sample<Axes> {
  static Axes make(int variant) { return variant ? Axes{} : Axes{1, 0}; }
};
template <>
struct Sample<ResolvedSlices> {
  static ResolvedSlices make(int variant) {
    if (variant) return {{3, 2, -1}};
    return {{0, 2, 1}, {1, 1, 2}};
  }
};
template <>
struct Sample<Distribution> {
  static Distribution make(int variant) {
    return variant ? Distribution::bernoulli(0.25) : Distribution::normal(0, 2);
  }
};
template <>
struct Sample<IndexingUpdate> {
  static IndexingUpdate make(int variant) {
    return variant ? IndexingUpdate::Max : IndexingUpdate::Add;
  }
};
template <>
struct Sample<ReduceOperation> {
  static ReduceOperation make(int variant) {
    return variant ? ReduceOperation::Min : ReduceOperation::Mean;
  }
};
template <>
struct Sample<ConvOptions> {
  static ConvOptions make(int variant) {
    if (variant) return {};
    return {.stride = {1, 2}, .padding = {0, 1}, .dilation = {1, 1}, .groups = 2};
  }
};
template <>
struct Sample<ConvTransposeOptions> {
  static ConvTransposeOptions make(int variant) {
    if (variant) return {};
    return {.stride = {2}, .padding = {1}, .padding_out = {1}, .dilation = {1}, .groups = 1};
  }
};
template <>
struct Sample<PoolOptions> {
  static PoolOptions make(int variant) {
    if (variant) return {.kernel_size = {3}, .ceil_mode = true, .count_include_pad = false};
    return {.kernel_size = {2, 2}, .stride = {2, 2}, .padding = {0, 0}, .dilation = {1, 1}};
  }
};
template <>
struct Sample<UnfoldOptions> {
  static UnfoldOptions make(int variant) {
    if (variant) return {};
    return {.kernel_size = {3, 3}, .stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}};
  }
};
template <>
struct Sample<InterpolateOptions> {
  static InterpolateOptions make(int variant) {
    if (variant) return {InterpolateMode::Bicubic, true};
    return {InterpolateMode::Bilinear, false};
  }
};
template <>
struct Sample<AttentionOptions> {
  static AttentionOptions make(int variant) {
    if (variant) return {std::nullopt, true};
    return {0.125, false};
  }
};
template <>
struct Sample<QuantScheme> {
  static QuantScheme make(int variant) {
    return variant ? QuantScheme{QuantScheme::Kind::Int8Block, 64}
                   : QuantScheme{QuantScheme::Kind::Q4_K, 256};
  }
};
template <>
struct Sample<Device> {
  static Device make(int variant) { return variant ? Device::cpu().autodiff() : Device::cpu(); }
};
template <>
struct Sample<ProcessGroup> {
  static ProcessGroup make(int variant) {
    static const ProcessGroup groups[] = {ProcessGroup::single(), ProcessGroup::single()};
    return groups[variant];
  }
};
template <>
struct Sample<TensorData> {
  static TensorData make(int variant) {
    if (variant) return TensorData::from_vec(std::vector<std::int16_t>{}, Shape{0, 3});
    return TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
  }
};
template <>
struct Sample<PrimitivePair> {
  static PrimitivePair make(int) { return {tensor(), tensor(DType::I64)}; }
};
template <>
struct Sample<ReadFuture> {
  static ReadFuture make(int) { return {}; }
};
template <>
struct Sample<ReadManyFuture> {
  static ReadManyFuture make(int) { return {}; }
};

template <OpCode code, class R, class... P>
void record_sample(ir::Recorder& recorder, int variant, R (Backend::*)(P...)) {
  recorder.record<code>(Sample<R>::make(variant), Sample<P>::make(variant)...);
}

// One op of each code with the representative arguments of variant, recorded as a program.
template <OpCode code>
ir::Program sample_program(int variant) {
  ir::Recorder recorder;
  record_sample<code>(recorder, variant, ir::OpTraits<code>::kMethod);
  return recorder.program();
}

// Every op of ops.def in one program (both variants), each output returned.
inline ir::Program every_op_program() {
  ir::Recorder recorder;
#define KILN_OP(name, ...)                                                       \
  record_sample<OpCode::name>(recorder, 0, ir::OpTraits<OpCode::name>::kMethod); \
  record_sample<OpCode::name>(recorder, 1, ir::OpTraits<OpCode::name>::kMethod);
#include "kiln/detail/ops.def"
#undef KILN_OP
  ir::Program program = recorder.program();
  for (const ir::Op& op : program.ops) {
    for (ir::TensorId id : op.outputs) program.outputs.push_back(id);
  }
  return program;
}

inline std::vector<std::byte> bytes_of(const ir::Program& program) {
  return ir::serialize(program);
}

}  // namespace kiln::ir_test
