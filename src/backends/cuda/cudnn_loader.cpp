#include "backends/cuda/cudnn_loader.h"

#include <map>
#include <memory>
#include <vector>

#include "backends/cuda/library_search.h"
#include "kiln/detail/format.h"

namespace kiln::cuda::cudnn {
namespace {

using detail::concat;

using Loaded = search::Loaded<Library>;

// Looked for once per process; never unloaded.
const Loaded& load() {
  static const Loaded& loaded = *new Loaded([] {
    Loaded result;
    std::size_t version = 0;
    const search::Found found = search::find_library(
        search::kCudnn, search::System::real(), kSymbols, [&](const std::vector<void*>& symbols) {
          version = bind(symbols).get_version();
          return refuse_version(version);
        });
    if (found.library == nullptr) {
      result.reason = found.reason;
      return result;
    }
    result.library.api = bind(found.symbols);
    result.library.version = version;
    result.library.path = search::opened_path(found);
    result.ok = true;
    return result;
  }());
  return loaded;
}

// A GPU's cuDNN, or why it has none; made once.
struct Device {
  std::unique_ptr<DeviceCudnn> cudnn;
  std::string reason;
};

std::mutex& devices_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Never destroyed: the handles live as long as the process (the backends do too).
std::map<int, Device>& devices() {
  static auto& table = *new std::map<int, Device>();
  return table;
}

}  // namespace

const Library* library(std::string* reason) {
  const Loaded& loaded = load();
  if (!loaded.ok && reason != nullptr) *reason = loaded.reason;
  return loaded.ok ? &loaded.library : nullptr;
}

DeviceCudnn* device_cudnn(Runtime& runtime, std::string* reason, bool make) {
  const int index = runtime.context.index();
  std::lock_guard lock(devices_mutex());
  if (!make) {
    const auto known = devices().find(index);
    return known != devices().end() ? known->second.cudnn.get() : nullptr;
  }
  auto [entry, made] = devices().try_emplace(index);
  Device& device = entry->second;
  if (made) {
    if (const Library* found = library(&device.reason)) {
      const Api& api = found->api;
      runtime.context.make_current();
      Handle handle = nullptr;
      if (const Status status = api.create(&handle); status != Status::Success) {
        device.reason =
            concat("cudnnCreate failed on cuda:", index, ": ", describe(*found, status));
      } else if (const Status set = api.set_stream(handle, runtime.context.stream());
                 set != Status::Success) {
        device.reason =
            concat("cudnnSetStream failed on cuda:", index, ": ", describe(*found, set));
        api.destroy(handle);
      } else {
        device.cudnn = std::make_unique<DeviceCudnn>();
        device.cudnn->library = found;
        device.cudnn->handle = handle;
      }
    }
  }
  if (device.cudnn == nullptr && reason != nullptr) *reason = device.reason;
  return device.cudnn.get();
}

std::string status(Runtime& runtime, bool* loaded, std::int64_t* calls) {
  std::string reason;
  DeviceCudnn* device = device_cudnn(runtime, &reason);
  *loaded = device != nullptr;
  if (calls != nullptr) *calls = device != nullptr ? device->calls.load() : 0;
  if (device == nullptr) return reason;
  return concat("cuDNN ", version_text(device->library->version), " (", device->library->path, ")");
}

std::string describe(const Library& library, Status status) {
  const char* name = library.api.error_string(status);
  std::string text = name != nullptr ? name : concat("cuDNN status ", static_cast<int>(status));
  char message[1024] = {};
  library.api.last_error_string(message, sizeof message);
  if (message[0] != '\0') text += concat(" (", message, ")");
  return text;
}

}  // namespace kiln::cuda::cudnn
