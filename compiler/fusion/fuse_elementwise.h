// Pass: vertical elementwise fusion.
//
// Runs on a shape-specialized graph (specialize_shapes.h). Walking from the
// end, each elementwise op the lowering handles (lower_fusion_group.h) seeds
// a group whose loop shape is its output shape; the group then absorbs the
// elementwise producers of its inputs, broadcasts (expand) included, as long
// as
//   - every tensor the producer reads broadcasts to the loop shape in a form
//     the kernel IR can read (element, scalar, inner, outer),
//   - a producer output used outside the group has the loop shape and a
//     float dtype (it becomes a group output), and all its outside users come
//     after the group (so the graph stays in topological order),
//   - a comparison's bool result is read only inside the group, by type_as or
//     where's condition.
// A reduction that follows (sum / mean / sum_to_size of a group value of
// the loop shape, float, on the CPU, to a result that broadcasts back as one
// of the kernel's access forms) no longer blocks a producer: the group takes
// it over as an epilogue when every reader of its result comes after the
// group, and sums as it runs (fusion_group.h), on loops of 8192 elements
// or more (below, a separate sum is as fast); a value only such reductions
// read is never written whole. This is how BatchNorm's many per-channel sums
// of a conv activation stop costing a pass over memory each.
// Groups of fewer than two computing ops (expand and constants-like ops do not
// count) are left as they are: one ATen call is as fast.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

struct FusionStats {
  int64_t groups = 0;
  int64_t fused_nodes = 0;
  int64_t reductions = 0;  // taken over as epilogues
};

// `fuse_reductions` false: reductions stay outside the groups (and block
// producers as any earlier reader does).
FusionStats FuseElementwise(const std::shared_ptr<torch::jit::Graph>& graph,
                            bool fuse_reductions = true);

}  // namespace metafuse::compiler
