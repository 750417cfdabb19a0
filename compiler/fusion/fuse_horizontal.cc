#include "compiler/fusion/fuse_horizontal.h"

#include <map>
#include <unordered_map>

#include "compiler/fusion/fusion_group.h"
#include "compiler/lowering/lower_fusion_group.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;

namespace {

// The first node that reads one of `node`'s outputs (nullptr: none but the
// return).
Node* FirstReader(Node* node) {
  Node* first = nullptr;
  for (Value* out : node->outputs()) {
    for (const torch::jit::Use& use : out->uses()) {
      if (use.user->kind() == torch::jit::prim::Return) continue;
      if (first == nullptr || use.user->isBefore(first)) first = use.user;
    }
  }
  return first;
}

void Merge(torch::jit::Graph* graph, const std::vector<Node*>& bucket) {
  std::vector<Value*> inputs;
  size_t num_outputs = 0;
  for (Node* g : bucket) {
    inputs.insert(inputs.end(), g->inputs().begin(), g->inputs().end());
    num_outputs += g->outputs().size();
  }
  Node* merged = graph->create(FusionGroupKind(), inputs, num_outputs);
  merged->g_(torch::jit::attr::Subgraph, bucket[0]->g(torch::jit::attr::Subgraph));
  merged->i_(SegmentsAttr(), static_cast<int64_t>(bucket.size()));
  merged->insertAfter(bucket.back());
  size_t k = 0;
  for (Node* g : bucket) {
    for (Value* out : g->outputs()) {
      merged->output(k)->copyMetadata(out);
      out->replaceAllUsesWith(merged->output(k++));
    }
  }
  for (Node* g : bucket) g->destroy();
  // After the last member and before every reader (the bucket's rule).
  for (Value* out : merged->outputs()) {
    for (const torch::jit::Use& use : out->uses()) {
      TORCH_CHECK(use.user->kind() == torch::jit::prim::Return || use.user->isAfter(merged),
                  "FuseHorizontally: a merged group's output is read before it");
    }
  }
}

}  // namespace

HorizontalFusionStats FuseHorizontally(const std::shared_ptr<torch::jit::Graph>& graph) {
  HorizontalFusionStats stats;
  std::unordered_map<Node*, std::string> kernel_of;  // lowered once per group
  for (bool merged = true; merged;) {
    merged = false;
    std::map<std::string, std::vector<Node*>> by_kernel;  // in graph order
    for (Node* node : graph->nodes()) {
      // A group that sums as it runs launches alone (its reductions are per group).
      if (node->kind() != FusionGroupKind() || node->hasAttribute(SegmentsAttr()) ||
          node->hasAttribute(ReduceAttr())) {
        continue;
      }
      auto it = kernel_of.find(node);
      if (it == kernel_of.end()) {
        auto plan = LowerFusionGroup(node);
        it = kernel_of.emplace(node, plan.ok() ? codegen::kir::Print(plan->kernel) : "").first;
      }
      if (!it->second.empty()) by_kernel[it->second].push_back(node);
    }
    for (auto& [text, groups] : by_kernel) {
      // A bucket takes the next group of its kernel while nothing has read a
      // member's output yet: the merged node, after its last member, then
      // comes before every reader. Merging across a reader would move
      // computation past it, and every later member's output would be
      // computed early and live until its own readers (the GRU's
      // meta-backward: one kernel per time step merged into one launch at
      // the first step held them all at once, +50% peak memory).
      std::vector<Node*> bucket;
      for (size_t k = 0; k < groups.size() && bucket.size() < 2; ++k) {
        bucket = {groups[k]};
        Node* first_reader = FirstReader(groups[k]);
        for (size_t j = k + 1; j < groups.size(); ++j) {
          if (first_reader != nullptr && !groups[j]->isBefore(first_reader)) break;
          bucket.push_back(groups[j]);
          Node* reader = FirstReader(groups[j]);
          if (first_reader == nullptr || (reader != nullptr && reader->isBefore(first_reader))) {
            first_reader = reader;
          }
        }
      }
      if (bucket.size() < 2) continue;
      for (Node* g : bucket) kernel_of.erase(g);  // destroyed by the merge
      Merge(graph.get(), bucket);
      stats.merged_nodes += 1;
      stats.segments += static_cast<int64_t>(bucket.size());
      merged = true;
      break;
    }
  }
  return stats;
}

}  // namespace metafuse::compiler
