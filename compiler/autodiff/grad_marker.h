// metafuse::grad(Tensor output, Tensor[] inputs) -> Tensor[]
//
// Eagerly it is torch.autograd.grad(output, inputs, create_graph=True) with
// zeros for unused inputs (metafuse.grad in Python). Under the TorchScript
// tracer it is recorded as one node, a marker: ExpandGradMarkers replaces
// each marker by the symbolic gradient (AppendVjp) at that point of the
// program. This is how a user function that writes its own inner loop
// (metafuse.compile) gets its gradients compiled.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// Rebuilds `graph` in place with every metafuse::grad node expanded.
void ExpandGradMarkers(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
