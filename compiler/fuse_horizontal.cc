#include "compiler/fuse_horizontal.h"

#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "compiler/fusion_group.h"
#include "compiler/lower_fusion_group.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;

namespace {

// True if some node of `earlier` (all before `node`) is an ancestor of it.
bool DependsOnAny(Node* node, const std::unordered_set<Node*>& earlier, Node* earliest) {
  std::vector<Node*> stack = {node};
  std::unordered_set<Node*> seen;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (Value* in : n->inputs()) {
      Node* p = in->node();
      if (p->kind() == torch::jit::prim::Param || p->owningBlock() != node->owningBlock() ||
          p->isBefore(earliest) || !seen.insert(p).second) {
        continue;
      }
      if (earlier.count(p)) return true;
      stack.push_back(p);
    }
  }
  return false;
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
  // Placed after the last member, the merged node is already in order unless
  // an earlier member's output was read before that point.
  RestoreOrderAround(merged);
}

}  // namespace

void RestoreOrderAround(Node* node) {
  for (Value* out : node->outputs()) {
    for (const torch::jit::Use& use : out->uses()) {
      if (use.user->kind() != torch::jit::prim::Return && !use.user->isAfter(node)) {
        ReorderTopologically(node->owningBlock());
        return;
      }
    }
  }
}

void ReorderTopologically(torch::jit::Block* block) {
  std::vector<Node*> nodes(block->nodes().begin(), block->nodes().end());
  std::unordered_map<Node*, size_t> index, pending;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = i;
  for (Node* n : nodes) {
    size_t count = 0;
    for (Value* in : n->inputs()) count += index.count(in->node());
    pending[n] = count;
  }
  auto later = [&](Node* a, Node* b) { return index[a] > index[b]; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later)> ready(later);
  for (Node* n : nodes) {
    if (pending[n] == 0) ready.push(n);
  }
  std::vector<Node*> order;
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    order.push_back(n);
    for (Value* out : n->outputs()) {
      for (const torch::jit::Use& use : out->uses()) {
        auto it = pending.find(use.user);
        if (it != pending.end() && --it->second == 0) ready.push(use.user);
      }
    }
  }
  TORCH_CHECK(order.size() == nodes.size(), "ReorderTopologically: the block has a cycle");
  for (Node* n : order) n->moveBefore(block->return_node());
}

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
      if (groups.size() < 2) continue;
      std::vector<Node*> bucket = {groups[0]};
      std::unordered_set<Node*> members = {groups[0]};
      for (size_t k = 1; k < groups.size(); ++k) {
        if (DependsOnAny(groups[k], members, bucket[0])) continue;
        bucket.push_back(groups[k]);
        members.insert(groups[k]);
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
