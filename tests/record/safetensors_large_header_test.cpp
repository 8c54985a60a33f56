// Headers with very many entries: the parse must stay linear. Through nlohmann's callback parser
// it was quadratic (100,000 tensors took 112 s on the development machine); these sizes take a
// fraction of a second when linear and minutes when not.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/record/safetensors.h>

#include <string>

#include "record/record_test_util.h"

namespace kiln::record {
namespace {

using testing::make_file;

constexpr int kTensors = 100'000;

// "t" and the number (one helper, since GCC 12 warns falsely on "t" + std::to_string(i)).
std::string tensor_name(int i) { return std::string("t").append(std::to_string(i)); }

// kTensors one-byte U8 tensors "t0".."t<n-1>", tensor i holding i % 251; the last entry is
// renamed to `last_name` when given.
std::vector<std::byte> many_tensors(const std::string& last_name = "") {
  std::string json = "{";
  std::vector<std::uint8_t> data;
  for (int i = 0; i < kTensors; ++i) {
    const std::string name = (i == kTensors - 1 && !last_name.empty()) ? last_name : tensor_name(i);
    json += (i ? ",\"" : "\"") + name + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
            std::to_string(i) + "," + std::to_string(i + 1) + "]}";
    data.push_back(static_cast<std::uint8_t>(i % 251));
  }
  json += "}";
  return make_file(json, data);
}

TEST(SafetensorsLargeHeader, HundredThousandTensorsParse) {
  const SafetensorsFile file = parse_safetensors(many_tensors());
  ASSERT_EQ(file.tensors.size(), static_cast<std::size_t>(kTensors));
  for (int i : {0, 1, 250, 251, 77'777, kTensors - 1}) {
    const TensorData& t = file.tensors.at(tensor_name(i));
    EXPECT_EQ(t.shape(), Shape{1});
    EXPECT_EQ(t.to_vec<std::uint8_t>()[0], i % 251) << i;
  }
}

TEST(SafetensorsLargeHeader, ADuplicateAfterHundredThousandNamesIsFound) {
  try {
    (void)parse_safetensors(many_tensors("t5"));
    ADD_FAILURE() << "a duplicate tensor name was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor name 't5' appears twice"), std::string::npos)
        << e.what();
  }
}

TEST(SafetensorsLargeHeader, HundredThousandMetadataEntries) {
  std::string json = "{\"__metadata__\":{";
  for (int i = 0; i < kTensors; ++i) {
    const std::string number = std::to_string(i);
    json.append(i ? ",\"k" : "\"k").append(number).append("\":\"v").append(number).append("\"");
  }
  json += "}}";
  const SafetensorsFile file = parse_safetensors(make_file(json, {}));
  ASSERT_EQ(file.metadata.size(), static_cast<std::size_t>(kTensors));
  EXPECT_EQ(file.metadata.at("k99999"), "v99999");
}

}  // namespace
}  // namespace kiln::record
