// Counters in records: BatchNorm's num_batches_tracked saved as PyTorch saves it (int64, shape
// []), read from a file laid out byte by byte as PyTorch's state_dict would be, restarted at 0
// when a file predates it, and refused with a named error when it is not a count.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/nn/norm.h>
#include <kiln/nn/record.h>

#include <cstring>
#include <string>

#include "record/record_test_util.h"
#include "support/devices.h"

namespace kiln::nn {
namespace {

using record::testing::ScratchDir;

using kiln::test::kCpu;

BatchNorm trained_batch_norm(int batches) {
  const BatchNorm bn = BatchNormConfig{.num_features = 2}.init(kCpu);
  const auto x = Tensor<2>::from_data(
      TensorData::from_vec(std::vector<float>{1, -2, 3, 0.5f, -1, 4}, {3, 2}), kCpu.autodiff());
  for (int i = 0; i < batches; ++i) bn.forward(x);
  return bn;
}

std::vector<float> floats(const std::optional<Buffer<1>>& b) {
  return b->val().into_data().to_vec<float>();
}

TEST(CounterRecord, NumBatchesTrackedIsSavedAsAnInt64Scalar) {
  ScratchDir dir;
  save(trained_batch_norm(3), dir / "bn.safetensors");
  const std::vector<std::byte> bytes = record::testing::read_bytes(dir / "bn.safetensors");
  // The header as written, read without kiln's parser.
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | std::to_integer<std::uint64_t>(bytes[i]);
  std::string header(length, ' ');
  std::memcpy(header.data(), bytes.data() + 8, length);
  EXPECT_NE(header.find(R"("num_batches_tracked":{"dtype":"I64","shape":[],"data_offsets":[)"),
            std::string::npos)
      << header;

  const record::TensorMap file = record::load_safetensors(dir / "bn.safetensors");
  const TensorData& count = file.at("num_batches_tracked");
  EXPECT_EQ(count.dtype(), DType::I64);
  EXPECT_EQ(count.shape().rank(), 0u);
  EXPECT_EQ(count.to_vec<std::int64_t>(), std::vector<std::int64_t>{3});
  EXPECT_EQ(file.size(), 5u);
}

// weight, bias, running_mean, running_var (F32 [2]) and num_batches_tracked (I64 []) as
// torch.save(bn.state_dict()) holds them, written out by hand.
std::vector<std::byte> pytorch_layout_file(std::string_view count_entry,
                                           const std::vector<std::uint8_t>& count_bytes) {
  const std::string json =
      std::string(R"({"bias":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)") +
      std::string(count_entry) +
      R"("running_mean":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},)"
      R"("running_var":{"dtype":"F32","shape":[2],"data_offsets":[24,32]},)"
      R"("weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  // 0.5, 2.0 | 0.25, -1.0 | 1.5, -0.5 | 3.0, 4.0 as little-endian binary32.
  std::vector<std::uint8_t> data = {0,    0,    0, 0x3f, 0,    0,    0, 0x40, 0,    0,   0x80,
                                    0x3e, 0,    0, 0x80, 0xbf, 0,    0, 0xc0, 0x3f, 0,   0,
                                    0,    0xbf, 0, 0,    0x40, 0x40, 0, 0,    0x80, 0x40};
  data.insert(data.end(), count_bytes.begin(), count_bytes.end());
  return record::testing::make_file(json, data);
}

TEST(CounterRecord, LoadsPyTorchsLayoutStrictly) {
  ScratchDir dir;
  record::testing::write_bytes(
      dir / "torch.safetensors",
      pytorch_layout_file(
          R"("num_batches_tracked":{"dtype":"I64","shape":[],"data_offsets":[32,40]},)",
          {0x39, 0x30, 0, 0, 0, 0, 0, 0}));  // 12345
  BatchNorm bn = BatchNormConfig{.num_features = 2}.init(kCpu);
  load(bn, dir / "torch.safetensors");  // no allow_unexpected needed
  EXPECT_EQ(bn.num_batches_tracked->value(), 12345);
  EXPECT_EQ(bn.weight->val().into_data().to_vec<float>(), (std::vector<float>{0.5f, 2.0f}));
  EXPECT_EQ(floats(bn.running_var), (std::vector<float>{3.0f, 4.0f}));

  // Any integer dtype of shape [] is a count.
  record::testing::write_bytes(
      dir / "i32.safetensors",
      pytorch_layout_file(
          R"("num_batches_tracked":{"dtype":"I32","shape":[],"data_offsets":[32,36]},)",
          {7, 0, 0, 0}));
  load(bn, dir / "i32.safetensors");
  EXPECT_EQ(bn.num_batches_tracked->value(), 7);
}

TEST(CounterRecord, AFileWithoutTheCounterLoadsWithCountZero) {
  const BatchNorm saved = trained_batch_norm(2);
  record::TensorMap old_file = to_record(saved);
  old_file.erase("num_batches_tracked");  // what kiln wrote before counters existed
  BatchNorm bn = trained_batch_norm(5);
  load_record(bn, old_file);
  EXPECT_EQ(bn.num_batches_tracked->value(), 0);
  EXPECT_EQ(floats(bn.running_mean), floats(saved.running_mean));
}

TEST(CounterRecord, BadCountsAreRefusedAndLeaveTheModuleUntouched) {
  const BatchNorm bn = trained_batch_norm(4);
  const record::TensorMap good = to_record(trained_batch_norm(1));
  auto expect_refused = [&](TensorData count, auto error, std::string_view needle) {
    record::TensorMap file = good;
    file.insert_or_assign("num_batches_tracked", std::move(count));
    BatchNorm target = bn;
    try {
      load_record(target, file);
      ADD_FAILURE() << "loaded " << needle;
    } catch (const decltype(error)& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("num_batches_tracked"), std::string::npos) << message;
      EXPECT_NE(message.find(needle), std::string::npos) << message;
    }
    EXPECT_EQ(target.num_batches_tracked->value(), 4);
    EXPECT_EQ(floats(target.running_mean), floats(bn.running_mean));
  };
  expect_refused(TensorData::from_vec(std::vector<std::int64_t>{3}, Shape{1}), ShapeMismatch{""},
                 "[1]");
  expect_refused(TensorData::from_vec(std::vector<float>{3}, Shape{}), DTypeMismatch{""}, "f32");
  expect_refused(TensorData::from_vec(std::vector<std::int64_t>{-2}, Shape{}), InvalidArgument{""},
                 "-2");
  expect_refused(TensorData::from_vec(std::vector<std::uint64_t>{1ULL << 63}, Shape{}),
                 InvalidArgument{""}, "2^63");
}

TEST(CounterRecord, ACounterTheModuleLacksIsUnexpected) {
  record::TensorMap file = to_record(trained_batch_norm(1));
  file.erase("running_mean");
  file.erase("running_var");
  BatchNorm untracked = BatchNormConfig{.num_features = 2, .track_running_stats = false}.init(kCpu);
  try {
    load_record(untracked, file);
    ADD_FAILURE() << "a counter the module lacks was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'num_batches_tracked'"), std::string::npos) << e.what();
  }
  load_record(untracked, file, {.allow_unexpected = true});
  EXPECT_EQ(untracked.weight->val().into_data().to_vec<float>(),
            trained_batch_norm(1).weight->val().into_data().to_vec<float>());
}

}  // namespace
}  // namespace kiln::nn
