#pragma once
/// The CUDA driver behind the device seam (Note [One device seam] in device_runtime.hpp).
#include "backend/device_runtime.hpp"

namespace epifuse::backend {

/// cuda_or_null() seen through DeviceRuntime: each call forwards to the
/// CudaDriver method of the same name. nullptr when cuda_or_null() is.
DeviceRuntime* cuda_device_or_null();

}  // namespace epifuse::backend
