#include "compiler/ir/topological_order.h"

#include <queue>
#include <unordered_map>
#include <vector>

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;

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

}  // namespace metafuse::compiler
