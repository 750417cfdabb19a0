// Pass: horizontal fusion.
//
// metafuse::FusionGroup nodes that lower to the same kernel (the same update
// applied to every parameter, whatever each parameter's size) and do not
// depend on one another are merged into one node with attr `segments` = k:
// one kernel, compiled once, launched over the k segments by one runtime
// instruction. The block is then put back in topological order.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

struct HorizontalFusionStats {
  int64_t merged_nodes = 0;    // nodes created
  int64_t segments = 0;        // groups they absorbed
};

HorizontalFusionStats FuseHorizontally(const std::shared_ptr<torch::jit::Graph>& graph);

// Reorders the nodes of `block` topologically, keeping the current order
// wherever it is already valid. The block must be acyclic.
void ReorderTopologically(torch::jit::Block* block);

// Reorders `node`'s block (as above) if some reader of its outputs comes
// before it: a node that replaced others later in the block.
void RestoreOrderAround(torch::jit::Node* node);

}  // namespace metafuse::compiler
