// Replay: programs recorded from real calls on the CPU backend, run again through ir::run and
// ir::replay (and through the wire), give exactly what the direct calls gave.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "ir/op_ir.h"
#include "runtime/registry.h"

namespace kiln::ir_test {

struct RandomProgram {
  std::vector<Primitive> inputs;
  std::vector<Primitive> expected;  // the direct calls' results, in the order marked
  std::vector<TensorData> expected_reads;
  ir::Program program;
};

Primitive random_input(Backend& cpu, std::mt19937& rng, const Shape& shape) {
  std::uniform_real_distribution<float> value(0.1f, 2.0f);
  std::vector<float> data(static_cast<std::size_t>(shape.num_elements()));
  for (float& v : data) v = value(rng);
  return cpu.from_data(TensorData::from_vec(data, shape), Device::cpu());
}

// Ops drawn at random over f32 values whose shapes broadcast to [4, 5]; each called on the CPU
// backend with copies (so the direct results stay) and recorded.
RandomProgram random_program(Backend& cpu, unsigned seed, int steps) {
  std::mt19937 rng(seed);
  RandomProgram out;
  ir::Recorder recorder;
  std::vector<Primitive> pool;
  for (int i = 0; i < 3; ++i) {
    out.inputs.push_back(random_input(cpu, rng, {4, 5}));
    recorder.id_of(out.inputs.back());
    pool.push_back(out.inputs.back());
  }
  auto pick = [&]() -> const Primitive& {
    return pool[std::uniform_int_distribution<std::size_t>(0, pool.size() - 1)(rng)];
  };
  for (int step = 0; step < steps; ++step) {
    const int kind = std::uniform_int_distribution<int>(0, 11)(rng);
    const std::int64_t dim = std::uniform_int_distribution<std::int64_t>(0, 1)(rng);
    const double scalar = std::uniform_real_distribution<double>(-2, 2)(rng);
    Primitive a = pick();
    Primitive b = pick();
    Primitive result;
    switch (kind) {
      case 0:
        result = cpu.add(a, b);
        recorder.record<OpCode::add>(result, a, b);
        break;
      case 1:
        result = cpu.mul(a, b);
        recorder.record<OpCode::mul>(result, a, b);
        break;
      case 2:
        result = cpu.maximum(a, b);
        recorder.record<OpCode::maximum>(result, a, b);
        break;
      case 3:
        result = cpu.tanh(a);
        recorder.record<OpCode::tanh>(result, a);
        break;
      case 4: {  // exp(-|a|): three calls, three ops
        Primitive absolute = cpu.abs(a);
        recorder.record<OpCode::abs>(absolute, a);
        Primitive negated = cpu.neg(absolute);
        recorder.record<OpCode::neg>(negated, absolute);
        result = cpu.exp(negated);
        recorder.record<OpCode::exp>(result, negated);
        break;
      }
      case 5:
        result = cpu.add_scalar(a, scalar);
        recorder.record<OpCode::add_scalar>(result, a, scalar);
        break;
      case 6:
        result = cpu.sum_dim(a, dim);
        recorder.record<OpCode::sum_dim>(result, a, dim);
        break;
      case 7:
        result = cpu.softmax(a, dim);
        recorder.record<OpCode::softmax>(result, a, dim);
        break;
      case 8: {
        Primitive mask = cpu.greater_elem(b, 1.0);
        recorder.record<OpCode::greater_elem>(mask, b, 1.0);
        result = cpu.mask_fill(b, mask, scalar);
        recorder.record<OpCode::mask_fill>(result, b, mask, scalar);
        break;
      }
      case 9: {
        PrimitivePair pair = cpu.max_dim_with_indices(a, dim, DType::I64);
        recorder.record<OpCode::max_dim_with_indices>(pair, a, dim, DType::I64);
        result = pair.first;
        break;
      }
      case 10: {
        Primitive wide = cpu.cast(a, DType::F64);
        recorder.record<OpCode::cast>(wide, a, DType::F64);
        Primitive root = cpu.sqrt(wide);
        recorder.record<OpCode::sqrt>(root, wide);
        result = cpu.cast(root, DType::F32);
        recorder.record<OpCode::cast>(result, root, DType::F32);
        break;
      }
      default:
        result = cpu.clamp(a, -0.5, 0.5 + scalar * scalar);
        recorder.record<OpCode::clamp>(result, a, -0.5, 0.5 + scalar * scalar);
        break;
    }
    pool.push_back(result);
    if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) {
      out.expected.push_back(result);
      recorder.mark_output(result);
    }
  }
  // A tensor list (one value twice) and a read at the end: cat of the last value, its data.
  const PrimitiveList last{pool.back(), pool.back()};
  Primitive joined = cpu.cat(last, 0);
  recorder.record<OpCode::cat>(joined, last, 0);
  out.expected.push_back(joined);
  recorder.mark_output(joined);
  ReadFuture read = cpu.into_data(joined);
  out.expected_reads.push_back(read.get());
  recorder.record<OpCode::into_data>(ReadFuture{}, joined);
  out.program = recorder.program();
  return out;
}

void expect_same_data(Backend& cpu, const Primitive& got, const Primitive& expected) {
  const TensorData a = cpu.into_data(got).get();
  const TensorData b = cpu.into_data(expected).get();
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  const auto x = a.bytes();
  const auto y = b.bytes();
  EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end()));
}

TEST(IrReplay, RandomProgramsReplayExactlyOnTheCpu) {
  Backend& cpu = backend_for(Device::cpu());
  for (unsigned seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomProgram recorded = random_program(cpu, seed, 12);
    // Through the wire first: the server's view of the program.
    const ir::Program program = ir::deserialize(ir::serialize(recorded.program));
    ASSERT_EQ(program, recorded.program);
    ir::RunResult result = ir::run(cpu, program, recorded.inputs);
    ASSERT_EQ(result.outputs.size(), recorded.expected.size()) << ir::to_string(program);
    for (std::size_t i = 0; i < result.outputs.size(); ++i) {
      expect_same_data(cpu, result.outputs[i], recorded.expected[i]);
    }
    ASSERT_EQ(result.reads.size(), 1u);
    const TensorData read = std::get<ReadFuture>(result.reads[0]).get();
    const auto x = read.bytes();
    const auto y = recorded.expected_reads[0].bytes();
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end()));
  }
}

TEST(IrReplay, OneOpAtATimeOnAValueTable) {
  Backend& cpu = backend_for(Device::cpu());
  RandomProgram recorded = random_program(cpu, 77, 10);
  std::vector<Primitive> values(recorded.program.value_count());
  for (std::size_t i = 0; i < recorded.inputs.size(); ++i) {
    values[recorded.program.inputs[i].id.index] = recorded.inputs[i];
  }
  std::vector<ir::ReadResult> reads;
  for (const ir::Op& op : recorded.program.ops) ir::replay(cpu, op, values, reads);
  for (std::size_t i = 0; i < recorded.expected.size(); ++i) {
    expect_same_data(cpu, values[recorded.program.outputs[i].index], recorded.expected[i]);
  }
  EXPECT_EQ(reads.size(), 1u);
}

TEST(IrReplay, CreationOpsAndAttributesComeBack) {
  Backend& cpu = backend_for(Device::cpu());
  ir::Recorder recorder;
  const TensorData data = TensorData::from_vec(std::vector<float>{1, -2, 3, -4, 5, -6}, {2, 3});
  Primitive x = cpu.from_data(data, Device::cpu());
  recorder.record<OpCode::from_data>(x, data, Device::cpu());
  Primitive range = cpu.arange(2, 8, 2, DType::I32, Device::cpu());
  recorder.record<OpCode::arange>(range, 2, 8, 2, DType::I32, Device::cpu());
  Primitive t = cpu.permute(x, Axes{1, 0});
  recorder.record<OpCode::permute>(t, x, Axes{1, 0});
  Primitive s = cpu.slice(t, ResolvedSlices{{0, 2, 2}, {1, 1, 1}});
  recorder.record<OpCode::slice>(s, t, ResolvedSlices{{0, 2, 2}, {1, 1, 1}});
  Primitive r = cpu.reshape(s, Shape{2});
  recorder.record<OpCode::reshape>(r, s, Shape{2});
  for (const Primitive& p : {x, range, t, s, r}) recorder.mark_output(p);
  const ir::Program program = ir::deserialize(ir::serialize(recorder.program()));
  EXPECT_TRUE(program.inputs.empty());
  ir::RunResult result = ir::run(cpu, program, {});
  const std::vector<Primitive> expected{x, range, t, s, r};
  ASSERT_EQ(result.outputs.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    expect_same_data(cpu, result.outputs[i], expected[i]);
  }
}

TEST(IrReplay, RunRefusesInputsOfAnotherType) {
  Backend& cpu = backend_for(Device::cpu());
  RandomProgram recorded = random_program(cpu, 5, 4);
  std::vector<Primitive> inputs = recorded.inputs;
  inputs[0] = cpu.cast(inputs[0], DType::F64);
  EXPECT_THROW((void)ir::run(cpu, recorded.program, inputs), InvalidArgument);
  inputs.pop_back();
  EXPECT_THROW((void)ir::run(cpu, recorded.program, inputs), InvalidArgument);
}

TEST(IrReplay, ReplayRefusesAnOpThatReadsNothing) {
  Backend& cpu = backend_for(Device::cpu());
  RandomProgram recorded = random_program(cpu, 9, 3);
  std::vector<Primitive> values(recorded.program.value_count());  // no inputs filled in
  std::vector<ir::ReadResult> reads;
  EXPECT_THROW(ir::replay(cpu, recorded.program.ops[0], values, reads), InvalidArgument);
  ir::Op op = recorded.program.ops[0];
  op.attributes.emplace_back(1.5);
  for (std::size_t i = 0; i < recorded.inputs.size(); ++i) {
    values[recorded.program.inputs[i].id.index] = recorded.inputs[i];
  }
  EXPECT_THROW(ir::replay(cpu, op, values, reads), InvalidArgument);
}

TEST(IrReplay, DevicesTravelAsPortableValues) {
  const ir::DeviceAttr cpu = ir::DeviceAttr::of(Device::cpu().autodiff().fused());
  EXPECT_EQ(cpu.kind, DeviceKind::Cpu);
  EXPECT_TRUE(cpu.autodiff);
  EXPECT_TRUE(cpu.fused);
  EXPECT_EQ(cpu.to_device(), Device::cpu().autodiff().fused());
  EXPECT_EQ(ir::DeviceAttr::of(Device::cpu()).to_device(), Device::cpu());
  // A device this machine lacks is an error when the op is replayed, not when it is read.
  ir::DeviceAttr gpu;
  gpu.kind = DeviceKind::Cuda;
  gpu.index = 4000;
  EXPECT_THROW((void)gpu.to_device(), Error);
}

}  // namespace kiln::ir_test
