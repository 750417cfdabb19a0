#include "compiler/fusion/broadcast_expanded_operands.h"

#include <vector>

#include <ATen/ExpandUtils.h>

#include "compiler/ir/op_table.h"
#include "compiler/ir/shape_facts.h"

namespace metafuse::compiler {
namespace {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = torch::jit::aten;

// add / sub / mul / div / where / comparisons: every tensor operand
// broadcasts to the result.
bool BroadcastsEveryOperand(const Node* n) {
  const PrimitiveOp* op = FindPrimitiveOp(n);
  if (op == nullptr || op->family != OpFamily::kElementwise) return false;
  switch (op->fuser_form) {
    case FuserForm::kBinary:
    case FuserForm::kBinaryAlpha:
    case FuserForm::kWhere:
    case FuserForm::kCompare:
      return true;
    default:
      return false;
  }
}

// Whether `user`, reading `source` as its operand `index`, still makes its
// result's shape, with every tensor operand of `source`'s dtype.
bool SameResultReading(const Node* user, size_t index, const c10::TensorTypePtr& source) {
  auto out = CompleteTensorType(user->output());
  if (!out || user->outputs().size() != 1) return false;
  std::vector<int64_t> shape;  // the broadcast of the operands, `source` in place
  for (size_t i = 0; i < user->inputs().size(); ++i) {
    const Value* v = user->input(i);
    if (!v->type()->cast<c10::TensorType>()) continue;
    auto t = i == index ? source : CompleteTensorType(v);
    if (!t || t->scalarType() != source->scalarType()) return false;
    shape = at::infer_size(shape, *t->sizes().concrete_sizes());
  }
  return shape == *out->sizes().concrete_sizes();
}

}  // namespace

int64_t BroadcastExpandedOperands(const std::shared_ptr<torch::jit::Graph>& graph) {
  int64_t rewired = 0;
  for (auto it = graph->nodes().begin(); it != graph->nodes().end();) {
    Node* expand = *it;
    ++it;  // before `expand` may be destroyed
    if (expand->kind() != aten::expand) continue;
    Value* source = expand->input(0);
    auto source_type = CompleteTensorType(source);
    if (!source_type || !CompleteTensorType(expand->output())) continue;
    // Copied: rewiring edits the use list.
    const std::vector<torch::jit::Use> uses = expand->output()->uses();
    for (const torch::jit::Use& use : uses) {
      if (!BroadcastsEveryOperand(use.user) ||
          !SameResultReading(use.user, use.offset, source_type)) {
        continue;
      }
      use.user->replaceInput(use.offset, source);
      ++rewired;
    }
    // An expansion nothing reads any more would still run as an
    // instruction (the graph holds metafuse nodes, so no generic dead-code
    // pass runs after this one).
    if (!uses.empty() && !expand->output()->hasUses()) expand->destroy();
  }
  return rewired;
}

}  // namespace metafuse::compiler
