#include "runtime/cuda/cuda_stream.h"

#include <type_traits>
#include <utility>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "absl/strings/str_cat.h"

#if defined(METAFUSE_WITH_CUDA_TORCH) && __has_include(<c10/cuda/CUDAStream.h>)
#include <c10/cuda/CUDAStream.h>
#define METAFUSE_C10_CUDA_STREAM 1
#endif

namespace metafuse::runtime {
namespace {

// c10::Stream::native_handle() exists in newer torch only; detected, not
// version-checked, so one source builds against 1.13 and 2.x.
template <typename S, typename = void>
struct HasNativeHandle : std::false_type {};
template <typename S>
struct HasNativeHandle<S, std::void_t<decltype(std::declval<const S&>().native_handle())>>
    : std::true_type {};

template <typename S>
std::optional<void*> NativeHandle(const S& stream) {
  if constexpr (HasNativeHandle<S>::value) {
    return static_cast<void*>(stream.native_handle());
  } else {
    return std::nullopt;
  }
}

}  // namespace

absl::StatusOr<CUstream> StreamHandleFor(const c10::Stream& stream,
                                         std::optional<void*> native_handle) {
  if (stream.device_type() != c10::DeviceType::CUDA) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a CUDA stream, got one of ", stream.device().str()));
  }
  if (native_handle.has_value()) return static_cast<CUstream>(*native_handle);
  // Torch's default stream of every device is the legacy default stream.
  if (stream.id() == 0) return static_cast<CUstream>(nullptr);
  return absl::FailedPreconditionError(absl::StrCat(
      "torch's current stream on ", stream.device().str(), " is stream id ", stream.id(),
      ", whose handle this metafuse build cannot read (built against a torch without "
      "c10::Stream::native_handle and without METAFUSE_WITH_CUDA_TORCH); rebuild metafuse "
      "against the CUDA torch you run (pip install --no-build-isolation .) or call the "
      "compiled function on the default stream"));
}

absl::StatusOr<CUstream> CurrentCudaStream(c10::Device device) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CurrentCudaStream: expected a CUDA device, got ", device.str()));
  }
  // A CUDA torch on a machine without a GPU (or without a driver) throws
  // from its stream query: reported, never thrown through.
  try {
#ifdef METAFUSE_C10_CUDA_STREAM
    // cudaStream_t points to CUDA's own CUstream_st; ours (cuda_driver.h) is
    // an opaque type of the same driver object, so the pointer is re-typed.
    return reinterpret_cast<CUstream>(
        c10::cuda::getCurrentCUDAStream(device.index()).stream());
#else
    // A torch without CUDA queues no work on the device to order against:
    // the legacy default stream serves (the driver-level tests run this way).
    if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) {
      return static_cast<CUstream>(nullptr);
    }
    const c10::Stream stream =
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device);
    return StreamHandleFor(stream, NativeHandle(stream));
#endif
  } catch (const c10::Error& error) {
    return absl::FailedPreconditionError(absl::StrCat(
        "torch cannot give the current stream of ", device.str(), ": ",
        error.what_without_backtrace()));
  }
}

}  // namespace metafuse::runtime
