// The runtime operation of a fused-kernel instruction: its KernelCode
// loaded once per process through the selected host back end
// (host_backend.h: the process's kernel registry, then an artifact's code,
// the on-disk kernel cache, then LLVM or the system C++ compiler:
// jit_kernel.h, cpp_kernel_library.h) and launched once per segment of
// its LaunchPlan on the instruction's tensors. Outputs take the buffer of an
// input when buffer planning allowed it (LaunchPlan::reuse) and the input is
// uniquely owned at that moment (buffer_ownership.h); otherwise they are
// freshly allocated.
#pragma once

#include <cstdint>

#include <ATen/core/stack.h>

#include "runtime/base/kernel_cache.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

struct FusedKernelStats {
  int64_t kernels_compiled = 0;     // LLVM or the C++ compiler ran
  int64_t kernels_from_disk = 0;    // object file / shared object from the disk cache
  int64_t kernels_from_memory = 0;  // already in this process
  int64_t kernels_from_artifact = 0;  // the program value's host code
  // C++ back end: shared objects (one per program's missing kernels).
  int64_t libraries_compiled = 0, libraries_from_disk = 0, libraries_from_artifact = 0;
};

// Throws c10::Error naming the kernel if it cannot be loaded.
torch::jit::Operation MakeFusedKernelLaunch(const KernelCode& kernel, const LaunchPlan& plan);

// Loads every kernel of `code` into the process registry through the
// selected back end (throws c10::Error naming the first that does not
// compile). On the C++ back end the missing kernels make one shared object:
// `code.shared_object` when it carries one, else one compiler run.
void LoadKernels(const ProgramCode& code);

// The LLVM host object code of `code`'s kernel (loading or compiling it
// first, whichever back end is selected).
std::string KernelObjectCode(const KernelCode& code);

// Process-wide counts, for tests and benchmarks.
FusedKernelStats GetFusedKernelStats();

}  // namespace metafuse::runtime
