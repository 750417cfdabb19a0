// The runtime operation of a fused-kernel instruction: its KernelCode
// loaded once per process (the process's kernel registry, then the on-disk
// kernel cache, then LLVM: jit_kernel.h) and launched once per segment of
// its LaunchPlan on the instruction's tensors. Outputs take the buffer of an
// input when buffer planning allowed it (LaunchPlan::reuse) and the input is
// uniquely owned at that moment (buffer_ownership.h); otherwise they are
// freshly allocated.
#pragma once

#include <cstdint>

#include <ATen/core/stack.h>

#include "runtime/program_code.h"

namespace metafuse::runtime {

struct FusedKernelStats {
  int64_t kernels_compiled = 0;     // LLVM ran
  int64_t kernels_from_disk = 0;    // object file from the disk cache
  int64_t kernels_from_memory = 0;  // already in this process
  int64_t kernels_from_artifact = 0;  // the program value's host object code
};

// Throws c10::Error naming the kernel if it cannot be loaded.
torch::jit::Operation MakeFusedKernelLaunch(const KernelCode& kernel, const LaunchPlan& plan);

// Loads every kernel of `code` into the process registry (throws c10::Error
// naming the first that does not compile).
void LoadKernels(const ProgramCode& code);

// The host object code of `code`'s kernel (loading or compiling it first).
std::string KernelObjectCode(const KernelCode& code);

// Process-wide counts, for tests and benchmarks.
FusedKernelStats GetFusedKernelStats();

}  // namespace metafuse::runtime
