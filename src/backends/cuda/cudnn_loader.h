// cuDNN for the CUDA plugin's convolutions, which kiln never links: libcudnn.so.9 is looked for
// on the first convolution (library_search.h says where), its functions are looked up by the
// names lib/cudnn_api.h declares, and each GPU gets one handle bound to its stream. A missing
// library, a missing function, another major version or a failed cudnnCreate means "no cuDNN"
// with the reason kept for `kiln info`: the convolutions then run kiln's own kernels, never an
// error. Nothing is unloaded or destroyed (like the backends: they outlive every tensor).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "backends/cuda/lib/cudnn_api.h"
#include "backends/cuda/runtime.h"

namespace kiln::cuda::cudnn {

struct Library {
  Api api;
  std::size_t version = 0;  // cudnnGetVersion()
  std::string path;         // the file the loader chose
};

// One GPU's cuDNN. cuDNN's handle must not be used by two threads at once: every call with it,
// and every use of what the convolutions keep per shape, holds mutex.
struct DeviceCudnn {
  const Library* library = nullptr;
  Handle handle = nullptr;
  std::mutex mutex;
  std::atomic<std::int64_t> calls{0};  // convolution ops run through cuDNN
};

// The library, looked for once per process; null with the reason in *reason (when not null).
const Library* library(std::string* reason);

// runtime's GPU's cuDNN (the handle made on the first call, on its stream); null with the reason
// in *reason (when not null) when there is no library or cudnnCreate failed on that GPU. With
// make false, only a handle made before: none is made inside a CUDA graph capture (cudnnCreate
// allocates and initialises on the device).
DeviceCudnn* device_cudnn(Runtime& runtime, std::string* reason = nullptr, bool make = true);

// CudaPluginApi::cudnn_status for runtime's GPU: "cuDNN 9.19.0 (/path/libcudnn.so.9)" with
// *loaded true, or why convolutions run kiln's own kernels there; *calls (when not null) the
// convolution ops that GPU has run through cuDNN.
std::string status(Runtime& runtime, bool* loaded, std::int64_t* calls);

// cuDNN's words for a failed call: the status's name and the library's last error message.
std::string describe(const Library& library, Status status);

}  // namespace kiln::cuda::cudnn
