// The CUDA form of a fused kernel: KernelCode::cuda_source compiled by NVRTC
// to PTX for each device's architecture (through the kernel cache: a disk
// hit skips NVRTC), loaded once per device through the dlopen'ed driver, and
// launched over [0, n) on torch's current stream of that device
// (runtime/cuda/cuda_stream.h). A launch never synchronizes with the host.
//
// In a build without NVRTC (no METAFUSE_HAS_NVRTC) the first launch answers
// FailedPrecondition naming the kernel and what to do; kernel_target.h
// refuses such launches before they get here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "runtime/cuda/cuda_kernel.h"
#include "runtime/base/kernel_cache.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

class CudaFusedKernel {
 public:
  // `cache` may be null (compile every time); it must outlive the kernel.
  CudaFusedKernel(KernelCode code, KernelCache* cache);

  // Enqueues the kernel over [0, n) on the current stream of `device` (a CUDA
  // device): `inputs`, `outputs` are device pointers in kernel order, one per
  // kernel input / output; `scalars` one per scalar parameter. The first
  // launch on a device compiles (or reads from the cache) and loads it.
  absl::Status Launch(c10::Device device, int64_t n, const void* const* inputs,
                      void* const* outputs, const double* scalars) const;

  const KernelCode& code() const { return code_; }

  // Process-wide counts, for tests and benchmarks.
  struct Stats {
    int64_t compiled = 0;   // NVRTC ran
    int64_t from_disk = 0;  // PTX from the kernel cache
    int64_t launches = 0;
  };
  static Stats GetStats();

 private:
  absl::StatusOr<const CudaKernel*> Loaded(int device) const;

  KernelCode code_;
  KernelCache* cache_;
  mutable std::mutex mu_;
  mutable std::map<int, std::unique_ptr<CudaKernel>> loaded_;  // by device ordinal
};

}  // namespace metafuse::runtime
