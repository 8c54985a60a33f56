// The README's training example, compiled so the README stays true: an MLP on the digits.
#include <kiln/data/digits.h>
#include <kiln/data/views.h>
#include <kiln/kiln.h>
#include <kiln/nn/nn.h>
#include <kiln/nn/record.h>
#include <kiln/optim/optim.h>
#include <kiln/train/learner.h>

#include <filesystem>

using namespace kiln;

struct Net {  // a module: a plain struct
  nn::Linear hidden, out;
  nn::Dropout dropout{.p = 0.1};
  KILN_MODULE(hidden, out)  // names: hidden.weight, out.bias, ...
  Tensor<2> forward(const Tensor<2>& x) const {
    return out.forward(dropout.forward(activation::relu(hidden.forward(x))));
  }
};

int main(int argc, char** argv) {
  const std::filesystem::path digits = argc > 1 ? argv[1] : "data/digits/digits.csv";
  Device dev = Device::cpu();
  Net model{nn::LinearConfig{64, 128}.init(dev), nn::LinearConfig{128, 10}.init(dev)};
  auto [train_set, test_set] = data::random_split(data::load_digits(digits), 0.8, 1);
  data::ClassificationLoader loader(train_set, data::ClassificationBatcher(dev),
                                    {.batch_size = 32, .shuffle = true, .num_workers = 1});
  data::ClassificationLoader test_loader(test_set, data::ClassificationBatcher(dev),
                                         {.batch_size = 256});
  auto step = [](const Net& m, const data::ClassificationBatch& b) {
    auto logits = m.forward(b.features);
    return train::classification_step(nn::cross_entropy(logits, b.labels), logits, b.labels);
  };
  optim::AdamW adamw;
  Net trained = train::fit(model, adamw, optim::ConstantLr{1e-3}, loader, &test_loader, step,
                           {.epochs = 10, .directory = "runs/net"});
  nn::save(trained, "runs/net/net.safetensors");  // PyTorch-compatible names and layouts
  return 0;
}
