// The autodiff engine: reverse-mode accumulation over a graph, emitting the
// backward into the same graph. The rules live in rules_<family>.cc
// (derivative_rules.h); which ops need one is the op table's (op_table.h).
#include "compiler/autodiff/autodiff.h"

#include <unordered_map>
#include <unordered_set>

#include "compiler/autodiff/derivative_rules.h"
#include "compiler/ir/op_table.h"

namespace metafuse::compiler {

namespace rules {

const Rule* FindRule(const std::string& op) {
  static const auto* table = [] {
    auto* t = new RuleTable();
    AddElementwiseRules(*t);
    AddReductionRules(*t);
    AddShapeRules(*t);
    AddLinalgConvPoolRules(*t);
    AddOptimizerRules(*t);
    return t;
  }();
  auto it = table->find(op);
  return it == table->end() ? nullptr : &it->second;
}

}  // namespace rules

namespace {

using rules::Emit;
using rules::Grads;
using rules::Rule;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// Ops whose outputs carry no gradient (masks, shapes, fresh constants,
// anything with no tensor output such as integer arithmetic on sizes).
bool IsNonDifferentiable(const Node* n) {
  const PrimitiveOp* op = FindPrimitiveOp(n);
  if (op != nullptr && !op->differentiable &&
      n->kind() != torch::jit::prim::TupleConstruct &&
      n->kind() != torch::jit::prim::TupleUnpack && n->kind() != torch::jit::prim::ListUnpack) {
    return true;
  }
  // Scalars and lists of scalars only (sizes, flags): a tuple or list that
  // may hold tensors is not waved through (it has no rule: UnsupportedOp).
  auto scalar = [](const c10::TypePtr& t) {
    switch (t->kind()) {
      case c10::TypeKind::IntType:
      case c10::TypeKind::FloatType:
      case c10::TypeKind::BoolType:
      case c10::TypeKind::NoneType:
      case c10::TypeKind::StringType:
      case c10::TypeKind::DeviceObjType:
        return true;
      default:
        return false;
    }
  };
  for (const Value* out : n->outputs()) {
    const auto& type = out->type();
    auto list = type->cast<c10::ListType>();
    if (!scalar(type) && !(list && scalar(list->getElementType())))
      return false;
  }
  return true;
}

// Multi-output ops with a rule (the rule reads the cotangents it needs).
bool HasMultiOutputRule(const std::string& name) {
  return name == "aten::max_pool2d_with_indices" || name == "metafuse::adam";
}

}  // namespace

std::vector<Value*> AppendVjp(Graph& graph, const std::vector<Value*>& outputs,
                              const std::vector<Value*>& seeds,
                              const std::vector<Value*>& wrt) {
  TORCH_CHECK(outputs.size() == seeds.size(),
              "AppendVjp: one seed per output expected");
  // Values that depend on `wrt`: only those need gradients.
  std::unordered_set<const Value*> active(wrt.begin(), wrt.end());
  std::vector<Node*> order;
  for (Node* node : graph.nodes()) {
    bool depends = false;
    for (Value* in : node->inputs()) depends = depends || active.count(in);
    if (!depends) continue;
    // A list that carries a differentiated tensor must not silently stop the
    // gradient: only ops with a rule may consume such lists.
    if (node->kind() == torch::jit::prim::ListConstruct) {
      for (Value* use_site : node->outputs()) {
        for (const auto& use : use_site->uses()) {
          if (rules::FindRule(OpName(use.user)) == nullptr) {
            throw UnsupportedOp(OpName(use.user) +
                                " (a list of differentiated tensors)");
          }
        }
      }
    }
    if (IsNonDifferentiable(node)) continue;
    for (Value* out : node->outputs()) active.insert(out);
    order.push_back(node);
  }
  torch::jit::WithInsertPoint guard(graph.return_node());
  Emit e{graph};
  std::unordered_map<const Value*, Value*> grads;
  auto accumulate = [&](Value* v, Value* g) {
    auto it = grads.find(v);
    grads[v] = it == grads.end() ? g : e.add(it->second, g);
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (active.count(outputs[i])) accumulate(outputs[i], seeds[i]);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    Grads grad_outputs;
    bool any = false;
    for (Value* out : node->outputs()) {
      auto found = grads.find(out);
      grad_outputs.push_back(found == grads.end() ? nullptr : found->second);
      any = any || found != grads.end();
    }
    if (!any) continue;
    const std::string name = OpName(node);
    Grads input_grads;
    const Rule* rule = rules::FindRule(name);
    if (rule == nullptr) throw UnsupportedOp(name);
    if (node->outputs().size() != 1 && !HasMultiOutputRule(name)) throw UnsupportedOp(name);
    try {
      input_grads = (*rule)(e, node, grad_outputs);
    } catch (const c10::Error& error) {
      // An argument form the rule does not handle (its emitted call did
      // not match a schema): a named UnsupportedOp, so callers fall back.
      throw UnsupportedOp(name + " (" + error.what_without_backtrace() + ")");
    }
    for (size_t i = 0; i < input_grads.size() && i < node->inputs().size();
         ++i) {
      if (input_grads[i] != nullptr && active.count(node->input(i)) &&
          IsTensor(node->input(i))) {
        accumulate(node->input(i), input_grads[i]);
      }
    }
  }
  std::vector<Value*> result;
  for (Value* w : wrt) {
    auto found = grads.find(w);
    result.push_back(found != grads.end() ? found->second : e.zeros_like(w));
  }
  return result;
}

}  // namespace metafuse::compiler
