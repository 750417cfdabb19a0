// Pass: buffer planning for fused kernels.
//
// The runtime already frees every intermediate after its last read
// (runtime/executor/program.h). This pass lets a fused kernel write an output into the
// buffer of an input that dies at that kernel instead of allocating: for each
// output of each metafuse::FusionGroup segment it records (attr `reuse`) one
// input that
//   - is read elementwise (same sizes and dtype as the output),
//   - is read for the last time by this node and is not a graph output,
//   - appears once among the node's inputs, and is claimed by no other output,
//   - is read (transitively) by every output of the kernel: the kernel's
//     buffers are noalias, so only a data dependence orders the load of
//     element i before the stores at element i; an output that does not
//     depend on the input could be stored first and clobber it.
// The claim is checked again at run time (runtime/compute/buffer_ownership.h), so a
// plan can never overwrite live data.
#pragma once

#include <memory>

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// Returns the number of outputs that may reuse an input buffer.
int64_t PlanBuffers(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
