// What loading pretrained modules builds on: members saved under checkpoint names
// (KILN_NAMED), Int and Bool buffers kept in their dtype through cast / to_dtype, moves and
// modes, their checked assignment, and SkipInit, under which initialisers draw nothing.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>
#include <thread>
#include <vector>

#include "support/devices.h"
#include "support/embeddings_module.h"
#include "support/error_message.h"

namespace kiln::nn {
namespace {

using namespace kiln::test;  // kCpu, the Embeddings module, next_draws, error checks

// A plain member list, as every module before KILN_NAMED wrote it, next to named members of each
// sort (a vector of modules, an optional, a name with dots).
struct Plain {
  Linear a, b;
  KILN_MODULE(a, b)
};
static_assert(detail::Visitable<Plain>);

struct Mixed {
  Linear first;
  std::vector<Linear> blocks;
  std::optional<Linear> head;
  Linear out;
  KILN_MODULE(first, KILN_NAMED(blocks, "layer"), KILN_NAMED(head, "pooler"),
              KILN_NAMED(out, "attention.output.dense"))
};

std::vector<std::string> names_of(const auto& module) {
  std::vector<std::string> names;
  for (const NamedParam& p : named_parameters(module)) names.push_back(p.name);
  return names;
}

std::vector<std::int64_t> ints_of(const Primitive& p) {
  return kiln::detail::into_data(p).convert(DType::I64).to_vec<std::int64_t>();
}

TEST(ModuleNames, NamedMembersTakeTheirCheckpointNamesEverywhere) {
  const Embeddings m = EmbeddingsConfig{}.init(kCpu);
  EXPECT_EQ(names_of(m),
            (std::vector<std::string>{"dense.weight", "dense.bias", "LayerNorm.weight",
                                      "LayerNorm.bias", "position_ids", "mask", "running"}));
  const std::string text = describe(m, "Embeddings");
  EXPECT_NE(text.find("LayerNorm.weight: [4] f32 on cpu\n"), std::string::npos) << text;
  EXPECT_NE(text.find("position_ids: [1, 6] i64 on cpu (buffer)"), std::string::npos) << text;
  EXPECT_NE(text.find("mask: [4] bool on cpu (buffer)"), std::string::npos) << text;
  EXPECT_EQ(text.find("layer_norm"), std::string::npos) << text;
  // 3*4 + 4 + 4 + 4 trainable scalars; buffers of every kind are not counted.
  EXPECT_EQ(num_params(m), 24);

  EXPECT_EQ(names_of(Plain{LinearConfig{2, 2}.init(kCpu), LinearConfig{2, 1, false}.init(kCpu)}),
            (std::vector<std::string>{"a.weight", "a.bias", "b.weight"}));
  const LinearConfig no_bias{2, 2, false};
  const Mixed mixed{no_bias.init(kCpu),
                    {no_bias.init(kCpu), no_bias.init(kCpu)},
                    no_bias.init(kCpu),
                    no_bias.init(kCpu)};
  EXPECT_EQ(names_of(mixed),
            (std::vector<std::string>{"first.weight", "layer.0.weight", "layer.1.weight",
                                      "pooler.weight", "attention.output.dense.weight"}));
}

TEST(ModuleBuffers, IntAndBoolBuffersAreListedAsUntrainedInTheirDType) {
  const Embeddings m = EmbeddingsConfig{}.init(kCpu);
  for (const NamedParam& p : named_parameters(m)) {
    if (p.name == "position_ids" || p.name == "mask" || p.name == "running") {
      EXPECT_FALSE(p.trainable) << p.name;
    } else {
      EXPECT_TRUE(p.trainable) << p.name;
    }
  }
  EXPECT_EQ(m.position_ids.val().dtype(), DType::I64);
  EXPECT_EQ(m.position_ids.kind(), Kind::Int);
  EXPECT_EQ(m.mask.kind(), Kind::Bool);
  EXPECT_EQ(m.running.kind(), Kind::Float);
  EXPECT_EQ(m.dense.weight.kind(), Kind::Float);
  EXPECT_EQ(m.mask.val().into_data().to_vec<bool>(), (std::vector<bool>{false, false, true, true}));
}

TEST(ModuleBuffers, CastAndToDTypeLeaveIntAndBoolBuffersAlone) {
  const Embeddings m = EmbeddingsConfig{}.init(kCpu);
  const Embeddings wide = cast(m, DType::F64);
  const Embeddings same = to_dtype(m, DType::F64);
  for (const Embeddings* e : {&wide, &same}) {
    EXPECT_EQ(e->dense.weight.val().dtype(), DType::F64);
    EXPECT_EQ(e->running.val().dtype(), DType::F64);
    EXPECT_EQ(e->position_ids.val().dtype(), DType::I64);
    EXPECT_EQ(e->mask.val().dtype(), DType::Bool);
    EXPECT_EQ(ints_of(e->position_ids.primitive()), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(e->dense.weight.val().into_data().to_f64_vec(),
              m.dense.weight.val().into_data().to_f64_vec());
  }
  // to_dtype is cast: the same refusal of a dtype that is not float, naming it.
  expect_error<DTypeMismatch>([&] { (void)to_dtype(m, DType::I32); }, "nn::cast",
                              {"i32 is not a float dtype"});
}

TEST(ModuleBuffers, IntBuffersMoveWithTheModuleAndItsMode) {
  const Embeddings m = EmbeddingsConfig{}.init(kCpu);
  const Embeddings fused = to_device(m, kCpu.fused());
  EXPECT_EQ(fused.position_ids.val().device(), kCpu.fused());
  EXPECT_EQ(fused.position_ids.val().dtype(), DType::I64);
  EXPECT_EQ(ints_of(fused.position_ids.primitive()), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));

  const Embeddings training = train(m);
  EXPECT_TRUE(training.position_ids.val().device().is_autodiff());
  EXPECT_FALSE(kiln::detail::is_require_grad(training.position_ids.primitive()));
  EXPECT_TRUE(kiln::detail::is_require_grad(training.dense.weight.primitive()));
  const Embeddings validating = valid(training);
  EXPECT_EQ(validating.position_ids.val().device(), kCpu);
  EXPECT_EQ(validating.mask.val().dtype(), DType::Bool);
  EXPECT_EQ(ints_of(validating.position_ids.primitive()),
            (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(ModuleBuffers, AssignmentChecksTheKindAndTheIntDType) {
  Embeddings m = EmbeddingsConfig{}.init(kCpu);
  m.position_ids = Tensor<2, Int>::full({1, 6}, 7, kCpu);
  EXPECT_EQ(ints_of(m.position_ids.primitive()), std::vector<std::int64_t>(6, 7));

  // A float tensor into an Int buffer, and an int one into a Float buffer or a parameter.
  expect_error<DTypeMismatch>(
      [&] {
        m.position_ids.assign(Tensor<2>::zeros({1, 6}, kCpu).primitive(), "position_ids");
      },
      "Buffer::assign", {"a f32 tensor is not of the int kind"});
  expect_error<DTypeMismatch>(
      [&] { m.running.assign(Tensor<1, Int>::zeros({4}, kCpu).primitive(), "running"); },
      "Buffer::assign", {"a i64 tensor is not of the float kind"});
  expect_error<DTypeMismatch>(
      [&] {
        m.dense.weight.set_primitive(Tensor<2, Int>::zeros({4, 3}, kCpu).primitive());
      },
      "Param::set", {"a i64 tensor is not of the float kind"});
  expect_error<DTypeMismatch>(
      [&] { m.mask.set_primitive(Tensor<1, Int>::zeros({4}, kCpu).primitive()); }, "Buffer::set",
      {"a i64 tensor is not of the bool kind"});
  // Another int dtype: the buffer's dtype is kept, as a parameter's is.
  const std::string narrower = message_of<DTypeMismatch>([&] {
    m.position_ids.assign(Tensor<2, Int>::zeros({1, 6}, kCpu, DType::I32).primitive(),
                          "position_ids");
  });
  EXPECT_NE(narrower.find("buffer 'position_ids' is i64 but the new value is i32; cast the value"),
            std::string::npos)
      << narrower;
  EXPECT_EQ(narrower.find("nn::cast"), std::string::npos) << narrower;  // it would not help
  EXPECT_THROW((m.position_ids = Tensor<2, Int>::zeros({1, 5}, kCpu)), ShapeMismatch);
  EXPECT_EQ(ints_of(m.position_ids.primitive()), std::vector<std::int64_t>(6, 7));  // unchanged
}

TEST(SkipInit, InitialisersDrawNothingUnderIt) {
  kCpu.seed(21);
  const std::vector<float> after_seed = next_draws(kCpu);

  kCpu.seed(21);
  {
    const SkipInit skip;
    const Linear linear = LinearConfig{64, 32}.init(kCpu);
    const Embedding embedding =
        EmbeddingConfig{.num_embeddings = 50, .embedding_dim = 8}.init(kCpu);
    const TransformerEncoder encoder =
        TransformerEncoderConfig{.layer = {.d_model = 8, .nhead = 2, .dim_feedforward = 16},
                                 .num_layers = 2}
            .init(kCpu);
    const Conv2d conv =
        Conv2dConfig{.in_channels = 2, .out_channels = 3, .kernel_size = {3, 3}}.init(kCpu);
    const Lstm lstm = LstmConfig{.input_size = 4, .hidden_size = 5}.init(kCpu);
    const Tensor<2> constant = Initializer::constant(3.0).init<2>(Shape{2, 5}, kCpu);
    // The storage has each parameter's shape, dtype and device (its values are never read).
    EXPECT_EQ(linear.weight.val().shape(), (Shape{32, 64}));
    EXPECT_EQ(linear.bias->val().shape(), (Shape{32}));
    EXPECT_EQ(linear.weight.val().dtype(), DType::F32);
    EXPECT_EQ(linear.weight.val().device(), kCpu);
    EXPECT_EQ(embedding.weight.val().shape(), (Shape{50, 8}));
    EXPECT_EQ(constant.shape(), (Shape{2, 5}));
    EXPECT_EQ(names_of(encoder).size(), 2u * 12u);
    EXPECT_EQ(conv.weight.val().shape(), (Shape{3, 2, 3, 3}));
    EXPECT_EQ(names_of(lstm).size(), 4u);
  }
  EXPECT_EQ(next_draws(kCpu), after_seed);

  // The control: building the same Linear outside the scope does draw.
  kCpu.seed(21);
  (void)LinearConfig{64, 32}.init(kCpu);
  EXPECT_NE(next_draws(kCpu), after_seed);
}

TEST(SkipInit, NestsStaysOnItsThreadAndStillChecksArguments) {
  EXPECT_FALSE(SkipInit::active());
  {
    const SkipInit outer;
    EXPECT_TRUE(SkipInit::active());
    {
      const SkipInit inner;
      EXPECT_TRUE(SkipInit::active());
    }
    EXPECT_TRUE(SkipInit::active());
    bool other_thread = true;
    std::thread([&] { other_thread = SkipInit::active(); }).join();
    EXPECT_FALSE(other_thread);
    // Bad arguments are refused as without the scope.
    EXPECT_THROW(Initializer::uniform(1, -1).init<1>(Shape{3}, kCpu), InvalidArgument);
    EXPECT_THROW(Initializer::kaiming_uniform().init<2>(Shape{3, 0}, kCpu), InvalidArgument);
    EXPECT_THROW(LinearConfig({0, 3}).init(kCpu), InvalidArgument);
  }
  EXPECT_FALSE(SkipInit::active());
}

}  // namespace
}  // namespace kiln::nn
