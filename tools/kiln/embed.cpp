// `kiln embed MODEL_DIR TEXT...`: sentence embeddings, one JSON array per text and line.
#include <kiln/detail/format.h>
#include <kiln/kiln.h>

#include <charconv>
#include <iostream>
#include <string>

#include "tools/kiln/commands.h"

namespace kiln::tools {
namespace {

// The shortest text that reads back as the same number (std::to_chars), in the model's dtype.
template <class T>
void write_array(std::ostream& out, const T* values, std::int64_t count) {
  char buffer[64];
  out << '[';
  for (std::int64_t i = 0; i < count; ++i) {
    const auto end = std::to_chars(buffer, buffer + sizeof(buffer), values[i]).ptr;
    if (i > 0) out << ',';
    out.write(buffer, end - buffer);
  }
  out << "]\n";
}

void write_rows(std::ostream& out, const Tensor<2>& embeddings) {
  const auto [rows, size] = embeddings.dims();
  const TensorData data = embeddings.into_data();
  if (data.dtype() == DType::F64) {
    const std::vector<double> v = data.to_vec<double>();
    for (std::int64_t r = 0; r < rows; ++r) write_array(out, v.data() + r * size, size);
  } else {
    const std::vector<float> v = data.convert(DType::F32).to_vec<float>();
    for (std::int64_t r = 0; r < rows; ++r) write_array(out, v.data() + r * size, size);
  }
}

}  // namespace

int run_embed(const EmbedOptions& options, std::istream& in, std::ostream& out) {
  if (options.batch == 0)
    kiln::detail::fail<InvalidArgument>("kiln embed", "--batch must be at least 1");
  std::vector<std::string> texts;
  for (const std::string& text : options.texts) {
    if (text != "-") {
      texts.push_back(text);
      continue;
    }
    for (std::string line; std::getline(in, line);) texts.push_back(line);
  }
  const text::SentenceEncoder encoder =
      text::SentenceEncoder::from_directory(options.model, Device::default_device());
  for (std::size_t start = 0; start < texts.size(); start += options.batch) {
    const std::size_t end = std::min(texts.size(), start + options.batch);
    write_rows(
        out, encoder.encode(std::vector<std::string>(texts.begin() + start, texts.begin() + end)));
  }
  out.flush();
  return 0;
}

}  // namespace kiln::tools
