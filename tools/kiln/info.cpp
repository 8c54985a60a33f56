#include <kiln/kiln.h>

#include <iomanip>

#include "runtime/cuda_plugin.h"
#include "runtime/remote_plugin.h"
#include "tools/kiln/commands.h"

namespace kiln::tools {

namespace {

std::string usage_cell(DTypeUsageSet usage) {
  std::string cell;
  if (usage.contains(DTypeUsage::Storage)) cell += "S";
  if (usage.contains(DTypeUsage::Arithmetic)) cell += "A";
  if (usage.contains(DTypeUsage::Accelerated)) cell += "X";
  return cell.empty() ? "-" : cell;
}

}  // namespace

int run_info(std::ostream& out) {
  out << "kiln " << kVersion << " (backend API " << kBackendApiVersion << ", contract "
      << contract_name(kBackendContractHash) << ")\n\n";
  out << "backends:\n";
  out << "  cpu      compiled in, available\n";
  std::string cuda_reason;
  bool cuda_not_compiled = false;
  const int gpus = cuda_device_count(&cuda_reason, &cuda_not_compiled);
  if (cuda_not_compiled) {
    out << "  cuda     not compiled in\n";
  } else if (gpus == 0) {
    out << "  cuda     compiled in, unavailable: " << cuda_reason << "\n";
  } else {
    out << "  cuda     compiled in, available (" << gpus << (gpus == 1 ? " GPU" : " GPUs") << ")\n";
    // The collectives of cuda tensors: NCCL where it loads, else the host (README.md, "NCCL on
    // cuda").
    bool loaded = false;
    const std::string nccl = cuda_plugin(nullptr)->nccl_status(&loaded);
    out << "  nccl     "
        << (loaded ? "loaded: " + nccl + ", for collectives of cuda tensors"
                   : "not used (collectives of cuda tensors go through the "
                     "host): " +
                         nccl)
        << "\n";
    // Convolutions: cuDNN where it loads, chosen per shape against kiln's own kernels (README.md,
    // "cuDNN on cuda").
    const std::string cudnn = cuda_plugin(nullptr)->cudnn_status(0, &loaded, nullptr);
    out << "  cudnn    "
        << (loaded ? "loaded: " + cudnn + ", for convolutions where it is faster (KILN_CONV)"
                   : "not used (convolutions run kiln's own kernels): " + cudnn)
        << "\n";
  }
  std::string remote_reason;
  bool remote_not_compiled = false;
  if (remote_plugin(&remote_reason, &remote_not_compiled) != nullptr) {
    out << "  remote   compiled in (remote://HOST:PORT devices; kiln serve)\n";
  } else if (remote_not_compiled) {
    out << "  remote   not compiled in\n";
  } else {
    out << "  remote   compiled in, unavailable: " << remote_reason << "\n";
  }
  out << "  autodiff compiled in (a decorator: Device::autodiff())\n";
  out << "  gloo     "
      << (distributed::available()
              ? "compiled in (process groups of several ranks; kiln launch)"
              : "not compiled in (process groups of one rank only; Debian: apt-get install "
                "libgloo-dev)")
      << "\n\n";

  std::vector<Device> devices;
  for (int i = 0; i < Device::count(DeviceKind::Cpu); ++i) devices.push_back(Device::cpu());
  for (int i = 0; i < gpus; ++i) devices.push_back(Device::cuda(i));
  out << "devices:\n";
  for (const Device& d : devices) {
    out << "  " << std::left << std::setw(10) << d.to_string() << std::setw(14) << d.backend_name();
    if (d.kind() == DeviceKind::Cuda) {
      const GpuInfo gpu = cuda_plugin(nullptr)->device_info(d.index());
      out << gpu.name << ", " << std::fixed << std::setprecision(1)
          << static_cast<double>(gpu.total_memory) / (1024.0 * 1024.0 * 1024.0)
          << " GiB, compute capability " << gpu.major << "." << gpu.minor;
    }
    out << "\n";
  }
  out << "\ndtype usage (S storage, A arithmetic, X accelerated):\n  " << std::setw(10) << "device";
  for (DType dt : kAllDTypes) out << std::setw(6) << dtype_name(dt);
  out << "\n";
  for (const Device& d : devices) {
    out << "  " << std::setw(10) << d.to_string();
    for (DType dt : kAllDTypes) out << std::setw(6) << usage_cell(d.dtype_usage(dt));
    out << "\n";
  }
  out << "\ndefault device: " << Device::default_device().to_string() << "\n";
  return 0;
}

}  // namespace kiln::tools
