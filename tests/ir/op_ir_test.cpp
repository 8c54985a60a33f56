// The op IR (src/ir/): every op of ops.def has an IR form that survives the wire, prints, and
// hashes by structure; malformed programs are refused with the reason.
#include "ir/op_ir.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "ir/samples.h"
#include "ir/wire.h"

namespace kiln::ir_test {

// Every op: recorded from representative arguments, then serialised and read back equal, with
// the same hash and the same text.
template <OpCode code>
void expect_round_trip(int variant) {
  SCOPED_TRACE(std::string(op_info(code).name) + " variant " + std::to_string(variant));
  const ir::Program program = sample_program<code>(variant);
  ASSERT_EQ(program.ops.size(), 1u);
  const ir::Op& op = program.ops[0];
  EXPECT_EQ(op.code, code);
  const ir::OpSignature& sig = ir::signature(code);
  EXPECT_EQ(op.attributes.size(), sig.attributes);
  EXPECT_EQ(op.outputs.size(), sig.outputs);
  EXPECT_NO_THROW(ir::validate(program));
  const ir::Program back = ir::deserialize(ir::serialize(program));
  EXPECT_EQ(back, program);
  EXPECT_EQ(ir::structure_hash(back), ir::structure_hash(program));
  EXPECT_EQ(ir::structure_hash(back.ops[0]), ir::structure_hash(op));
  EXPECT_EQ(ir::to_string(back), ir::to_string(program));
  EXPECT_NE(ir::to_string(op).find(std::string(op_info(code).name) + "("), std::string::npos)
      << ir::to_string(op);
}

TEST(OpIr, EveryOpOfOpsDefRoundTrips) {
  std::size_t ops = 0;
#define KILN_OP(name, ...)            \
  expect_round_trip<OpCode::name>(0); \
  expect_round_trip<OpCode::name>(1); \
  ++ops;
#include "kiln/detail/ops.def"
#undef KILN_OP
  // No op is left without an IR form: the generated list is the whole of ops.def.
  EXPECT_EQ(ops, all_ops().size());
}

TEST(OpIr, SignaturesFollowOpsDef) {
  const ir::OpSignature& add = ir::signature(OpCode::add);
  EXPECT_EQ(add.name, "add");
  EXPECT_EQ(add.tensors, 2);
  EXPECT_EQ(add.attributes, 0);
  EXPECT_EQ(add.outputs, 1);
  const ir::OpSignature& topk = ir::signature(OpCode::topk_with_indices);
  ASSERT_EQ(topk.params.size(), 5u);
  EXPECT_EQ(topk.params[1].name, "k");
  EXPECT_FALSE(topk.params[1].names_dims);
  EXPECT_EQ(topk.params[2].name, "dim");
  EXPECT_TRUE(topk.params[2].names_dims);
  EXPECT_EQ(topk.params[4].attribute, ir::AttributeKind::DType);
  EXPECT_EQ(topk.outputs, 2);
  EXPECT_TRUE(ir::signature(OpCode::cat).tensor_list);
  EXPECT_EQ(ir::signature(OpCode::conv).params[2].slot, ir::SlotKind::OptionalTensor);
  EXPECT_TRUE(ir::signature(OpCode::into_data).read);
  EXPECT_EQ(ir::signature(OpCode::into_data).outputs, 0);
  EXPECT_EQ(ir::signature(OpCode::from_data).params[1].attribute, ir::AttributeKind::Device);
}

TEST(OpIr, PrintsOneLinePerOp) {
  ir::Recorder recorder;
  const Primitive x = tensor(DType::F32, {64, 300});
  const Primitive y = tensor(DType::F32, {64, 300});
  const Primitive sum = tensor(DType::F32, {64, 300});
  const Primitive reduced = tensor(DType::F32, {64, 1});
  const Primitive top = tensor(DType::F32, {64, 1});
  const Primitive index = tensor(DType::I64, {64, 1});
  const Primitive joined = tensor(DType::F32, {128, 300});
  recorder.record<OpCode::add>(sum, x, y);
  recorder.record<OpCode::sum_dim>(reduced, sum, 1);
  recorder.record<OpCode::max_dim_with_indices>(PrimitivePair{top, index}, reduced, 1, DType::I64);
  recorder.record<OpCode::cat>(joined, PrimitiveList{x, sum}, 0);
  recorder.record<OpCode::conv>(sum, x, y, std::nullopt, ConvOptions{.stride = {1}});
  recorder.record<OpCode::mul_scalar>(sum, sum, 2.5);
  recorder.record<OpCode::into_data>(ReadFuture{}, sum);
  recorder.mark_output(sum);
  EXPECT_EQ(ir::to_string(recorder.program()),
            "%0 = input f32 [64, 300]\n"
            "%1 = input f32 [64, 300]\n"
            "%2 = add(%0, %1) f32 [64, 300]\n"
            "%3 = sum_dim(%2, dim=1) f32 [64, 1]\n"
            "%4, %5 = max_dim_with_indices(%3, dim=1, index_dtype=i64) f32 [64, 1], i64 [64, 1]\n"
            "%6 = cat([%0, %2], dim=0) f32 [128, 300]\n"
            "%7 = conv(%0, %1, none, options={stride=[1], padding=[], dilation=[], groups=1}) "
            "f32 [64, 300]\n"
            "%8 = mul_scalar(%7, value=2.5) f32 [64, 300]\n"
            "into_data(%8)\n"
            "return %8\n");
}

// ---- the structure hash ----

struct Chain {
  DType dtype = DType::F32;
  Shape shape{4, 5};
  double scalar = 2.0;
  std::int64_t dim = 1;
  OpCode binary = OpCode::add;
  bool same_operand = false;  // binary(x, x) instead of binary(x, y)
  std::int64_t arange_end = 10;
};

std::uint64_t chain_hash(const Chain& chain) {
  ir::Recorder recorder;
  const Primitive x = tensor(chain.dtype, chain.shape);
  const Primitive y = tensor(chain.dtype, chain.shape);
  const Primitive a = tensor(chain.dtype, chain.shape);
  const Primitive b = tensor(chain.dtype, chain.shape);
  Shape reduced = chain.shape;
  reduced[static_cast<std::size_t>(chain.dim)] = 1;
  const Primitive c = tensor(chain.dtype, reduced);
  const Primitive r = tensor(DType::I64, {chain.arange_end});
  recorder.id_of(x);
  recorder.id_of(y);
  if (chain.binary == OpCode::add) {
    recorder.record<OpCode::add>(a, x, chain.same_operand ? x : y);
  } else {
    recorder.record<OpCode::sub>(a, x, chain.same_operand ? x : y);
  }
  recorder.record<OpCode::mul_scalar>(b, a, chain.scalar);
  recorder.record<OpCode::sum_dim>(c, b, chain.dim);
  recorder.record<OpCode::arange>(r, 0, chain.arange_end, 1, DType::I64, Device::cpu());
  recorder.mark_output(c);
  return ir::structure_hash(recorder.program());
}

TEST(OpIr, StructureHashIgnoresValuesAndSizes) {
  const std::uint64_t base = chain_hash({});
  EXPECT_EQ(chain_hash({.scalar = -7.25}), base) << "a scalar's value is a parameter";
  EXPECT_EQ(chain_hash({.shape = {300, 64}}), base) << "sizes are parameters";
  EXPECT_EQ(chain_hash({.arange_end = 99}), base) << "arange's bounds are values";
}

TEST(OpIr, StructureHashFollowsOpsDtypesDimsAndWiring) {
  const std::uint64_t base = chain_hash({});
  EXPECT_NE(chain_hash({.binary = OpCode::sub}), base);
  EXPECT_NE(chain_hash({.dtype = DType::F64}), base);
  EXPECT_NE(chain_hash({.dim = 0}), base);
  EXPECT_NE(chain_hash({.same_operand = true}), base);
  EXPECT_NE(chain_hash({.shape = {4, 5, 6}}), base) << "the rank is structure";
}

TEST(OpIr, StructureHashSeesScalarKindsButNotValues) {
  auto hash_of = [](Scalar value) {
    ir::Recorder recorder;
    recorder.record<OpCode::add_scalar>(tensor(), tensor(), value);
    return ir::structure_hash(recorder.program());
  };
  EXPECT_EQ(hash_of(1.0), hash_of(-3.5));
  EXPECT_NE(hash_of(1.0), hash_of(std::int64_t{1}));
}

// A QFloat value's type names its scheme and axes: they travel, print and hash; a float type's
// encoding and hash are what they were (nothing is added for it).
TEST(OpIr, QuantizedTypesCarryTheirSchemeAndAxes) {
  auto program_of = [](const ir::TensorType& weight) {
    ir::Recorder recorder;
    recorder.record<OpCode::dequantize>(tensor(DType::F32, weight.shape),
                                        tensor(DType::QFloat, weight.shape), DType::F32);
    ir::Program program = recorder.program();
    program.inputs[0].type = weight;
    return program;
  };
  const QuantScheme q4{QuantScheme::Kind::Q4_K, 256};
  const ir::TensorType stored{DType::QFloat, {2, 256}, q4};
  const ir::TensorType transposed{DType::QFloat, {256, 2}, q4, {1, 0}};
  for (const ir::TensorType& type : {stored, transposed}) {
    const ir::Program program = program_of(type);
    const ir::Program back = ir::deserialize(ir::serialize(program));
    EXPECT_EQ(back, program);
    EXPECT_EQ(back.inputs[0].type, type);
    EXPECT_EQ(ir::structure_hash(back), ir::structure_hash(program));
  }
  EXPECT_NE(ir::to_string(program_of(transposed))
                .find("qfloat [256, 2] {kind=Q4_K, "
                      "block_size=256} axes [1, 0]"),
            std::string::npos)
      << ir::to_string(program_of(transposed));
  const std::uint64_t hash = ir::structure_hash(program_of(stored));
  EXPECT_NE(ir::structure_hash(program_of({DType::QFloat, {2, 256}})), hash);
  EXPECT_NE(ir::structure_hash(program_of({DType::QFloat, {2, 256}, q4, {0, 1}})), hash);
  // A float type is a dtype and a shape on the wire: u8, u32 rank, rank x i64.
  ir::wire::Writer out;
  out.type({DType::F32, {2, 3}});
  EXPECT_EQ(out.size(), 1u + 4 + 2 * 8);
}

// ---- validation ----

ir::Program one_add() {
  ir::Recorder recorder;
  recorder.record<OpCode::add>(tensor(), tensor(), tensor());
  return recorder.program();
}

void expect_invalid(const ir::Program& program, const std::string& words) {
  try {
    ir::validate(program);
    ADD_FAILURE() << "validate accepted:\n" << ir::to_string(program);
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
  }
  try {
    (void)ir::deserialize(ir::serialize(program));
    ADD_FAILURE() << "deserialize accepted:\n" << ir::to_string(program);
  } catch (const ProtocolError& error) {
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
  }
}

TEST(OpIr, ValidateAndDeserializeRefuseMalformedOps) {
  ir::Program program = one_add();
  program.ops[0].inputs.pop_back();
  expect_invalid(program, "1 tensor inputs where ops.def has 2");

  program = one_add();
  program.ops[0].inputs[1] = {7};
  expect_invalid(program, "reads %7");

  program = one_add();
  program.ops[0].inputs[1] = program.ops[0].outputs[0];
  expect_invalid(program, "reads %2");

  program = one_add();
  program.ops[0].inputs[0] = ir::kNoTensor;
  expect_invalid(program, "tensor lhs is missing");

  program = one_add();
  program.ops[0].attributes.emplace_back(std::int64_t{3});
  expect_invalid(program, "1 attributes where ops.def has 0");

  program = one_add();
  program.ops[0].outputs[0] = {0};
  expect_invalid(program, "defines %0 again");

  program = one_add();
  program.ops[0].code = static_cast<OpCode>(all_ops().size() + 3);
  expect_invalid(program, "unknown op code");

  program = one_add();
  program.outputs.push_back({9});
  expect_invalid(program, "returns %9");

  ir::Recorder recorder;
  recorder.record<OpCode::sum_dim>(tensor(), tensor(), 1);
  program = recorder.program();
  program.ops[0].attributes[0] = true;
  expect_invalid(program, "attribute dim is a bool where ops.def has a int");

  program = one_add();
  program.ops[0].output_types[0].shape = Shape{2, -3};
  expect_invalid(program, "negative dim");
}

TEST(OpIr, DeserializeNamesTheHeaderProblem) {
  std::vector<std::byte> bytes = ir::serialize(one_add());
  auto expect_refused = [](std::vector<std::byte> buffer, const std::string& words) {
    try {
      (void)ir::deserialize(buffer);
      ADD_FAILURE() << "accepted";
    } catch (const ProtocolError& error) {
      EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
    }
  };
  std::vector<std::byte> bad = bytes;
  bad[0] ^= std::byte{1};
  expect_refused(bad, "not a kiln IR program");
  bad = bytes;
  bad[4] = std::byte{9};
  expect_refused(bad, "format version 9");
  bad = bytes;
  bad[8] ^= std::byte{0x80};
  expect_refused(bad, "op contract");
  bad = bytes;
  bad.push_back(std::byte{0});
  expect_refused(bad, "1 bytes after the program");
  bad = bytes;
  bad.resize(bytes.size() - 3);
  expect_refused(bad, "truncated");
  expect_refused({}, "truncated");
}

}  // namespace kiln::ir_test
