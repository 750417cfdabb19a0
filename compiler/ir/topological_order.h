// Restoring a valid node order after a pass moved or replaced nodes.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// Reorders the nodes of `block` topologically, keeping the current order
// wherever it is already valid. The block must be acyclic.
void ReorderTopologically(torch::jit::Block* block);

// Reorders `node`'s block (as above) if some reader of its outputs comes
// before it: a node that replaced others later in the block.
void RestoreOrderAround(torch::jit::Node* node);

}  // namespace metafuse::compiler
