// One BERT forward at a time on the default device, for a profiler (bench/probe/bert_kernels.sh):
//   bert_probe CONFIG(minilm|base) BATCH FORWARDS
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace kiln;

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const bool base = std::string(argv[1]) == "base";
  const std::int64_t batch = std::atoll(argv[2]), tokens = 128;
  const int forwards = std::atoi(argv[3]);
  const Device dev = Device::default_device();
  nn::BertConfig config;
  if (!base) config = {.hidden_size = 384, .num_hidden_layers = 6, .intermediate_size = 1536};
  dev.seed(1);
  const nn::BertModel bert = config.init(dev);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch * tokens)), mask(ids.size(), 1);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = 1000 + static_cast<std::int64_t>(i % 20000);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = tokens - 12 * (b % 8); t < tokens; ++t) mask[b * tokens + t] = 0;
  }
  const Shape shape{batch, tokens};
  const auto input = Tensor<2, Int>::from_data(TensorData::from_vec(ids, shape), dev);
  const auto attend = Tensor<2, Int>::from_data(TensorData::from_vec(mask, shape), dev);
  for (int i = 0; i < forwards; ++i) {
    const Tensor<3> h = bert.forward(input, {.attention_mask = attend});
    std::printf("forward %d: %g\n", i,
                h.slice({{0, 1}, {0, 1}, {0, 1}}).into_data().to_f64_vec()[0]);
  }
}
