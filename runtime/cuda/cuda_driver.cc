#include "runtime/cuda/cuda_driver.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace metafuse::runtime {
namespace {

// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{MAJOR,MINOR} in cuda.h.
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn == nullptr) {
    absl::StrAppend(missing, missing->empty() ? "" : ", ", name);
    return false;
  }
  return true;
}

absl::StatusOr<CudaDriver> LoadOnce() {
  // RTLD_LOCAL: the driver's symbols must not leak into the process.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::NotFoundError(absl::StrCat(
        "CUDA is unavailable: the NVIDIA driver library libcuda.so.1 could "
        "not be loaded (", why ? why : "unknown dlopen error",
        "). Install the NVIDIA driver to run on a GPU; CPU execution is "
        "unaffected."));
  }
  CudaDriver d;
  std::string missing;
  // `_v2` entry points are the ABI that cuda.h's macros name today.
  Resolve(handle, "cuInit", &d.cuInit, &missing);
  Resolve(handle, "cuDeviceGetCount", &d.cuDeviceGetCount, &missing);
  Resolve(handle, "cuDeviceGet", &d.cuDeviceGet, &missing);
  Resolve(handle, "cuDeviceGetAttribute", &d.cuDeviceGetAttribute, &missing);
  Resolve(handle, "cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain,
          &missing);
  Resolve(handle, "cuCtxSetCurrent", &d.cuCtxSetCurrent, &missing);
  Resolve(handle, "cuModuleLoadData", &d.cuModuleLoadData, &missing);
  Resolve(handle, "cuModuleUnload", &d.cuModuleUnload, &missing);
  Resolve(handle, "cuModuleGetFunction", &d.cuModuleGetFunction, &missing);
  Resolve(handle, "cuLaunchKernel", &d.cuLaunchKernel, &missing);
  Resolve(handle, "cuMemAlloc_v2", &d.cuMemAlloc, &missing);
  Resolve(handle, "cuMemFree_v2", &d.cuMemFree, &missing);
  Resolve(handle, "cuMemcpyHtoD_v2", &d.cuMemcpyHtoD, &missing);
  Resolve(handle, "cuMemcpyDtoH_v2", &d.cuMemcpyDtoH, &missing);
  Resolve(handle, "cuCtxSynchronize", &d.cuCtxSynchronize, &missing);
  Resolve(handle, "cuGetErrorString", &d.cuGetErrorString, &missing);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA is unavailable: libcuda.so.1 lacks the entry points ", missing,
        "; the NVIDIA driver is too old for metafuse."));
  }
  const CUresult init = d.cuInit(0);
  if (init == kCudaErrorStubLibrary) {
    return absl::FailedPreconditionError(
        "CUDA is unavailable: the libcuda.so.1 found is the CUDA toolkit's "
        "stub library (CUDA_ERROR_STUB_LIBRARY), not a real NVIDIA driver. "
        "Remove the stubs directory from the library path or install the "
        "driver.");
  }
  if (init == kCudaErrorNoDevice) {
    return absl::FailedPreconditionError(
        "CUDA is unavailable: the NVIDIA driver is installed but reports no "
        "device (CUDA_ERROR_NO_DEVICE).");
  }
  if (init != kCudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA is unavailable: cuInit failed with ", d.ErrorString(init)));
  }
  const CUresult count = d.cuDeviceGetCount(&d.device_count);
  if (count != kCudaSuccess || d.device_count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA is unavailable: the driver reports no usable device (",
        count == kCudaSuccess ? "0 devices" : d.ErrorString(count), ")."));
  }
  return d;
}

}  // namespace

absl::StatusOr<const CudaDriver*> CudaDriver::Load() {
  // Loaded once per process; the answer (driver or reason) never changes.
  static const absl::StatusOr<CudaDriver>* loaded =
      new absl::StatusOr<CudaDriver>(LoadOnce());
  if (!loaded->ok()) return loaded->status();
  return &loaded->value();
}

std::string CudaDriver::ErrorString(CUresult result) const {
  const char* message = nullptr;
  if (cuGetErrorString != nullptr &&
      cuGetErrorString(result, &message) == kCudaSuccess && message) {
    return absl::StrCat("CUDA error ", result, " (", message, ")");
  }
  return absl::StrCat("CUDA error ", result);
}

absl::StatusOr<int> ComputeCapability(const CudaDriver& driver, int ordinal) {
  if (ordinal < 0 || ordinal >= driver.device_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ordinal ", ordinal, " is out of range: ",
                     driver.device_count, " device(s) present"));
  }
  CUdevice device;
  int major = 0, minor = 0;
  CUresult r = driver.cuDeviceGet(&device, ordinal);
  if (r == kCudaSuccess) {
    r = driver.cuDeviceGetAttribute(&major, kAttrComputeCapabilityMajor,
                                    device);
  }
  if (r == kCudaSuccess) {
    r = driver.cuDeviceGetAttribute(&minor, kAttrComputeCapabilityMinor,
                                    device);
  }
  if (r != kCudaSuccess) {
    return absl::InternalError(absl::StrCat(
        "could not query CUDA device ", ordinal, ": ", driver.ErrorString(r)));
  }
  return major * 10 + minor;
}

}  // namespace metafuse::runtime
