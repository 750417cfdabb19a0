#include "runtime/executor/kernel_target.h"

#include "absl/strings/str_cat.h"

namespace metafuse::runtime {

KernelBackends BuiltKernelBackends() {
  KernelBackends b;
#ifdef METAFUSE_HAS_NVRTC
  b.nvrtc = true;
#endif
  return b;
}

absl::StatusOr<KernelTarget> KernelTargetFor(const KernelCode& code, c10::Device device,
                                             const KernelBackends& backends) {
  const std::string where = absl::StrCat("fused kernel ", code.name, " on ", device.str());
  if (device.is_cpu()) {
    if (code.llvm_ir.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": the program was compiled for CUDA tensors (the kernel has only CUDA code); "
                 "call it with tensors on the device it was compiled for, or compile it again "
                 "for CPU inputs"));
    }
    if (!backends.host) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": this build has no host kernel compiler"));
    }
    return KernelTarget::kHost;
  }
  if (device.is_cuda()) {
    if (code.cuda_source.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": the program was compiled for CPU tensors (the kernel has no CUDA code); "
                 "compile it again for CUDA inputs (the compiled function does so when "
                 "called with them), or move the inputs to the CPU"));
    }
    if (!backends.nvrtc) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": this metafuse build has no NVRTC, so it cannot compile CUDA kernels; "
                 "rebuild it with the CUDA toolkit (CUDA_PATH, or pip install "
                 "--no-build-isolation . against a CUDA torch)"));
    }
    return KernelTarget::kCuda;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": metafuse runs fused kernels on CPU and CUDA tensors only; move the inputs "
             "with .to('cpu') or .to('cuda')"));
}

bool CanFuseOn(c10::Device device, const KernelBackends& backends) {
  if (device.is_cpu()) return backends.host;
  if (device.is_cuda()) return backends.nvrtc;
  return false;
}

absl::Status CheckProgramDevice(c10::Device device) {
  if (device.is_cpu() || device.is_cuda()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "metafuse compiles programs for CPU and CUDA tensors; got a tensor on ", device.str(),
      ": move the inputs with .to('cpu') or .to('cuda'), or call the function eagerly"));
}

}  // namespace metafuse::runtime
