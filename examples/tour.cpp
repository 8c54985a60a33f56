// The README's tour, compiled and run as an example so the README stays true.
#include <kiln/kiln.h>

#include <iostream>

int main() {
  using namespace kiln;

  Device dev = Device::cpu();
  auto a = Tensor<2>::ones({64, 64}, dev);  // Float kind, the device's default dtype (f32)
  auto b = Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2}), dev);
  auto c = a.matmul(a) + 1.0;  // + - * / with tensors and scalars, broadcasting
  std::vector<float> v = c.into_data().to_vec<float>();  // to_vec<T> checks T against the dtype
  auto i = Tensor<1, Int>::arange(0, 10, dev);           // i64 by default
  Tensor<2, Bool> m = a.greater_elem(0.5);
  std::vector<bool> flags = m.into_data().to_vec<bool>();

  a.reshape(Shape{4096});
  a.transpose();
  a.swap_dims(0, 1);
  a.slice({{0, 2}, {0, 2}});  // views, no copy
  a.exp();
  a.log();
  a.tanh();
  a.powf_scalar(2.0);
  a.clamp(0, 1);
  -a;
  a.cast(DType::BF16);
  a.int_();
  a.dtype();
  a.shape();
  a.device();
  a.sum();
  a.sum_dim(1);
  a.mean_dim(0);
  a.max_dim(1);
  a.argmax(1);  // *_dim keep the dim (size 1)
  Tensor<2>::cat({a, a}, 0);
  a.sort(1);
  a.argsort(1);
  a.topk(5, 1);
  a.mask_fill(m, 0.0);
  a.gather(1, a.argmax(1));
  a.cumsum(0);
  a.var(1);
  a.norm();
  auto x = Tensor<2>::random({8, 8}, Distribution::normal(0, 1), dev);
  std::cout << x << "\n";

  auto probabilities = activation::softmax(x, 1);  // relu, gelu, silu, sigmoid, log_softmax, ...
  auto image = Tensor<4>::random({1, 3, 32, 32}, Distribution::standard(), dev);
  auto filters = Tensor<4>::random({8, 3, 3, 3}, Distribution::normal(0, 0.1), dev);
  auto features = module::conv2d(image, filters, std::nullopt, {.padding = {1, 1}});
  auto pooled =
      module::max_pool2d(features, {.kernel_size = {2, 2}});  // also avg/adaptive pooling,
                                                              // interpolate, embedding, attention

  Device ad = dev.autodiff();  // backend_name(): "autodiff<cpu>"
  auto w = Tensor<2>::random({8, 8}, Distribution::normal(0, 1), ad).require_grad();
  auto input = Tensor<2>::ones({4, 8}, dev);  // a plain tensor mixes in as a constant
  auto loss = input.matmul(w).tanh().powf_scalar(2.0).mean();
  Gradients grads = loss.backward();                     // frees the graph (retain_graph keeps it)
  Tensor<2> dw = *w.grad(grads);                         // std::optional: nullopt if w got none
  auto w_next = (w - dw * 0.1).detach().require_grad();  // an SGD step

  auto s = Tensor<1>::full({1}, 0.5, ad).require_grad();  // higher order: create_graph records
  auto ds = *s.grad((s * s * s).backward({.create_graph = true}));  // backward itself: ds = 3s²
  auto d2s = *s.grad(ds.backward());                                // 6s = 3
  std::cout << "d/ds s^3 = " << ds.into_scalar<double>()
            << ", d2/ds2 = " << d2s.into_scalar<double>() << "\n";
  CheckpointScope scope(CheckpointStrategy::Balanced);  // recompute elementwise outputs in
                                                        // backward instead of storing them
  (void)w_next;
  return 0;
}
