#include "kiln/device.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <vector>

#include "kiln/detail/format.h"
#include "kiln/error.h"
#include "runtime/cuda_plugin.h"
#include "runtime/registry.h"

namespace kiln {
namespace {

std::mutex& remotes_mutex() {
  static std::mutex m;
  return m;
}

// The run-time switches of each hardware device (kind, index): tf32 (absent means off) and the
// quantized propagation (absent means Dequantize).
struct RuntimeFlags {
  std::mutex mutex;
  std::map<std::pair<int, int>, bool> tf32;
  std::map<std::pair<int, int>, QuantPropagation> propagation;
};
RuntimeFlags& runtime_flags() {
  static RuntimeFlags flags;
  return flags;
}

constexpr const char* kAcceptedForms =
    "accepted forms: \"cpu\", \"cuda\", \"cuda:N\", \"remote://HOST:PORT\"";

bool parse_index(const std::string& text, int& out) {
  if (text.empty() || text.size() > 6) return false;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  out = value;
  return true;
}

}  // namespace

Device Device::cuda(int index) {
  if (index < 0) detail::fail<InvalidArgument>("Device::cuda", "negative GPU index ", index);
  std::string reason;
  bool not_compiled = false;
  const int count = cuda_device_count(&reason, &not_compiled);
  if (not_compiled) detail::fail<NotCompiled>("Device::cuda", reason, " (cuda:", index, ")");
  if (count == 0) detail::fail<BackendUnavailable>("Device::cuda", reason, " (cuda:", index, ")");
  if (index >= count) {
    detail::fail<BackendUnavailable>("Device::cuda", "no GPU cuda:", index, " (", count,
                                     count == 1 ? " GPU" : " GPUs", " found)");
  }
  return Device(DeviceKind::Cuda, index);
}

namespace {

// "remote://HOST:PORT" (or "tcp://HOST:PORT", or "HOST:PORT") as "HOST:PORT".
std::string remote_address(const std::string& url) {
  std::string address = url;
  for (const char* scheme : {"remote://", "tcp://"}) {
    if (address.rfind(scheme, 0) == 0) address = address.substr(std::string_view(scheme).size());
  }
  const auto colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 || !parse_index(address.substr(colon + 1), port) ||
      port <= 0 || port > 65535) {
    detail::fail<InvalidArgument>("Device::remote", "\"", url,
                                  "\" is not an address of the form remote://HOST:PORT");
  }
  return address;
}

struct RemoteEntry {
  std::string address;
  std::string token;
};
std::vector<RemoteEntry>& remotes() {
  static std::vector<RemoteEntry> table;
  return table;
}

}  // namespace

Device Device::remote(const std::string& url) {
  const char* token = std::getenv("KILN_REMOTE_TOKEN");
  return remote(url, token != nullptr ? token : "");
}

Device Device::remote(const std::string& url, const std::string& token) {
  if (url.empty()) detail::fail<InvalidArgument>("Device::remote", "empty url");
  const std::string address = remote_address(url);
  std::size_t index = 0;
  {
    std::lock_guard lock(remotes_mutex());
    std::vector<RemoteEntry>& table = remotes();
    // One device (and connection, and session on the server) per address and token: a token
    // the server refuses fails here even while another one's connection is open.
    while (index < table.size() &&
           (table[index].address != address || table[index].token != token)) {
      ++index;
    }
    if (index == table.size()) table.push_back({address, token});
  }
  const Device device(DeviceKind::Remote, static_cast<int>(index));
  backend_for(device);  // connects now: a missing server or a refused token throws here
  return device;
}

std::string Device::url() const {
  if (kind() != DeviceKind::Remote) return {};
  std::lock_guard lock(remotes_mutex());
  return "remote://" + remotes().at(static_cast<std::size_t>(index())).address;
}

std::string remote_address_of(const Device& device) {
  std::lock_guard lock(remotes_mutex());
  return remotes().at(static_cast<std::size_t>(device.index())).address;
}

std::string remote_token_of(const Device& device) {
  std::lock_guard lock(remotes_mutex());
  return remotes().at(static_cast<std::size_t>(device.index())).token;
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (!parse_index(text.substr(5), index)) {
      detail::fail<InvalidArgument>("KILN_DEVICE", "bad GPU index in \"", text, "\"; ",
                                    kAcceptedForms);
    }
    return cuda(index);
  }
  if (text.rfind("remote://", 0) == 0 && text.size() > 9) return remote(text);
  detail::fail<InvalidArgument>("KILN_DEVICE", "unknown device \"", text, "\"; ", kAcceptedForms);
}

Device Device::default_device() {
  Device device = cpu();
  if (const char* env = std::getenv("KILN_DEVICE"); env != nullptr && *env != '\0') {
    device = parse(env);
  } else if (count(DeviceKind::Cuda) > 0) {
    device = cuda(0);
  }
  const char* fusion = std::getenv("KILN_FUSION");
  const bool unfused = fusion != nullptr && std::string_view(fusion) == "0";
  return unfused ? device : device.fused();
}

int Device::count(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Cpu:
      return 1;
    case DeviceKind::Cuda:
      return cuda_device_count(nullptr);
    case DeviceKind::Remote:
      return 0;
  }
  return 0;
}

std::string Device::backend_name() const { return chain_backend_for(*this).name(); }
DeviceSettings Device::settings() const { return settings_for(*this); }
void Device::set_default_dtypes(DType float_dtype, DType int_dtype, DType bool_dtype) const {
  set_default_dtypes_for(*this, float_dtype, int_dtype, bool_dtype);
}
void Device::set_allow_tf32(bool allow) const {
  RuntimeFlags& flags = runtime_flags();
  std::lock_guard lock(flags.mutex);
  flags.tf32[{static_cast<int>(kind()), index()}] = allow;
}
bool Device::allow_tf32() const {
  RuntimeFlags& flags = runtime_flags();
  std::lock_guard lock(flags.mutex);
  const auto found = flags.tf32.find({static_cast<int>(kind()), index()});
  return found != flags.tf32.end() && found->second;
}
void Device::set_quant_propagation(QuantPropagation propagation) const {
  RuntimeFlags& flags = runtime_flags();
  std::lock_guard lock(flags.mutex);
  flags.propagation[{static_cast<int>(kind()), index()}] = propagation;
}
QuantPropagation Device::quant_propagation() const {
  RuntimeFlags& flags = runtime_flags();
  std::lock_guard lock(flags.mutex);
  const auto found = flags.propagation.find({static_cast<int>(kind()), index()});
  return found != flags.propagation.end() ? found->second : QuantPropagation::Dequantize;
}
DTypeUsageSet Device::dtype_usage(DType dtype) const {
  return backend_for(*this).dtype_usage(dtype);
}
bool Device::supports_dtype(DType dtype) const { return backend_for(*this).supports_dtype(dtype); }
void Device::seed(std::uint64_t seed) const { backend_for(*this).seed(seed); }
void Device::sync() const { backend_for(*this).sync(); }
void Device::flush() const { backend_for(*this).flush(); }
MemoryStats Device::memory_stats() const { return backend_for(*this).memory_stats(); }

KernelStats Device::kernel_stats() const {
  if (kind() != DeviceKind::Cuda) return {};
  backend_for(*this);  // the device exists (and the plugin is loaded), or this throws
  const CudaPluginApi* api = cuda_plugin(nullptr);
  const KernelCacheStats s = api->kernel_cache_stats(index());
  return {s.compiles, s.memory_hits, s.disk_hits, s.compile_seconds, s.disk_load_seconds};
}
void Device::memory_cleanup() const { backend_for(*this).memory_cleanup(); }
void Device::reset_peak_memory() const { backend_for(*this).reset_peak_memory(); }

std::string Device::to_string() const {
  std::ostringstream out;
  switch (kind()) {
    case DeviceKind::Cpu:
      out << "cpu";
      break;
    case DeviceKind::Cuda:
      out << "cuda:" << index();
      break;
    case DeviceKind::Remote:
      out << url();
      break;
  }
  if (is_fused() && is_autodiff()) {
    out << " (fused, autodiff)";
  } else if (is_fused()) {
    out << " (fused)";
  } else if (is_autodiff()) {
    out << " (autodiff)";
  }
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Device& device) {
  return out << device.to_string();
}

}  // namespace kiln
