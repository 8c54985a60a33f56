// Parameters and optimizer state across devices: a value on another device is refused by
// `param = tensor`, nn::to_device is the explicit way to move a module, and optimizer state made
// on one device is refused on another until load_state_dict carries it over.
#include <kiln/nn/linear.h>
#include <kiln/optim/optim.h>

#include "gpu/gpu_test_support.h"

using namespace kiln;

namespace {

struct Head {
  nn::Linear fc;
  KILN_MODULE(fc)
};

Gradients head_backward(const Head& head) {
  const Device d = head.fc.weight.val().device().without_autodiff();
  return head.fc.forward(Tensor<2>::ones({2, 3}, d)).square().sum().backward();
}

std::vector<double> weight_of(const Head& head) {
  return head.fc.weight.val().to_device(Device::cpu()).into_data().to_f64_vec();
}

}  // namespace

TEST(GpuParams, AssigningAValueOnAnotherDeviceIsRefused) {
  KILN_REQUIRE_GPU();
  nn::Linear layer = nn::LinearConfig{3, 2}.init(Device::cpu());
  try {
    layer.weight = Tensor<2>::ones({2, 3}, device);
    ADD_FAILURE() << "a GPU value was accepted by a CPU parameter";
  } catch (const DeviceMismatch& e) {
    const std::string message = e.what();
    EXPECT_EQ(
        message.rfind("[Param::assign] the parameter is on cpu but the new value is on cuda:0", 0),
        0u)
        << message;
  }
  nn::Linear moved = nn::to_device(layer, device);
  moved.weight = Tensor<2>::ones({2, 3}, device);
  EXPECT_EQ(moved.weight.val().device(), device);
  EXPECT_THROW(moved.weight = Tensor<2>::ones({2, 3}, Device::cpu()), DeviceMismatch);
  // In training mode a plain GPU value lands on the autodiff GPU device, tracked.
  nn::Linear training = nn::train(moved);
  training.weight = Tensor<2>::ones({2, 3}, device);
  EXPECT_EQ(training.weight.val().device(), device.autodiff());
  EXPECT_TRUE(training.weight.val().is_require_grad());
}

TEST(GpuParams, OptimizerStateFromAnotherDeviceIsRefusedUntilCarriedOver) {
  KILN_REQUIRE_GPU();
  Device::cpu().seed(3);
  Head cpu_head = nn::train(Head{nn::LinearConfig{3, 2}.init(Device::cpu())});
  optim::Adam opt;
  for (int t = 0; t < 2; ++t) opt.step(cpu_head, head_backward(cpu_head), 0.01);
  optim::Adam cpu_opt = opt;
  Head gpu_head = nn::to_device(cpu_head, device);
  try {
    opt.step(gpu_head, head_backward(gpu_head), 0.01);
    ADD_FAILURE() << "CPU state was used for a GPU parameter";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(
        std::string(e.what()).find("'fc.weight' is on cuda:0 but the optimizer's state for it "
                                   "was made for cpu"),
        std::string::npos)
        << e.what();
  }
  opt.load_state_dict(gpu_head, opt.state_dict());
  EXPECT_EQ(opt.state("fc.weight")->buffers.at("exp_avg")->device(), device);
  opt.step(gpu_head, head_backward(gpu_head), 0.01);
  cpu_opt.step(cpu_head, head_backward(cpu_head), 0.01);
  const std::vector<double> gpu_w = weight_of(gpu_head), cpu_w = weight_of(cpu_head);
  for (std::size_t i = 0; i < cpu_w.size(); ++i) EXPECT_NEAR(gpu_w[i], cpu_w[i], 1e-5) << i;
}
