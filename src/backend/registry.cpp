#include "backend/registry.h"

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "autodiff/autodiff_backend.h"
#include "backend/cuda_plugin.h"
#include "backends/cpu/cpu_backend.h"

namespace kiln {
namespace {

Backend& cpu_backend() {
  static const std::shared_ptr<Backend> backend = make_cpu_backend();
  return *backend;
}

// The plugin's backend for GPU index, made on first use (Device::cuda has checked the index).
// Every op on a GPU comes here, so a made backend is found with one atomic load, no lock.
Backend& cuda_backend(int index) {
  constexpr int kFastSlots = 64;
  static std::array<std::atomic<Backend*>, kFastSlots> made{};
  if (index >= 0 && index < kFastSlots) {
    if (Backend* backend = made[static_cast<std::size_t>(index)].load(std::memory_order_acquire)) {
      return *backend;
    }
  }
  static std::mutex mutex;
  // Never destroyed: tearing a CUDA context down during exit races the driver's own teardown.
  static auto& backends = *new std::map<int, std::shared_ptr<Backend>>();
  std::lock_guard lock(mutex);
  auto& slot = backends[index];
  if (!slot) {
    std::string reason;
    bool not_compiled = false;
    const CudaPluginApi* api = cuda_plugin(&reason, &not_compiled);
    if (api == nullptr && not_compiled) detail::fail<NotCompiled>("device", reason);
    if (api == nullptr) detail::fail<BackendUnavailable>("device", reason);
    slot = api->make_backend(index);
  }
  if (index >= 0 && index < kFastSlots) {
    made[static_cast<std::size_t>(index)].store(slot.get(), std::memory_order_release);
  }
  return *slot;
}

struct SettingsEntry {
  std::optional<DeviceSettings> settings;
};

std::mutex& settings_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::pair<int, int>, SettingsEntry>& settings_table() {
  static std::map<std::pair<int, int>, SettingsEntry> table;
  return table;
}

std::pair<int, int> hardware_key(const Device& device) {
  return {static_cast<int>(device.kind()), device.index()};
}

Backend& hardware_backend(const Device& device) {
  switch (device.kind()) {
    case DeviceKind::Cpu:
      return cpu_backend();
    case DeviceKind::Cuda:
      return cuda_backend(device.index());
    case DeviceKind::Remote:
      detail::fail<NotCompiled>("device", "kiln was built without the remote backend (", device.to_string(), ")");
  }
  detail::fail<InvalidArgument>("device", "unknown device kind");
}

// The autodiff decorator over device's hardware backend, made on first use.
Backend& autodiff_backend(const Device& device) {
  if (device.kind() == DeviceKind::Cpu && device.index() == 0) {
    static const auto cpu = std::make_shared<autodiff::AutodiffBackend>(
        std::shared_ptr<Backend>(std::shared_ptr<Backend>{}, &cpu_backend()));
    return *cpu;
  }
  static std::mutex mutex;
  static std::map<std::pair<int, int>, std::shared_ptr<Backend>> decorators;
  Backend& hardware = hardware_backend(device);
  std::lock_guard lock(mutex);
  auto& slot = decorators[hardware_key(device)];
  if (!slot) {
    slot = std::make_shared<autodiff::AutodiffBackend>(
        std::shared_ptr<Backend>(std::shared_ptr<Backend>{}, &hardware));
  }
  return *slot;
}

}  // namespace

Backend& backend_for(const Device& device) {
  if (device.kind() == DeviceKind::Cpu && !device.is_autodiff()) return cpu_backend();
  if (device.is_autodiff()) return autodiff_backend(device);
  return hardware_backend(device);
}

DeviceSettings settings_for(const Device& device) {
  Backend& backend = hardware_backend(device.without_autodiff());
  std::lock_guard lock(settings_mutex());
  SettingsEntry& entry = settings_table()[hardware_key(device)];
  if (!entry.settings) entry.settings = backend.default_settings();
  return *entry.settings;
}

void set_default_dtypes_for(const Device& device, DType float_dtype, DType int_dtype,
                            DType bool_dtype) {
  Backend& backend = hardware_backend(device.without_autodiff());
  const char* op = "Device::set_default_dtypes";
  auto check = [&](DType dtype, bool kind_ok, const char* role) {
    if (!kind_ok) {
      detail::fail<UnsupportedDType>(op, dtype_name(dtype), " cannot be the default ", role,
                                     " dtype");
    }
    if (!backend.supports_dtype(dtype)) {
      detail::fail<UnsupportedDType>(op, backend.name(), " cannot compute in ",
                                     dtype_name(dtype), " on ", device.to_string());
    }
  };
  check(float_dtype, is_float(float_dtype), "float");
  check(int_dtype, is_int(int_dtype), "int");
  check(bool_dtype, is_bool(bool_dtype), "bool");
  std::lock_guard lock(settings_mutex());
  SettingsEntry& entry = settings_table()[hardware_key(device)];
  if (entry.settings) {
    detail::fail<AlreadyInitialized>(op, "the settings of ", device.to_string(),
                                     " are fixed already (the device was used, or they were set)");
  }
  entry.settings = DeviceSettings{float_dtype, int_dtype, bool_dtype};
}

}  // namespace kiln
