#include "compiler/fusion/fuse_elementwise.h"
#include "compiler/ir/ir_helpers.h"

#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <c10/util/accumulate.h>

#include "compiler/fusion/fusion_group.h"
#include "compiler/lowering/lower_fusion_group.h"
#include "compiler/ir/shape_facts.h"

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


// A reduction the group can take over as it runs: sum / mean (over dims or
// all, no dtype argument) or sum_to_size of a float CPU value of the loop
// shape, whose kept-dims result broadcasts back to the loop as one of the
// kernel's input access forms (the launch sums element i where such an
// input would read it).
struct Epilogue {
  BroadcastAccess access;
  double scale = 1.0;  // 1 / count for a mean
};

// Below this many loop elements a separate sum reads its input from cache
// anyway, and a launch that sums (runtime/executor/reducing_launch.h) costs a little
// more than one that does not: tiny programs (an MLP's bias gradients) keep
// their reductions apart.
constexpr int64_t kSmallestReducingLoop = 8192;

std::optional<Epilogue> ReductionEpilogue(const Node* r, const std::vector<int64_t>& loop) {
  if (c10::multiply_integers(loop) < kSmallestReducingLoop) return std::nullopt;
  const bool sum = r->kind() == aten::sum, mean = r->kind() == aten::mean;
  if (!sum && !mean && r->kind() != aten::sum_to_size) return std::nullopt;
  if (r->outputs().size() != 1 || r->inputs().empty()) return std::nullopt;
  auto in = CompleteTensorType(r->input(0));
  auto out = CompleteTensorType(r->output());
  if (!in || !out || *in->sizes().concrete_sizes() != loop || !in->device() ||
      !in->device()->is_cpu() || in->scalarType() != out->scalarType() ||
      (*in->scalarType() != at::kFloat && *in->scalarType() != at::kDouble)) {
    return std::nullopt;
  }
  auto reduced = ReducedDims(r, static_cast<int64_t>(loop.size()));
  if (!reduced) return std::nullopt;
  std::vector<int64_t> kept = loop;  // the result's sizes with every loop dim kept
  for (size_t d = 0; d < loop.size(); ++d) {
    if ((*reduced)[d]) kept[d] = 1;
  }
  auto access = ClassifyBroadcast(kept, loop);
  if (!access || access->access == codegen::kir::Access::kElement) return std::nullopt;
  Epilogue e{*access, 1.0};
  if (mean) {
    const int64_t count = c10::multiply_integers(loop) / std::max<int64_t>(*out->numel(), 1);
    e.scale = 1.0 / static_cast<double>(count);
  }
  return e;
}

class GroupBuilder {
 public:
  GroupBuilder(torch::jit::Graph* graph, Node* seed, bool fuse_reductions)
      : graph_(graph), anchor_(seed), fuse_reductions_(fuse_reductions) {
    loop_ = *CompleteTensorType(seed->output())->sizes().concrete_sizes();
  }

  bool ReadsBroadcastable(const Node* node) const {
    for (const Value* in : node->inputs()) {
      if (!IsTensor(in)) continue;
      // type_as reads its second operand's dtype only (lower_fusion_group.h).
      if (node->kind() == aten::type_as && in == node->input(1)) continue;
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
    CollectEpilogues();
    int64_t computing = static_cast<int64_t>(epilogues_.size());
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
      if (use.offset == 0 && IsEpilogue(use.user)) continue;  // moves into the group
      if (use.user->kind() != torch::jit::prim::Return && !use.user->isAfter(anchor_)) {
        return false;
      }
    }
    return true;
  }

  // Whether `r` can run inside the group as it sums one of its values: a
  // reduction epilogue whose readers all come after the group.
  bool IsEpilogue(const Node* r) const {
    if (!fuse_reductions_ || !ReductionEpilogue(r, loop_)) return false;
    for (const torch::jit::Use& use : r->output()->uses()) {
      if (use.user->kind() != torch::jit::prim::Return && !use.user->isAfter(anchor_)) {
        return false;
      }
    }
    return true;
  }

  // The reductions of members' values that the group takes over, in graph
  // order of their sources.
  void CollectEpilogues() {
    std::vector<Node*> ordered(members_.begin(), members_.end());
    std::sort(ordered.begin(), ordered.end(),
              [](const Node* a, const Node* b) { return b->isAfter(a); });
    for (Node* m : ordered) {
      if (duplicated_.count(m)) continue;
      for (Value* out : m->outputs()) {
        for (const torch::jit::Use& use : out->uses()) {
          if (use.offset != 0 || members_.count(use.user) || !IsEpilogue(use.user)) continue;
          if (std::find(epilogues_.begin(), epilogues_.end(), use.user) == epilogues_.end()) {
            epilogues_.push_back(use.user);
          }
        }
      }
    }
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
    const auto is_epilogue = [&](const Node* n) {
      return std::find(epilogues_.begin(), epilogues_.end(), n) != epilogues_.end();
    };
    std::vector<Value*> escaping;
    for (Node* m : ordered) {
      if (duplicated_.count(m)) continue;  // stays for its outside readers
      for (Value* out : m->outputs()) {
        for (const torch::jit::Use& use : out->uses()) {
          if ((!members_.count(use.user) || duplicated_.count(use.user)) &&
              !is_epilogue(use.user)) {
            escaping.push_back(out);
            break;
          }
        }
      }
    }
    // Values only the epilogues read come last: the launch never keeps them whole.
    std::vector<Value*> outputs = escaping;
    std::vector<int64_t> reduce;
    std::vector<double> scales;
    for (Node* r : epilogues_) {
      Value* source = r->input(0);
      auto at = std::find(outputs.begin(), outputs.end(), source);
      if (at == outputs.end()) at = outputs.insert(outputs.end(), source);
      const Epilogue e = *ReductionEpilogue(r, loop_);
      reduce.insert(reduce.end(), {static_cast<int64_t>(at - outputs.begin()),
                                   static_cast<int64_t>(e.access.access), e.access.inner,
                                   e.access.mid});
      scales.push_back(e.scale);
    }
    for (Value* out : outputs) sub->registerOutput(env.at(out));
    Node* group = graph_->create(FusionGroupKind(), inputs, outputs.size() + epilogues_.size());
    group->g_(torch::jit::attr::Subgraph, sub);
    if (!epilogues_.empty()) {
      group->is_(ReduceAttr(), reduce);
      group->fs_(ReduceScaleAttr(), scales);
      group->i_(ScratchAttr(), static_cast<int64_t>(outputs.size() - escaping.size()));
    }
    group->insertBefore(anchor_);
    for (size_t k = 0; k < epilogues_.size(); ++k) {
      Value* reduced = group->output(outputs.size() + k);
      reduced->copyMetadata(epilogues_[k]->output());
      epilogues_[k]->output()->replaceAllUsesWith(reduced);
    }
    for (Node* r : epilogues_) {
      removed->insert(r);
      r->destroy();
    }
    // Members reading a duplicated comparison are destroyed first, so only
    // its outside readers remain.
    for (size_t k = 0; k < outputs.size(); ++k) {
      group->output(k)->copyMetadata(outputs[k]);
      outputs[k]->replaceAllUsesWith(group->output(k));
    }
    for (auto it = ordered.rbegin(); it != ordered.rend(); ++it) {
      if (duplicated_.count(*it)) continue;
      removed->insert(*it);
      (*it)->destroy();
    }
  }

  size_t size() const { return members_.size(); }
  int64_t epilogues() const { return static_cast<int64_t>(epilogues_.size()); }

 private:
  torch::jit::Graph* graph_;
  Node* anchor_;
  bool fuse_reductions_;
  std::vector<int64_t> loop_;
  std::unordered_set<Node*> members_;
  std::unordered_set<Node*> duplicated_;
  std::vector<Node*> epilogues_;  // reductions that run inside the group
};

}  // namespace

FusionStats FuseElementwise(const std::shared_ptr<torch::jit::Graph>& graph,
                            bool fuse_reductions) {
  FusionStats stats;
  std::vector<Node*> reversed;
  for (Node* node : graph->nodes()) reversed.push_back(node);
  std::reverse(reversed.begin(), reversed.end());
  std::unordered_set<Node*> removed;
  for (Node* node : reversed) {
    if (removed.count(node) || !IsFusibleNode(node)) continue;
    if (*CompleteTensorType(node->output())->scalarType() == at::kBool) continue;
    GroupBuilder builder(graph.get(), node, fuse_reductions);
    if (!builder.ReadsBroadcastable(node) || !builder.Grow()) continue;
    stats.groups += 1;
    stats.fused_nodes += static_cast<int64_t>(builder.size());
    stats.reductions += builder.epilogues();
    builder.Materialize(&removed);
  }
  return stats;
}

}  // namespace metafuse::compiler
