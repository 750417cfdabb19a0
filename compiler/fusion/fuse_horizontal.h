// Pass: horizontal fusion.
//
// metafuse::FusionGroup nodes that lower to the same kernel (the same update
// applied to every parameter, whatever each parameter's size) are merged
// into one node with attr `segments` = k: one kernel, compiled once,
// launched over the k segments by one runtime instruction. Only groups that
// come before every reader of the others' outputs merge (so none depends on
// another), and the merged node takes the last one's place: no computation
// moves before or past a reader of its results (only the earlier members'
// inputs live on, until the merged launch).
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

struct HorizontalFusionStats {
  int64_t merged_nodes = 0;  // nodes created
  int64_t segments = 0;      // groups they absorbed
};

HorizontalFusionStats FuseHorizontally(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
