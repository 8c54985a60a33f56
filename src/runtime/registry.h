// Finds the Backend that serves a device, creating it on first use.
#pragma once

#include "contract/backend.h"

namespace kiln {

// The backend for device (the autodiff flag selects the autodiff chain; inside an AutocastScope
// on this thread, the autocast layer over it).
Backend& backend_for(const Device& device);
// The chain device's flags ask for, never the autocast layer: for code that needs the chain's
// own type (the autodiff backend).
Backend& chain_backend_for(const Device& device);
// The hardware backend of device itself, without the capture layer every chain ends in
// (decorators/capture/capture_backend.h): for a backend that needs its peer's own type.
Backend& hardware_backend_for(const Device& device);
// The settings of device's hardware, fixed (from the backend's defaults) on the first call.
DeviceSettings settings_for(const Device& device);
// Fixes the settings of device's hardware; see Device::set_default_dtypes.
void set_default_dtypes_for(const Device& device, DType float_dtype, DType int_dtype,
                            DType bool_dtype);
// A remote device's "HOST:PORT" and token, as Device::remote interned them (runtime/device.cpp).
std::string remote_address_of(const Device& device);
std::string remote_token_of(const Device& device);

}  // namespace kiln
