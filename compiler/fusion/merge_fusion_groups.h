// Pass: merging a fusion group into the group that reads it.
//
// Vertical fusion (fuse_elementwise.h) grows a group from its last op
// through producers only, so work that merely sits beside the group's
// inputs (BatchNorm's backward: a mask, then several values each summed per
// channel) ends up in a chain of groups over the same loop, each reading
// the previous one's outputs back from memory. This pass merges such a
// producer group A into its consumer group B (one kernel, placed at B)
// when
//   - both loop over the same shape, on the CPU, with at least 8192
//     elements (where the memory traffic matters; small programs keep their
//     groups, and so their horizontal fusion),
//   - B does not read a sum A takes (it must be complete before B's loop),
//   - nothing B reads depends on A other than through A's outputs directly
//     (the merged node must not feed itself).
// An output of A that only B read becomes internal (or a scratch output if
// one of A's sums reads it); readers of A's outputs between A and B move
// after the merged node.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// Returns the number of merges.
int64_t MergeFusionGroups(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
