// GGUF files written by an independent writer, the `gguf` Python package of llama.cpp
// (gguf_interop.py): kiln reads its metadata and tensors, dequantizes every kind exactly as the
// package does, bit for bit, and quantizes the package's inputs to the package's bytes. Skipped
// where no Python with the package is found (KILN_GGUF_PYTHON, or the one found at configure).
#include <gtest/gtest.h>
#include <kiln/quant.h>
#include <kiln/record/gguf.h>

#include <bit>
#include <cstdlib>

#include "record/record_test_util.h"

namespace kiln::record {
namespace {

std::string python() {
  const char* from_env = std::getenv("KILN_GGUF_PYTHON");
  return from_env && *from_env ? from_env : KILN_GGUF_PYTHON;
}

std::vector<float> read_floats(const std::filesystem::path& path) {
  const std::vector<std::byte> bytes = testing::read_bytes(path);
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

class GgufInterop : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string probe = "'" + python() + "' -c 'import gguf, numpy' >/dev/null 2>&1";
    if (python().empty() || std::system(probe.c_str()) != 0) {
      GTEST_SKIP() << "no Python with the gguf package (" << python() << ")";
    }
    const std::string command = "'" + python() +
                                "' '" KILN_TEST_SOURCE_DIR "/record/gguf_interop.py' '" +
                                (dir_ / "").string() + "'";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    file_ = load_gguf(dir_ / "interop.gguf");
  }
  testing::ScratchDir dir_;
  GgufFile file_;
};

TEST_F(GgufInterop, DequantizesEveryKindAsThePackageDoes) {
  using Kind = QuantScheme::Kind;
  for (Kind kind : {Kind::Q4_0, Kind::Q4_1, Kind::Q5_0, Kind::Q5_1, Kind::Q8_0, Kind::Q2_K,
                    Kind::Q3_K, Kind::Q4_K, Kind::Q5_K, Kind::Q6_K}) {
    const std::string name(quant_kind_name(kind));
    const TensorData& q = file_.tensors.at(name);
    ASSERT_EQ(q.dtype(), DType::QFloat) << name;
    EXPECT_EQ(q.scheme(), quant_scheme(kind));
    const std::vector<float> theirs = read_floats(dir_ / (name + ".f32"));
    const std::vector<float> ours = q.dequantize().to_vec<float>();
    ASSERT_EQ(ours.size(), theirs.size()) << name;
    for (std::size_t i = 0; i < ours.size(); ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(ours[i]), std::bit_cast<std::uint32_t>(theirs[i]))
          << name << " value " << i << ": " << ours[i] << " vs " << theirs[i];
    }
  }
  EXPECT_EQ(file_.tensors.at("Q4_K").shape(), (Shape{2, 512}));
}

TEST_F(GgufInterop, QuantizesToThePackagesBytes) {
  using Kind = QuantScheme::Kind;
  for (Kind kind : {Kind::Q4_0, Kind::Q4_1, Kind::Q5_0, Kind::Q5_1, Kind::Q8_0}) {
    const std::string name(quant_kind_name(kind));
    const TensorData& theirs = file_.tensors.at(name);
    const TensorData ours = TensorData::from_vec(read_floats(dir_ / (name + ".src")), Shape{3, 96})
                                .quantize(quant_scheme(kind));
    EXPECT_EQ(theirs.shape(), ours.shape());
    EXPECT_TRUE(std::ranges::equal(ours.bytes(), theirs.bytes())) << name;
  }
}

TEST_F(GgufInterop, ReadsMetadataAndPlainTensors) {
  const GgufMetadata& m = file_.metadata;
  EXPECT_EQ(m.at("general.architecture").get<std::string>(), "interop");
  EXPECT_EQ(m.at("m.u8").get<std::uint8_t>(), 250);
  EXPECT_EQ(m.at("m.i8").get<std::int8_t>(), -128);
  EXPECT_EQ(m.at("m.u16").get<std::uint16_t>(), 65535);
  EXPECT_EQ(m.at("m.i16").get<std::int16_t>(), -32768);
  EXPECT_EQ(m.at("m.u32").get<std::uint32_t>(), 4294967295u);
  EXPECT_EQ(m.at("m.i32").get<std::int32_t>(), std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(m.at("m.f32").get<float>(), 0.1f);
  EXPECT_FALSE(m.at("m.bool").get<bool>());
  EXPECT_EQ(m.at("m.str").get<std::string>(), "h\xc3\xa9llo");
  EXPECT_EQ(m.at("m.u64").get<std::uint64_t>(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(m.at("m.i64").get<std::int64_t>(), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(m.at("m.f64").get<double>(), 0.1);
  const GgufArray& ints = m.at("m.ints").get<GgufArray>();
  ASSERT_EQ(ints.values.size(), 3u);
  EXPECT_EQ(ints.values[1].type(), ints.element_type);
  const GgufArray& strs = m.at("m.strs").get<GgufArray>();
  EXPECT_EQ(strs.element_type, GgufType::String);
  EXPECT_EQ(strs.values.at(2).get<std::string>(), "");
  const GgufArray& nested = m.at("m.nested").get<GgufArray>();
  EXPECT_EQ(nested.element_type, GgufType::Array);
  EXPECT_EQ(nested.values.at(1).get<GgufArray>().values.at(0).get<std::string>(), "a");

  const TensorData& f = file_.tensors.at("plain.f32");
  EXPECT_EQ(f.shape(), (Shape{2, 3, 4}));
  std::vector<float> iota(24);
  for (int i = 0; i < 24; ++i) iota[i] = static_cast<float>(i);
  EXPECT_EQ(f.to_vec<float>(), iota);
  EXPECT_EQ(file_.tensors.at("plain.f16").dtype(), DType::F16);
  EXPECT_EQ(file_.tensors.at("plain.f16").shape(), (Shape{3, 2}));
  EXPECT_EQ(file_.tensors.at("plain.i32").to_vec<std::int32_t>(),
            (std::vector<std::int32_t>{-5, 6}));
  // Written back by kiln, the file reads the same.
  const GgufFile again = parse_gguf(serialize_gguf(file_));
  EXPECT_EQ(again.metadata, file_.metadata);
  EXPECT_EQ(again.tensors.size(), file_.tensors.size());
}

}  // namespace
}  // namespace kiln::record
