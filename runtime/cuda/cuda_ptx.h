// A printed CUDA kernel (compiler/codegen/cuda_printer.h) -> PTX for one GPU
// architecture with NVRTC, through the kernel cache (runtime/base/kernel_cache.h).
// Needs the CUDA toolkit at build time (NVRTC) but no GPU.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/base/kernel_cache.h"

namespace metafuse::runtime {

// The NVRTC flags every printed kernel is compiled with, besides the
// architecture: --fmad=false keeps a*b+c as two roundings (NVRTC contracts
// it into an FMA by default), so results match kir::Interpret.
const std::vector<std::string>& KernelNvrtcFlags();

// What the CUDA printer produced for one kernel.
struct CudaKernelSource {
  std::string symbol;     // the __global__ entry, "mf_" + kernel name
  std::string kernel_ir;  // kir::Print(kernel): the cache key's IR
  std::string source;     // CUDA C++ (CudaPrelude() + PrintCudaKernel())
  std::string printer;    // the printer's version (kCudaPrinterVersion)
};

// The cache key: the kernel IR text (the cache stores it whole and names the
// file by its hash), target "compute_<cc> <flags>", versions "<printer> /
// nvrtc <major.minor>".
KernelKey PtxCacheKey(const CudaKernelSource& kernel, int compute_capability);

// Checks that `ptx` is PTX for compute_<cc> that defines `symbol`'s entry.
absl::Status VerifyPtx(const std::string& ptx, const std::string& symbol,
                       int compute_capability);

// PTX for `kernel` on compute_<compute_capability>. With a cache, a hit is
// verified (VerifyPtx) before it is used; one that fails is compiled again
// and replaced. `built` (if given) says whether NVRTC ran. Errors: an empty
// symbol or source (InvalidArgument), NVRTC's failure with its compile log.
absl::StatusOr<std::string> CompileKernelPtx(const CudaKernelSource& kernel,
                                             int compute_capability,
                                             KernelCache* cache = nullptr,
                                             bool* built = nullptr);

}  // namespace metafuse::runtime
