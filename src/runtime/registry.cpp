#include "runtime/registry.h"

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "backends/cpu/cpu_backend.h"
#include "decorators/autocast/autocast_layer.h"
#include "decorators/autodiff/autodiff_backend.h"
#include "decorators/capture/capture_backend.h"
#include "decorators/fusion/fusion_backend.h"
#include "runtime/cuda_plugin.h"
#include "runtime/remote_plugin.h"

namespace kiln {
namespace {

// Every backend made on first use, found afterwards with one atomic load and no lock: a slot per
// (device kind, decorator chain, index below kSlotIndices). Made backends are never destroyed:
// tearing a CUDA context down during exit races the driver's own teardown. Indices past the
// slots (no machine has that many devices of a kind) go through a locked map.
class BackendCache {
 public:
  // The key of a backend: its device's kind and index, and which layers wrap its hardware
  // (bit 0: autodiff, bit 1: fusion, bit 2: the capture layer, under any other; autodiff wraps
  // fusion: autodiff<fusion<capture<cuda>>>; bit 3: the autocast layer over all of them, bit 4
  // its dtype, f16 when set). 0 is the hardware alone.
  struct Key {
    DeviceKind kind;
    int index;
    unsigned decorators;
    auto operator<=>(const Key&) const = default;
  };

  template <class Make>
  Backend& get(const Key& key, Make&& make) {
    std::atomic<Backend*>* slot = slot_of(key);
    if (slot != nullptr) {
      if (Backend* backend = slot->load(std::memory_order_acquire)) return *backend;
    }
    std::lock_guard lock(mutex_);
    std::shared_ptr<Backend>& owned = made_[key];
    if (!owned) owned = make();  // throws if it cannot be made; nothing is cached then
    if (slot != nullptr) slot->store(owned.get(), std::memory_order_release);
    return *owned;
  }

 private:
  static constexpr int kSlotIndices = 64;
  static constexpr unsigned kDecoratorChains = 32;
  static constexpr std::size_t kKinds = 3;  // DeviceKind: Cpu, Cuda, Remote

  std::atomic<Backend*>* slot_of(const Key& key) {
    const auto kind = static_cast<std::size_t>(key.kind);
    if (key.index < 0 || key.index >= kSlotIndices || key.decorators >= kDecoratorChains ||
        kind >= kKinds) {
      return nullptr;
    }
    return &slots_[(kind * kDecoratorChains + key.decorators) * kSlotIndices +
                   static_cast<std::size_t>(key.index)];
  }

  std::array<std::atomic<Backend*>, kKinds * kDecoratorChains * kSlotIndices> slots_{};
  // Recursive: making one backend may ask for another (the plugin's, the CPU's).
  std::recursive_mutex mutex_;
  std::map<Key, std::shared_ptr<Backend>> made_;
};

BackendCache& backend_cache() {
  static auto& cache = *new BackendCache();  // never destroyed (see BackendCache)
  return cache;
}

constexpr unsigned kAutodiffBit = 1;
constexpr unsigned kFusionBit = 2;
constexpr unsigned kCaptureBit = 4;
constexpr unsigned kAutocastBit = 8;
constexpr unsigned kAutocastHalfBit = 16;

// No function-local static here: its guard would be a second lock, taken before the cache's, while
// a thread making a decorator chain takes the cache's lock and then asks for the CPU backend
// (a lock-order inversion that deadlocked first use from many threads). The slot is one atomic
// load.
Backend& cpu_backend() {
  return backend_cache().get({DeviceKind::Cpu, 0, 0}, [] { return make_cpu_backend(); });
}

// The plugin's backend for GPU index (Device::cuda has checked the index).
std::shared_ptr<Backend> make_cuda_backend(int index) {
  std::string reason;
  bool not_compiled = false;
  const CudaPluginApi* api = cuda_plugin(&reason, &not_compiled);
  if (api == nullptr && not_compiled) detail::fail<NotCompiled>("device", reason);
  if (api == nullptr) detail::fail<BackendUnavailable>("device", reason);
  return api->make_backend(index);
}

// The remote plugin's backend for device (Device::remote has interned its address and token).
std::shared_ptr<Backend> make_remote_backend(const Device& device) {
  std::string reason;
  bool not_compiled = false;
  const RemotePluginApi* api = remote_plugin(&reason, &not_compiled);
  if (api == nullptr && not_compiled) detail::fail<NotCompiled>("Device::remote", reason);
  if (api == nullptr) detail::fail<BackendUnavailable>("Device::remote", reason);
  return api->make_backend(device, remote_address_of(device), remote_token_of(device));
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
      return backend_cache().get({DeviceKind::Cuda, device.index(), 0},
                                 [&] { return make_cuda_backend(device.index()); });
    case DeviceKind::Remote:
      return backend_cache().get({DeviceKind::Remote, device.index(), 0},
                                 [&] { return make_remote_backend(device); });
  }
  detail::fail<InvalidArgument>("device", "unknown device kind");
}

// The capture layer over device's hardware (device has no decorator flags).
Backend& capture_layer(const Device& device) {
  return backend_cache().get(
      {device.kind(), device.index(), kCaptureBit}, [&]() -> std::shared_ptr<Backend> {
        Backend& hardware = hardware_backend(device);
        std::shared_ptr<Backend> borrowed(std::shared_ptr<Backend>{}, &hardware);
        return std::make_shared<capturing::CaptureBackend>(std::move(borrowed));
      });
}

// The decorators device's flags ask for over its hardware backend, made on first use: the
// capture layer over the hardware, fusion over that, autodiff over that.
Backend& decorated_backend(const Device& device) {
  if (!device.is_autodiff() && !device.is_fused()) return capture_layer(device);
  const unsigned bits = kCaptureBit | (device.is_autodiff() ? kAutodiffBit : 0) |
                        (device.is_fused() ? kFusionBit : 0);
  return backend_cache().get(
      {device.kind(), device.index(), bits}, [&]() -> std::shared_ptr<Backend> {
        // Asked only when the chain is made, so that finding it is one lookup, not one per layer.
        const Device below =
            device.is_autodiff() ? device.without_autodiff() : device.without_fusion();
        Backend& inner = decorated_backend(below);
        // The inner backend lives as long as the cache: a non-owning pointer.
        std::shared_ptr<Backend> borrowed(std::shared_ptr<Backend>{}, &inner);
        if (device.is_autodiff())
          return std::make_shared<autodiff::AutodiffBackend>(std::move(borrowed));
        return fusion::make_fusion_backend(std::move(borrowed));
      });
}

// The autocast layer over device's chain, for ops of this thread inside an AutocastScope on its
// hardware; nullptr outside one.
Backend* autocast_layer(const Device& device) {
  const std::optional<DType> dtype = autocast_dtype(device);
  if (!dtype) return nullptr;
  const unsigned chain = kCaptureBit | (device.is_autodiff() ? kAutodiffBit : 0) |
                         (device.is_fused() ? kFusionBit : 0);
  const unsigned bits = chain | kAutocastBit | (*dtype == DType::F16 ? kAutocastHalfBit : 0);
  return &backend_cache().get(
      {device.kind(), device.index(), bits}, [&]() -> std::shared_ptr<Backend> {
        Backend& inner = decorated_backend(device);
        std::shared_ptr<Backend> borrowed(std::shared_ptr<Backend>{}, &inner);
        return std::make_shared<autocast::AutocastBackend>(std::move(borrowed), *dtype);
      });
}

}  // namespace

Backend& backend_for(const Device& device) {
  // One relaxed load while no scope lives anywhere (every program that does not use autocast).
  if (autocast::live_scopes.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    if (Backend* layer = autocast_layer(device)) return *layer;
  }
  return decorated_backend(device);
}

Backend& chain_backend_for(const Device& device) { return decorated_backend(device); }

Backend& hardware_backend_for(const Device& device) { return hardware_backend(device); }

DeviceSettings settings_for(const Device& device) {
  Backend& backend = hardware_backend(device);
  std::lock_guard lock(settings_mutex());
  SettingsEntry& entry = settings_table()[hardware_key(device)];
  if (!entry.settings) entry.settings = backend.default_settings();
  return *entry.settings;
}

void set_default_dtypes_for(const Device& device, DType float_dtype, DType int_dtype,
                            DType bool_dtype) {
  Backend& backend = hardware_backend(device);
  const char* op = "Device::set_default_dtypes";
  auto check = [&](DType dtype, bool kind_ok, const char* role) {
    if (!kind_ok) {
      detail::fail<UnsupportedDType>(op, dtype_name(dtype), " cannot be the default ", role,
                                     " dtype");
    }
    if (!backend.supports_dtype(dtype)) {
      detail::fail<UnsupportedDType>(op, backend.name(), " cannot compute in ", dtype_name(dtype),
                                     " on ", device.to_string());
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
