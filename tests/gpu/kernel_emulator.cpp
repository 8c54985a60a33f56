// tensor_core.h's product for the host: the emulated grid's (kernel_emulator.h), for every kernel
// body the host tests run on it.
#include "kernel_emulator.h"

#include "backends/cuda/tensor_core.h"

namespace kiln::cuda::tensor_core {

void tc_host_mma(float* c, const unsigned* a, unsigned b0, unsigned b1, bool bf16) {
  kernel_emulator::mma_16bit(c, a, b0, b1, bf16);
}

}  // namespace kiln::cuda::tensor_core
