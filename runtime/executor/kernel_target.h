// Which code of a fused kernel runs for tensors on a device, and why not
// when none can: the one decision between the host JIT path
// (runtime/jit/jit_kernel.h) and the CUDA path (runtime/cuda/cuda_fused_kernel.h).
// Pure functions of the kernel, the device and what this build has, so
// every branch is tested without a GPU.
#pragma once

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

enum class KernelTarget { kHost, kCuda };

// What this build can run fused kernels with.
struct KernelBackends {
  bool host = true;   // the LLVM JIT (always in the Bazel build)
  bool nvrtc = false;  // NVRTC linked: CUDA kernels can be compiled at run time
};

// This build's backends (nvrtc: compiled with METAFUSE_HAS_NVRTC).
KernelBackends BuiltKernelBackends();

// The target of `code` for tensors on `device`. Errors name the kernel, the
// device and what to do: a program compiled for the other kind of device
// (recompile for these inputs' device), a CUDA kernel in a build without
// NVRTC, a device metafuse has no kernels for.
absl::StatusOr<KernelTarget> KernelTargetFor(const KernelCode& code, c10::Device device,
                                             const KernelBackends& backends);

// Whether the compiler may fuse elementwise work on `device` in this build:
// CPU always, CUDA where NVRTC is linked, nothing else (those programs run
// unfused, operator by operator).
bool CanFuseOn(c10::Device device, const KernelBackends& backends);

// Whether compiled programs can take tensors on `device` at all: CPU and CUDA.
// The error names the device and what to do.
absl::Status CheckProgramDevice(c10::Device device);

}  // namespace metafuse::runtime
