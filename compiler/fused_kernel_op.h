// The runtime operation of a metafuse::FusionGroup node: its kernel
// (lower_fusion_group.h) compiled by LLVM (runtime/llvm_codegen.h), looked up
// in the process's kernel registry and the on-disk kernel cache first, and
// launched once per segment on the node's tensors. Outputs take the buffer
// of an input when buffer planning allowed it (attr `reuse`) and the input
// is uniquely owned at that moment; otherwise they are freshly allocated.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

namespace metafuse::compiler {

struct FusedKernelStats {
  int64_t kernels_compiled = 0;     // LLVM ran
  int64_t kernels_from_disk = 0;    // object file from the disk cache
  int64_t kernels_from_memory = 0;  // already in this process
};

// Throws c10::Error (naming the node) if the group cannot be lowered or
// compiled.
torch::jit::Operation MakeFusedKernelOperation(torch::jit::Node* group);

// Process-wide counts, for tests and benchmarks.
FusedKernelStats GetFusedKernelStats();

}  // namespace metafuse::compiler
