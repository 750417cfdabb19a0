#include "compiler/fuse_elementwise.h"
#include "compiler/ir_helpers.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

#include "compiler/fusion_group.h"
#include "compiler/lower_fusion_group.h"
#include "compiler/specialize_shapes.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = torch::jit::aten;

namespace {

// Later nodes first.
struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->isAfter(b); }
};

bool Computes(const Node* node) {
  return node->kind() != aten::expand && node->kind() != aten::zeros_like &&
         node->kind() != aten::ones_like;
}


class GroupBuilder {
 public:
  GroupBuilder(torch::jit::Graph* graph, Node* seed) : graph_(graph), anchor_(seed) {
    loop_ = *CompleteTensorType(seed->output())->sizes().concrete_sizes();
  }

  bool ReadsBroadcastable(const Node* node) const {
    for (const Value* in : node->inputs()) {
      if (!IsTensor(in)) continue;
      auto t = CompleteTensorType(in);
      if (!t || !ClassifyBroadcast(*t->sizes().concrete_sizes(), loop_)) return false;
    }
    auto out = CompleteTensorType(node->output());
    return ClassifyBroadcast(*out->sizes().concrete_sizes(), loop_).has_value();
  }

  // Grows the group from the seed; returns false if it stays trivial.
  bool Grow() {
    members_.insert(anchor_);
    std::set<Node*, LaterFirst> frontier;
    auto add_producers = [&](Node* member) {
      for (Value* in : member->inputs()) {
        Node* p = in->node();
        if (p->kind() != torch::jit::prim::Constant && p->kind() != torch::jit::prim::Param &&
            !members_.count(p) && p->owningBlock() == anchor_->owningBlock()) {
          frontier.insert(p);
        }
      }
    };
    add_producers(anchor_);
    while (!frontier.empty()) {
      Node* p = *frontier.begin();
      frontier.erase(frontier.begin());
      if (CanAbsorb(p)) {
        members_.insert(p);
        add_producers(p);
      } else if (CanDuplicate(p)) {
        members_.insert(p);
        duplicated_.insert(p);
        add_producers(p);
      }
    }
    // A bool tensor cannot enter a kernel: its comparison must be inside.
    for (Node* m : members_) {
      for (Value* in : m->inputs()) {
        auto t = IsTensor(in) ? CompleteTensorType(in) : nullptr;
        if (t && *t->scalarType() == at::kBool && !members_.count(in->node())) return false;
      }
    }
    int64_t computing = 0;
    for (Node* m : members_) computing += Computes(m) && !duplicated_.count(m) ? 1 : 0;
    return computing >= 2;
  }

  bool CanAbsorb(Node* p) const {
    if (!IsFusibleNode(p) || !ReadsBroadcastable(p)) return false;
    const Value* out = p->output();
    const bool is_bool = *CompleteTensorType(out)->scalarType() == at::kBool;
    for (const torch::jit::Use& use : out->uses()) {
      // A duplicated comparison stays outside for its other readers.
      if (members_.count(use.user) && !duplicated_.count(use.user)) {
        if (is_bool && !((use.user->kind() == aten::type_as || use.user->kind() == aten::where) &&
                         use.offset == 0)) {
          return false;
        }
        continue;
      }
      if (is_bool) return false;
      if (*CompleteTensorType(out)->sizes().concrete_sizes() != loop_) return false;
      if (use.user->kind() != torch::jit::prim::Return && !use.user->isAfter(anchor_)) {
        return false;
      }
    }
    return true;
  }

  // A comparison whose bool result is also read outside the group is
  // recomputed inside it (cheaper than carrying a bool tensor in).
  bool CanDuplicate(Node* p) const {
    if (!IsFusibleComparison(p) || !ReadsBroadcastable(p)) return false;
    bool read_inside = false;
    for (const torch::jit::Use& use : p->output()->uses()) {
      if (!members_.count(use.user)) continue;
      if (!((use.user->kind() == aten::type_as || use.user->kind() == aten::where) &&
            use.offset == 0)) {
        return false;
      }
      read_inside = true;
    }
    return read_inside;
  }

  // Replaces the members by one FusionGroup node at the anchor.
  void Materialize(std::unordered_set<Node*>* removed) {
    std::vector<Node*> ordered(members_.begin(), members_.end());
    std::sort(ordered.begin(), ordered.end(),
              [](const Node* a, const Node* b) { return b->isAfter(a); });
    auto sub = std::make_shared<torch::jit::Graph>();
    std::unordered_map<Value*, Value*> env;
    std::vector<Value*> inputs;
    for (Node* m : ordered) {
      for (Value* in : m->inputs()) {
        if (env.count(in)) continue;
        // Number and list constants live in the subgraph; a tensor constant
        // is a buffer like any other input.
        if (in->node()->kind() == torch::jit::prim::Constant && !IsTensor(in)) {
          Node* c = sub->createClone(in->node(), [](Value* v) { return v; });
          sub->appendNode(c);
          env[in] = c->output();
          continue;
        }
        Value* arg = sub->addInput()->copyMetadata(in);
        env[in] = arg;
        inputs.push_back(in);
      }
      Node* clone = sub->createClone(m, [&](Value* v) { return env.at(v); });
      sub->appendNode(clone);
      for (size_t k = 0; k < m->outputs().size(); ++k) env[m->output(k)] = clone->output(k);
    }
    std::vector<Value*> escaping;
    for (Node* m : ordered) {
      if (duplicated_.count(m)) continue;  // stays for its outside readers
      for (Value* out : m->outputs()) {
        for (const torch::jit::Use& use : out->uses()) {
          if (!members_.count(use.user) || duplicated_.count(use.user)) {
            escaping.push_back(out);
            break;
          }
        }
      }
    }
    for (Value* out : escaping) sub->registerOutput(env.at(out));
    Node* group = graph_->create(FusionGroupKind(), inputs, escaping.size());
    group->g_(torch::jit::attr::Subgraph, sub);
    group->insertBefore(anchor_);
    // Members reading a duplicated comparison are destroyed first, so only
    // its outside readers remain.
    for (size_t k = 0; k < escaping.size(); ++k) {
      group->output(k)->copyMetadata(escaping[k]);
      escaping[k]->replaceAllUsesWith(group->output(k));
    }
    for (auto it = ordered.rbegin(); it != ordered.rend(); ++it) {
      if (duplicated_.count(*it)) continue;
      removed->insert(*it);
      (*it)->destroy();
    }
  }

  size_t size() const { return members_.size(); }

 private:
  torch::jit::Graph* graph_;
  Node* anchor_;
  std::vector<int64_t> loop_;
  std::unordered_set<Node*> members_;
  std::unordered_set<Node*> duplicated_;
};

}  // namespace

FusionStats FuseElementwise(const std::shared_ptr<torch::jit::Graph>& graph) {
  FusionStats stats;
  std::vector<Node*> reversed;
  for (Node* node : graph->nodes()) reversed.push_back(node);
  std::reverse(reversed.begin(), reversed.end());
  std::unordered_set<Node*> removed;
  for (Node* node : reversed) {
    if (removed.count(node) || !IsFusibleNode(node)) continue;
    if (*CompleteTensorType(node->output())->scalarType() == at::kBool) continue;
    GroupBuilder builder(graph.get(), node);
    if (!builder.ReadsBroadcastable(node) || !builder.Grow()) continue;
    stats.groups += 1;
    stats.fused_nodes += static_cast<int64_t>(builder.size());
    builder.Materialize(&removed);
  }
  return stats;
}

}  // namespace metafuse::compiler
