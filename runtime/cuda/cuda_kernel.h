// Loading and launching a printed CUDA kernel's PTX (runtime/cuda/cuda_ptx.h)
// through the dlopen'ed driver (runtime/cuda/cuda_driver.h).
//
// Written against the launch contract of compiler/codegen/cuda_printer.h:
// parameters (long long n, inputs..., outputs..., double scalars...), a
// grid-stride loop, so any grid covers [0, n). Not exercised on a machine
// without a GPU: there Load() answers FailedPrecondition "no CUDA device: ..."
// with the driver's reason, and nothing else runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cuda/cuda_driver.h"

namespace metafuse::runtime {

// Blocks for n elements at `block_size` threads each: ceil(n / block_size),
// at least 1, at most max_blocks (the grid-stride loop covers the rest).
// Errors name a non-positive block size or max_blocks, or a negative n.
absl::StatusOr<unsigned int> GridBlocks(int64_t n, int block_size, int64_t max_blocks);

class CudaKernel {
 public:
  // Loads `ptx` into device `device`'s primary context and finds `symbol`.
  // Without a usable driver and device: FailedPrecondition "no CUDA device:
  // <why>".
  static absl::StatusOr<std::unique_ptr<CudaKernel>> Load(const std::string& ptx,
                                                          const std::string& symbol,
                                                          int num_inputs, int num_outputs,
                                                          int num_scalars, int device = 0);
  ~CudaKernel();
  CudaKernel(const CudaKernel&) = delete;
  CudaKernel& operator=(const CudaKernel&) = delete;

  // Enqueues the kernel over [0, n) on `stream` (the caller passes torch's
  // current stream, at::cuda::getCurrentCUDAStream(); nullptr is the legacy
  // default stream). Buffers are device pointers. Asynchronous: an error in
  // the kernel itself shows at the stream's next synchronization.
  absl::Status Launch(int64_t n, const std::vector<const void*>& inputs,
                      const std::vector<void*>& outputs, const std::vector<double>& scalars,
                      CUstream stream, int block_size = 256) const;

 private:
  CudaKernel() = default;
  const CudaDriver* driver_ = nullptr;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  std::string symbol_;
  int num_inputs_ = 0, num_outputs_ = 0, num_scalars_ = 0;
};

}  // namespace metafuse::runtime
