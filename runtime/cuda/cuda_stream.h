// Torch's current CUDA stream, as the driver handle kernels are launched on.
//
// Fused kernels must go on the stream torch's own CUDA work of the same
// program is queued on (at::cuda::getCurrentCUDAStream()), so that no host
// synchronization is needed between them. Where the build has CUDA torch
// headers (METAFUSE_WITH_CUDA_TORCH and <c10/cuda/CUDAStream.h>), the handle
// comes from c10::cuda. Elsewhere it comes through c10's device-generic
// stream API: newer torch's c10::Stream::native_handle(), or, for torch's
// default stream (id 0), the legacy default stream (a null handle), which
// is what torch's default stream is.
#pragma once

#include <optional>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include "absl/status/statusor.h"
#include "runtime/cuda/cuda_driver.h"

namespace metafuse::runtime {

// The driver handle of `stream` (a CUDA stream of torch's), given the native
// handle where the torch API gave one. Errors name the stream and what to do
// when its handle cannot be known: pure, so the choice is tested without a GPU.
absl::StatusOr<CUstream> StreamHandleFor(const c10::Stream& stream,
                                         std::optional<void*> native_handle);

// The handle of torch's current stream on CUDA device `device`; the legacy
// default stream (null) when the process's torch has no CUDA (no torch work
// on the device to order against). Errors: a device that is not CUDA, a
// stream whose handle this build cannot read.
absl::StatusOr<CUstream> CurrentCudaStream(c10::Device device);

}  // namespace metafuse::runtime
