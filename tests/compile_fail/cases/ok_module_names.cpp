// Control: plain member lists compile as they always did, next to KILN_NAMED members, Buffer<D>
// (a Float buffer), Int and Bool buffers, to_dtype and from_record.
#include <kiln/kiln.h>
using namespace kiln;
struct Plain {
  nn::Linear hidden, out;
  nn::Buffer<1> running;
  KILN_MODULE(hidden, out, running)
};
struct Named {
  nn::Linear dense;
  nn::LayerNorm layer_norm;
  nn::Buffer<2, Int> position_ids;
  nn::Buffer<1, Bool> mask;
  KILN_MODULE(dense, KILN_NAMED(layer_norm, "LayerNorm"), position_ids, mask)
};
static_assert(nn::detail::Visitable<Plain> && nn::detail::Visitable<Named>);
static_assert(nn::ModuleConfig<nn::LinearConfig>);
void f(Device dev, Plain& plain, Named& named, const record::TensorMap& tensors) {
  plain.running = Tensor<1>::zeros({3}, dev);
  named.position_ids = Tensor<2, Int>::zeros({1, 3}, dev);
  Tensor<2, Int> ids = named.position_ids;
  plain = nn::to_dtype(plain, DType::F16);
  named = nn::cast(named, DType::F16);
  nn::Linear dense = nn::from_record(nn::LinearConfig{4, 4}, tensors, dev);
  nn::Linear from_file = nn::from_record(nn::LinearConfig{4, 4}, "dense.safetensors", dev);
  (void)ids; (void)dense; (void)from_file;
}
