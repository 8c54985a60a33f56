// A program outside the kiln tree, built against the installed package: kiln::kiln brings the
// tensor library, nn and text (kiln_nn), data and train (kiln_train) and process groups
// (kiln_dist), each used here.
#include <kiln/kiln.h>

#include <cstdio>

int main() {
  using namespace kiln;
  auto a = Tensor<2>::ones({2, 2}, Device::cpu());
  const std::vector<float> v = (a + a).into_data().to_vec<float>();
  if (v != std::vector<float>{2, 2, 2, 2}) return 1;
  const nn::Linear layer = nn::LinearConfig{2, 3}.init(Device::cpu());
  if (layer.forward(a).shape() != Shape{2, 3}) return 2;
  const text::WordPieceTokenizer tokenizer({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "caf\xC3\xA9"});
  if (tokenizer.encode("Caf\xC3\xA9").ids != std::vector<std::int64_t>{2, 1, 3})
    return 4;  // cafe: no entry
  try {
    data::load_digits("no/such/digits.csv");
    return 3;
  } catch (const Error&) {
  }
  const ProcessGroup alone = ProcessGroup::single(Device::cpu());
  if (distributed::all_reduce(a, alone, ReduceOperation::Max).into_data().to_vec<float>() !=
      std::vector<float>{1, 1, 1, 1})
    return 5;
  std::puts("consumer ok");
  return 0;
}
