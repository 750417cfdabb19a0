#include "compiler/specialize/rematerialize.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include <c10/util/accumulate.h>

#include "compiler/lowering/lower_fusion_group.h"
#include "compiler/ir/shape_facts.h"

namespace metafuse::compiler {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace {
constexpr int64_t kSmallSavedElements = 4096, kSmallSavedRatio = 64;
}  // namespace

int64_t Rematerialize(Graph& forward, Graph& backward, int64_t num_outputs) {
  std::unordered_map<const Value*, int64_t> saved_index;  // forward value -> saved slot
  auto num_saved = [&] { return static_cast<int64_t>(forward.outputs().size()) - num_outputs; };
  for (int64_t i = 0; i < num_saved(); ++i) {
    saved_index.emplace(forward.outputs()[num_outputs + i], i);
  }
  std::unordered_set<const Value*> results(forward.outputs().begin(),
                                           forward.outputs().begin() + num_outputs);
  std::unordered_set<const Value*> forward_inputs(forward.inputs().begin(),
                                                  forward.inputs().end());
  std::vector<bool> dropped;
  int64_t count = 0;
  // The backward value standing for forward value `u` (saving it if it is a
  // forward input not saved yet: free, the caller holds it).
  auto backward_value = [&](Value* u) -> Value* {
    auto it = saved_index.find(u);
    if (it == saved_index.end()) {
      const int64_t slot = num_saved();
      forward.registerOutput(u);
      backward.insertInput(slot)->copyMetadata(u);
      it = saved_index.emplace(u, slot).first;
    }
    return backward.inputs()[it->second];
  };
  // A forward input or saved tensor with the dtype of `u` (what type_as
  // needs of its second operand), or nullptr.
  auto DtypeSource = [&](Value* u) -> Value* {
    auto want = CompleteTensorType(u);
    if (!want) return nullptr;
    for (Value* c : forward.inputs()) {
      auto t = CompleteTensorType(c);
      if (t && t->scalarType() == want->scalarType()) return c;
    }
    return nullptr;
  };
  // A tensor small beside `self` (a BatchNorm's per-channel shift beside
  // its activation) is saved for the recomputation: a few bytes against
  // the whole buffer of `self`.
  auto SmallBeside = [](Value* u, Value* self) {
    auto small = CompleteTensorType(u), large = CompleteTensorType(self);
    if (!small || !large) return false;
    const int64_t n = c10::multiply_integers(*small->sizes().concrete_sizes());
    const int64_t m = c10::multiply_integers(*large->sizes().concrete_sizes());
    return n <= kSmallSavedElements && n * kSmallSavedRatio <= m;
  };
  // Whether `u` is available to the backward (a constant, a forward input,
  // another saved value) or can be recomputed from available values by at
  // most `budget` elementwise ops; `chain` collects those ops.
  std::function<bool(Value*, Value*, int, std::vector<Node*>*)> reachable =
      [&](Value* u, Value* self, int budget, std::vector<Node*>* chain) {
        if (u->node()->kind() == torch::jit::prim::Constant || forward_inputs.count(u) ||
            (saved_index.count(u) && u != self) || SmallBeside(u, self)) {
          return true;
        }
        Node* q = u->node();
        // Elementwise ops, and transposes (views: recomputing one is free).
        const bool view = q->kind() == torch::jit::aten::t ||
                          q->kind() == torch::jit::aten::transpose;
        if (budget == 0 || q->outputs().size() != 1 || !(view || IsFusibleNode(q))) {
          return false;
        }
        for (size_t k = 0; k < q->inputs().size(); ++k) {
          // type_as reads only the dtype of its second operand.
          if (q->kind() == torch::jit::aten::type_as && k == 1) {
            if (!DtypeSource(q->input(1))) return false;
            continue;
          }
          if (!reachable(q->input(k), self, budget - 1, chain)) return false;
        }
        if (std::find(chain->begin(), chain->end(), q) == chain->end()) chain->push_back(q);
        return true;
      };
  constexpr int kMaxRecomputedOps = 4;
  std::vector<Node*> recomputed;
  for (int64_t i = 0; i < num_saved(); ++i) {
    Value* v = forward.outputs()[num_outputs + i];
    std::vector<Node*> chain;  // producers first
    if (results.count(v) || forward_inputs.count(v) ||
        !reachable(v, v, kMaxRecomputedOps, &chain) || chain.empty()) {
      continue;
    }
    // At the very start: a later recomputation may replace a backward input
    // that an earlier one reads (each reads only inputs and constants).
    torch::jit::WithInsertPoint at_start(backward.nodes().front());
    std::unordered_map<Value*, Value*> env;
    auto mapped = [&](Value* u) -> Value* {
      if (auto it = env.find(u); it != env.end()) return it->second;
      if (u->node()->kind() == torch::jit::prim::Constant) {
        Node* c = backward.createClone(u->node(), [](Value* x) { return x; });
        backward.insertNode(c);
        return env[u] = c->output();
      }
      return env[u] = backward_value(u);
    };
    for (Node* q : chain) {
      for (size_t k = 0; k < q->inputs().size(); ++k) {
        Value* u = q->input(k);
        if (q->kind() == torch::jit::aten::type_as && k == 1) {
          if (!env.count(u)) env[u] = backward_value(DtypeSource(u));
        } else {
          mapped(u);
        }
      }
      Node* clone = backward.createClone(q, [&](Value* x) { return env.at(x); });
      backward.insertNode(clone);
      recomputed.push_back(clone);
      clone->output()->copyMetadata(q->output());
      env[q->output()] = clone->output();
    }
    backward.inputs()[i]->replaceAllUsesWith(env.at(v));
    ++count;
  }
  // Each recomputation moves down to just before its first reader, so its
  // buffer lives only as long as it is needed (readers first: moving a node
  // later never passes its inputs).
  std::unordered_set<Node*> moved(recomputed.begin(), recomputed.end());
  std::vector<Node*> order;
  for (Node* n : backward.nodes()) {
    if (moved.count(n)) order.push_back(n);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    Node* first_reader = nullptr;
    for (const torch::jit::Use& use : n->output()->uses()) {
      if (use.user->kind() == torch::jit::prim::Return) continue;
      if (first_reader == nullptr || use.user->isBefore(first_reader)) first_reader = use.user;
    }
    if (first_reader != nullptr && first_reader->isAfter(n)) n->moveBefore(first_reader);
  }
  // Drop the slots nothing reads any more, last first.
  for (int64_t i = num_saved() - 1; i >= 0; --i) {
    if (backward.inputs()[i]->hasUses()) continue;
    backward.eraseInput(i);
    forward.eraseOutput(num_outputs + i);
  }
  return count;
}


}  // namespace metafuse::compiler
