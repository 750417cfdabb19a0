#include "runtime/cuda/cuda_fused_kernel.h"

#include <atomic>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/cuda_stream.h"

#ifdef METAFUSE_HAS_NVRTC
#include "runtime/cuda/cuda_ptx.h"
#endif

namespace metafuse::runtime {
namespace {

std::atomic<int64_t> compiled_count{0}, disk_count{0}, launch_count{0};

#ifdef METAFUSE_HAS_NVRTC
// PTX for `code` on compute_<cc>: from the cache when it holds a verified
// entry, else NVRTC.
absl::StatusOr<std::string> Ptx(const KernelCode& code, int cc, KernelCache* cache) {
  CudaKernelSource source;
  source.symbol = "mf_" + code.name;
  source.kernel_ir = code.kernel_ir;
  source.source = code.cuda_source;
  // The source's hash stands for the printer's version: any change to the
  // printed code is another cache entry.
  source.printer = absl::StrCat("cuda source ", std::hash<std::string>{}(code.cuda_source));
  bool built = false;
  auto ptx = CompileKernelPtx(source, cc, cache, &built);
  if (ptx.ok()) ++(built ? compiled_count : disk_count);
  return ptx;
}
#endif

}  // namespace

CudaFusedKernel::CudaFusedKernel(KernelCode code, KernelCache* cache)
    : code_(std::move(code)), cache_(cache) {}

CudaFusedKernel::Stats CudaFusedKernel::GetStats() {
  return {compiled_count.load(), disk_count.load(), launch_count.load()};
}

absl::StatusOr<const CudaKernel*> CudaFusedKernel::Loaded(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = loaded_.find(device); it != loaded_.end()) return it->second.get();
#ifdef METAFUSE_HAS_NVRTC
  auto driver = CudaDriver::Load();
  if (!driver.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device: ", driver.status().message()));
  }
  auto cc = ComputeCapability(**driver, device);
  if (!cc.ok()) return cc.status();
  auto ptx = Ptx(code_, *cc, cache_);
  if (!ptx.ok()) {
    return absl::Status(ptx.status().code(),
                        absl::StrCat("NVRTC could not compile fused kernel ", code_.name,
                                     " for sm_", *cc, ": ", ptx.status().message()));
  }
  auto kernel = CudaKernel::Load(*ptx, "mf_" + code_.name,
                                 static_cast<int>(code_.input_dtypes.size()),
                                 static_cast<int>(code_.output_dtypes.size()),
                                 static_cast<int>(code_.num_scalars), device);
  if (!kernel.ok()) return kernel.status();
  const CudaKernel* raw = kernel->get();
  loaded_.emplace(device, *std::move(kernel));
  return raw;
#else
  (void)cache_;
  return absl::FailedPreconditionError(absl::StrCat(
      "fused kernel ", code_.name, " on cuda:", device,
      ": this metafuse build has no NVRTC; rebuild it with the CUDA toolkit"));
#endif
}

absl::Status CudaFusedKernel::Launch(c10::Device device, int64_t n, const void* const* inputs,
                                     void* const* outputs, const double* scalars) const {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat("fused kernel ", code_.name,
                                                   ": expected a CUDA device, got ",
                                                   device.str()));
  }
  auto kernel = Loaded(device.index());
  if (!kernel.ok()) return kernel.status();
  auto stream = CurrentCudaStream(device);
  if (!stream.ok()) return stream.status();
  const size_t ni = code_.input_dtypes.size(), no = code_.output_dtypes.size();
  const size_t ns = static_cast<size_t>(code_.num_scalars);
  ++launch_count;
  return (*kernel)->Launch(n, std::vector<const void*>(inputs, inputs + ni),
                           std::vector<void*>(outputs, outputs + no),
                           std::vector<double>(scalars, scalars + ns), *stream);
}

}  // namespace metafuse::runtime
