// The CUDA driver API, loaded with dlopen at run time.
//
// metafuse never links libcuda: a machine without an NVIDIA driver (or with
// only the toolkit's stub library) must still import and run on CPU. Load()
// answers with a Status that says exactly why CUDA is unusable.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace metafuse::runtime {

// The few driver types we use, declared here so that this file builds without
// the CUDA toolkit. They match cuda.h's ABI (opaque handles, int results).
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;  // NOLINT: cuda.h's definition

constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorNoDevice = 100;
constexpr CUresult kCudaErrorStubLibrary = 34;

struct CudaDriver {
  CUresult (*cuInit)(unsigned int flags);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* context, CUdevice device);
  CUresult (*cuCtxSetCurrent)(CUcontext context);
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction* function, CUmodule module,
                                  const char* name);
  CUresult (*cuLaunchKernel)(CUfunction f, unsigned int grid_x,
                             unsigned int grid_y, unsigned int grid_z,
                             unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_bytes,
                             CUstream stream, void** params, void** extra);
  CUresult (*cuMemAlloc)(CUdeviceptr* ptr, size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr ptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes);
  CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuGetErrorString)(CUresult error, const char** message);

  int device_count = 0;

  // dlopens libcuda.so.1 once, resolves every entry point and calls cuInit.
  // Errors: NotFound (no driver library), FailedPrecondition (stub library,
  // no device, driver too old), each with a message a user can act on.
  static absl::StatusOr<const CudaDriver*> Load();

  // "CUDA_ERROR_X (message)" for a driver result code.
  std::string ErrorString(CUresult result) const;
};

// Compute capability of a device, e.g. 90 for sm_90.
absl::StatusOr<int> ComputeCapability(const CudaDriver& driver, int ordinal);

}  // namespace metafuse::runtime
