#include "compiler/fusion/merge_fusion_groups.h"

#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <c10/util/accumulate.h>

#include "compiler/ir/topological_order.h"
#include "compiler/fusion/fusion_group.h"
#include "compiler/ir/shape_facts.h"

namespace metafuse::compiler {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace {

constexpr int64_t kSmallestMergedLoop = 8192;  // as fuse_elementwise's reductions

const std::shared_ptr<Graph>& Sub(const Node* group) {
  return group->g(torch::jit::attr::Subgraph);
}

// The loop shape of a single-segment CPU group, or nothing.
c10::optional<std::vector<int64_t>> MergeableLoop(const Node* group) {
  if (group->kind() != FusionGroupKind() || group->hasAttribute(SegmentsAttr())) {
    return c10::nullopt;
  }
  auto type = CompleteTensorType(Sub(group)->outputs()[0]);
  if (!type || !type->device() || !type->device()->is_cpu()) return c10::nullopt;
  auto sizes = *type->sizes().concrete_sizes();
  if (c10::multiply_integers(sizes) < kSmallestMergedLoop) return c10::nullopt;
  return sizes;
}

// Whether `value` depends on `a` through nodes after `a`.
bool DependsOn(Value* value, Node* a) {
  std::vector<Node*> stack = {value->node()};
  std::unordered_set<Node*> seen;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n == a) return true;
    if (n->kind() == torch::jit::prim::Param || n->owningBlock() != a->owningBlock() ||
        n->isBefore(a) || !seen.insert(n).second) {
      continue;
    }
    for (Value* in : n->inputs()) stack.push_back(in->node());
  }
  return false;
}

bool CanMerge(Node* a, Node* b) {
  auto loop_a = MergeableLoop(a), loop_b = MergeableLoop(b);
  if (!loop_a || !loop_b || *loop_a != *loop_b) return false;
  const size_t a_outputs = Sub(a)->outputs().size();
  for (Value* in : b->inputs()) {
    if (in->node() == a) {
      if (in->offset() >= a_outputs) return false;  // one of A's sums
      continue;
    }
    if (DependsOn(in, a)) return false;
  }
  return true;
}

// A kernel output of the merged group: its value in the merged subgraph and
// the node output it replaces (null for a scratch output).
struct Output {
  Value* value;
  Value* replaces;
};

Node* Merge(Graph* graph, Node* a, Node* b) {
  auto sub = std::make_shared<Graph>();
  std::vector<Value*> inputs;
  std::unordered_map<Value*, Value*> input_of;  // outer value -> merged subgraph input
  auto input_for = [&](Value* outer, Value* like) {
    auto it = input_of.find(outer);
    if (it != input_of.end()) return it->second;
    Value* v = sub->addInput()->copyMetadata(like);
    inputs.push_back(outer);
    input_of[outer] = v;
    return v;
  };
  // Clones `group`'s subgraph; `bind` gives the merged value of its input i.
  auto clone = [&](Node* group, const std::function<Value*(size_t)>& bind) {
    std::unordered_map<Value*, Value*> env;
    const auto& g = Sub(group);
    for (size_t i = 0; i < g->inputs().size(); ++i) env[g->inputs()[i]] = bind(i);
    for (Node* n : g->nodes()) {
      Node* c = sub->createClone(n, [&](Value* v) { return env.at(v); });
      sub->appendNode(c);
      for (size_t k = 0; k < n->outputs().size(); ++k) env[n->output(k)] = c->output(k);
    }
    std::vector<Value*> outs;
    for (Value* o : g->outputs()) outs.push_back(env.at(o));
    return outs;
  };
  const std::vector<Value*> a_values =
      clone(a, [&](size_t i) { return input_for(a->input(i), Sub(a)->inputs()[i]); });
  const std::vector<Value*> b_values = clone(b, [&](size_t i) {
    Value* outer = b->input(i);
    return outer->node() == a ? a_values.at(outer->offset())
                              : input_for(outer, Sub(b)->inputs()[i]);
  });

  // Outputs: the ones read after the merge (whole), then the ones only sums read.
  std::vector<Output> whole, scratch;
  std::vector<int64_t> reduce;
  std::vector<double> scales;
  std::vector<Value*> sums;  // node outputs the merged sums replace
  std::vector<std::pair<bool, size_t>> placed_a(a_values.size()), placed_b(b_values.size());
  auto place = [&](Node* group, const std::vector<Value*>& values, Node* skip,
                   std::vector<std::pair<bool, size_t>>* placed) {
    std::vector<bool> summed(values.size(), false);
    const std::vector<int64_t> r = group->hasAttribute(ReduceAttr()) ? group->is(ReduceAttr())
                                                                      : std::vector<int64_t>{};
    for (size_t k = 0; k < r.size(); k += 4) summed[r[k]] = true;
    for (size_t k = 0; k < values.size(); ++k) {
      Value* outer = group->output(k);
      bool read_after = false;
      for (const torch::jit::Use& use : outer->uses()) read_after |= use.user != skip;
      if (read_after) {
        (*placed)[k] = {true, whole.size()};
        whole.push_back({values[k], outer});
      } else if (summed[k]) {
        (*placed)[k] = {false, scratch.size()};
        scratch.push_back({values[k], nullptr});
      }
    }
  };
  place(a, a_values, b, &placed_a);
  place(b, b_values, nullptr, &placed_b);
  auto add_sums = [&](Node* group, const std::vector<std::pair<bool, size_t>>& placed,
                      size_t kernel_outputs) {
    if (!group->hasAttribute(ReduceAttr())) return;
    const std::vector<int64_t> r = group->is(ReduceAttr());
    const std::vector<double> s = group->fs(ReduceScaleAttr());
    for (size_t k = 0; k < s.size(); ++k) {
      const auto [is_whole, index] = placed.at(r[4 * k]);
      const int64_t source = static_cast<int64_t>(is_whole ? index : whole.size() + index);
      reduce.insert(reduce.end(), {source, r[4 * k + 1], r[4 * k + 2], r[4 * k + 3]});
      scales.push_back(s[k]);
      sums.push_back(group->output(kernel_outputs + k));
    }
  };
  add_sums(a, placed_a, a_values.size());
  add_sums(b, placed_b, b_values.size());

  std::vector<Output> outputs = whole;
  outputs.insert(outputs.end(), scratch.begin(), scratch.end());
  for (const Output& o : outputs) sub->registerOutput(o.value);
  Node* merged = graph->create(FusionGroupKind(), inputs, outputs.size() + sums.size());
  merged->g_(torch::jit::attr::Subgraph, sub);
  if (!sums.empty()) {
    merged->is_(ReduceAttr(), reduce);
    merged->fs_(ReduceScaleAttr(), scales);
    merged->i_(ScratchAttr(), static_cast<int64_t>(scratch.size()));
  }
  merged->insertBefore(b);
  for (size_t k = 0; k < outputs.size(); ++k) {
    merged->output(k)->copyMetadata(outputs[k].replaces ? outputs[k].replaces : outputs[k].value);
    if (outputs[k].replaces) outputs[k].replaces->replaceAllUsesWith(merged->output(k));
  }
  for (size_t k = 0; k < sums.size(); ++k) {
    merged->output(outputs.size() + k)->copyMetadata(sums[k]);
    sums[k]->replaceAllUsesWith(merged->output(outputs.size() + k));
  }
  b->destroy();
  a->destroy();
  return merged;
}

}  // namespace

int64_t MergeFusionGroups(const std::shared_ptr<Graph>& graph) {
  int64_t merges = 0;
  for (Node* b = graph->nodes().front(); b != graph->return_node();) {
    Node* next = b->next();  // neither A nor B: it survives the merges below
    // The latest producer group first: a chain folds into its last group.
    while (MergeableLoop(b)) {
      Node* a = nullptr;
      for (Value* in : b->inputs()) {
        Node* p = in->node();
        if (p->kind() == FusionGroupKind() && (a == nullptr || p->isAfter(a))) a = p;
      }
      if (a == nullptr || !CanMerge(a, b)) break;
      b = Merge(graph.get(), a, b);
      ++merges;
      // Readers of A's outputs that sat between A and B now precede the
      // merged node: restore the order before the next dependence check.
      RestoreOrderAround(b);
    }
    b = next;
  }
  return merges;
}

}  // namespace metafuse::compiler
