// How the fusion decorator groups a reduction with the elementwise ops on its result (its
// epilogue) for an inner backend that runs them in the reduction's kernels
// (Backend::fuses_reduction_epilogues: CUDA). Here the inner backend is the CPU told to say so,
// and it records the programs it is handed: which ops form one group, the group's iteration
// shape, and when the group may write an assigned update into its parameter (write_into). The
// CPU runs the groups as it runs any (step by step or tile by tile): the values are the unfused
// ones.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_tensor.h"
#include "contract/fused_program.h"
#include "runtime/registry.h"
#include "support/epilogue_decorator.h"
#include "support/spread.h"

namespace kiln::fusion_test {
namespace {

using test::EpilogueDecorator;
using test::ops_of;

Primitive epilogue_matrix(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  return Tensor<2>::from_data(
             TensorData::from_vec(test::spread(rows * cols, seed, -2.0, 2.0), Shape{rows, cols})
                 .convert(DType::F32),
             Device::cpu())
      .primitive();
}

std::vector<double> cpu_values(const Primitive& p) {
  return backend_for(Device::cpu()).into_data(p).get().to_f64_vec();
}

void expect_same(const std::vector<double>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << what << " at " << i;
}

TEST(FusionReductionEpilogue, ABiasUpdateAfterItsGradientsSumIsOneGroup) {
  EpilogueDecorator d(Device::cpu());
  Backend& cpu = backend_for(Device::cpu());
  const Primitive g = epilogue_matrix(128, 40, 1), bias = epilogue_matrix(1, 40, 2);
  // b - g.sum_dim(0) * 0.01: the group iterates over g's shape.
  const Primitive out = d.b.sub(bias, d.b.mul_scalar(d.b.sum_dim(g, 0), Scalar(0.01)));
  const std::vector<double> got = d.read(out);
  ASSERT_EQ(d.programs().size(), 1u);
  const FusedProgram& program = d.programs()[0];
  EXPECT_EQ(ops_of(program), (std::vector<std::string>{"sum_dim", "mul_scalar", "sub"}));
  EXPECT_EQ(program.shape, (Shape{128, 40}));
  EXPECT_EQ(program.steps.back().shape, (Shape{1, 40}));
  expect_same(got, cpu_values(cpu.sub(bias, cpu.mul_scalar(cpu.sum_dim(g, 0), Scalar(0.01)))),
              "b - sum * 0.01");

  // Through several ops of the result's shape, along dim 1, reading another tensor broadcast.
  const Primitive c = epilogue_matrix(1, 1, 3);
  const Primitive chain = d.b.add(d.b.exp(d.b.mul_scalar(d.b.mean_dim(g, 1), Scalar(0.5))), c);
  const std::vector<double> chain_got = d.read(chain);
  ASSERT_EQ(d.programs().size(), 2u);
  EXPECT_EQ(ops_of(d.programs()[1]),
            (std::vector<std::string>{"mean_dim", "mul_scalar", "exp", "add"}));
  EXPECT_EQ(d.programs()[1].shape, (Shape{128, 40}));
  expect_same(chain_got,
              cpu_values(cpu.add(cpu.exp(cpu.mul_scalar(cpu.mean_dim(g, 1), Scalar(0.5))), c)),
              "exp(mean * 0.5) + c");
}

TEST(FusionReductionEpilogue, OnlyOpsOverTheResultJoinAndOthersKeepTheirGroups) {
  EpilogueDecorator d(Device::cpu());
  const Primitive x = epilogue_matrix(64, 30, 4);
  // An op over x's shape after the reduction (x - max): the reduction is its own group's input,
  // as before (the result broadcast back is not an epilogue).
  const Primitive centred = d.b.sub(x, d.b.max_dim(x, 1));
  (void)d.read(centred);
  for (const FusedProgram& program : d.programs()) {
    for (const FusedStep& step : program.steps) {
      if (step.dim() < 0) {
        EXPECT_EQ(step.shape, program.shape) << describe(program);
      }
    }
  }
  // Random numbers of the result's shape are drawn in a group of their own shape.
  d.programs().clear();
  const Primitive noisy =
      d.b.add(d.b.sum_dim(x, 0),
              d.b.random(Shape{1, 30}, Distribution::uniform(0, 1), DType::F32, d.fusion.device()));
  (void)d.read(noisy);
  for (const FusedProgram& program : d.programs()) {
    for (const FusedStep& step : program.steps) {
      if (step.op == OpCode::random) {
        EXPECT_EQ(program.shape, (Shape{1, 30}));
      }
    }
  }
  // A reduction whose result is read after the group (held): written too, and the epilogue
  // still joins it.
  d.programs().clear();
  const Primitive sum = d.b.sum_dim(x, 0);
  const Primitive scaled = d.b.mul_scalar(sum, Scalar(2.0));
  const std::vector<double> scaled_got = d.read(scaled);
  ASSERT_EQ(d.programs().size(), 1u);
  EXPECT_EQ(d.programs()[0].outputs.size(), 2u);
  Backend& cpu = backend_for(Device::cpu());
  expect_same(d.read(sum), cpu_values(cpu.sum_dim(x, 0)), "the held sum");
  expect_same(scaled_got, cpu_values(cpu.mul_scalar(cpu.sum_dim(x, 0), Scalar(2.0))), "sum * 2");
}

TEST(FusionReductionEpilogue, AnAssignedUpdateIsOfferedItsParameterOnlyWhenOnlyTheEpilogueReadsIt) {
  EpilogueDecorator d(Device::cpu());
  Backend& cpu = backend_for(Device::cpu());
  // Rows of 64 reduced along dim 1 over enough rows that the CPU runs the group tile by tile
  // (which writes into the parameter it is offered).
  const std::int64_t rows = 2048, cols = 64;
  const Primitive g = epilogue_matrix(rows, cols, 5);
  const Primitive start = epilogue_matrix(rows, 1, 6);
  const Primitive p = d.fusion.wrap_computed(cpu.add_scalar(start, Scalar(0.0)));  // its own copy
  const auto* storage = cpu::as_cpu(d.fusion.computed(p)).data();
  d.b.assign(p, d.b.sub(p, d.b.mul_scalar(d.b.sum_dim(g, 1), Scalar(0.125))));
  ASSERT_EQ(d.programs().size(), 1u);
  const FusedProgram& update = d.programs()[0];
  EXPECT_EQ(ops_of(update), (std::vector<std::string>{"sum_dim", "mul_scalar", "sub"}));
  ASSERT_EQ(update.write_into.size(), 1u);
  EXPECT_GE(update.write_into[0], 0) << "the parameter was not offered";
  EXPECT_EQ(cpu::as_cpu(d.fusion.computed(p)).data(), storage) << "not written in place";
  expect_same(d.read(p),
              cpu_values(cpu.sub(start, cpu.mul_scalar(cpu.sum_dim(g, 1), Scalar(0.125)))),
              "p - sum * 0.125");

  // The parameter read by the ops the reduction reads: not offered (a reduction's kernels could
  // read an element after the epilogue wrote it), and the values are still right.
  d.programs().clear();
  const std::vector<double> before = d.read(p);
  const Primitive before_p = cpu.add_scalar(d.fusion.computed(p), Scalar(0.0));
  d.b.assign(p, d.b.sub(p, d.b.sum_dim(d.b.mul(g, p), 1)));
  ASSERT_EQ(d.programs().size(), 1u);
  EXPECT_EQ(ops_of(d.programs()[0]), (std::vector<std::string>{"mul", "sum_dim", "sub"}));
  for (std::int32_t into : d.programs()[0].write_into) EXPECT_LT(into, 0);
  expect_same(d.read(p), cpu_values(cpu.sub(before_p, cpu.sum_dim(cpu.mul(g, before_p), 1))),
              "p - sum(g * p)");
  (void)before;
}

}  // namespace
}  // namespace kiln::fusion_test
