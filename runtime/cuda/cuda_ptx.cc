#include "runtime/cuda/cuda_ptx.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/cuda/nvrtc_compiler.h"

namespace metafuse::runtime {

const std::vector<std::string>& KernelNvrtcFlags() {
  static const std::vector<std::string>* flags = new std::vector<std::string>{"--fmad=false"};
  return *flags;
}

KernelKey PtxCacheKey(const CudaKernelSource& kernel, int compute_capability) {
  KernelKey key;
  key.ir = kernel.kernel_ir;
  key.target = absl::StrCat("compute_", compute_capability, " ",
                            absl::StrJoin(KernelNvrtcFlags(), " "));
  key.versions = absl::StrCat(kernel.printer, " / nvrtc ", NvrtcVersion());
  return key;
}

absl::Status VerifyPtx(const std::string& ptx, const std::string& symbol,
                       int compute_capability) {
  const std::string target = absl::StrCat(".target sm_", compute_capability);
  const std::string entry = absl::StrCat(".entry ", symbol, "(");
  if (ptx.find(".version ") == std::string::npos ||
      ptx.find(target) == std::string::npos || ptx.find(entry) == std::string::npos) {
    return absl::DataLossError(absl::StrCat(
        "not PTX for ", symbol, " on sm_", compute_capability, ": expected '", target,
        "' and '", entry, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CompileKernelPtx(const CudaKernelSource& kernel,
                                             int compute_capability, KernelCache* cache,
                                             bool* built) {
  if (built != nullptr) *built = false;
  if (kernel.symbol.empty() || kernel.source.empty()) {
    return absl::InvalidArgumentError(
        "CudaKernelSource needs a symbol and a CUDA source (from the CUDA printer)");
  }
  auto compile = [&]() -> absl::StatusOr<std::string> {
    if (built != nullptr) *built = true;
    NvrtcOptions options;
    options.compute_capability = compute_capability;
    options.extra_flags = KernelNvrtcFlags();
    auto ptx = CompileCudaToPtx(kernel.symbol + ".cu", kernel.source, options);
    if (!ptx.ok()) return ptx.status();
    if (absl::Status s = VerifyPtx(*ptx, kernel.symbol, compute_capability); !s.ok()) {
      return absl::InternalError(absl::StrCat("NVRTC's output: ", s.message()));
    }
    return ptx;
  };
  if (cache == nullptr) return compile();
  const KernelKey key = PtxCacheKey(kernel, compute_capability);
  if (std::optional<std::string> hit = cache->Lookup(key);
      hit.has_value() && VerifyPtx(*hit, kernel.symbol, compute_capability).ok()) {
    return *std::move(hit);
  }
  auto ptx = compile();
  if (!ptx.ok()) return ptx.status();
  if (absl::Status s = cache->Store(key, *ptx); !s.ok()) return s;
  return ptx;
}

}  // namespace metafuse::runtime
