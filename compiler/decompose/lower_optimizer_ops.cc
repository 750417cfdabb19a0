#include "compiler/decompose/lower_optimizer_ops.h"
#include "compiler/ir/ir_helpers.h"

#include <unordered_set>
#include <vector>

#include "compiler/autodiff/autodiff.h"

namespace metafuse::compiler {
namespace {

using torch::jit::Node;
using torch::jit::Value;

bool DependsOnInputs(Value* v, std::unordered_set<Value*>& seen) {
  if (!seen.insert(v).second) return false;
  if (v->node()->kind() == torch::jit::prim::Param) return true;
  for (Value* in : v->node()->inputs()) {
    if (DependsOnInputs(in, seen)) return true;
  }
  return false;
}

}  // namespace

void LowerOptimizerOps(const std::shared_ptr<torch::jit::Graph>& graph) {
  std::vector<Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  for (Node* n : nodes) {
    const std::string kind = n->kind().toQualString();
    if (kind == "aten::item" || kind == "aten::_local_scalar_dense") {
      std::unordered_set<Value*> seen;
      if (DependsOnInputs(n->input(0), seen)) {
        throw UnsupportedOp(kind + " of a value that depends on the inputs");
      }
      continue;  // its users were folded on the host; DCE removes it
    }
    Value* replacement = nullptr;
    torch::jit::WithInsertPoint guard(n);
    if (kind == "aten::addcmul" || kind == "aten::addcdiv") {
      Value* prod = InsertOp(*graph, kind == "aten::addcmul" ? "aten::mul" : "aten::div",
                           {n->input(1), n->input(2)});
      replacement = InsertOp(*graph, "aten::add",
                           {n->input(0), InsertOp(*graph, "aten::mul", {prod, n->input(3)})});
    } else if (kind == "aten::full_like") {
      replacement = InsertOp(*graph, "aten::add",
                           {InsertOp(*graph, "aten::zeros_like", {n->input(0)}),
                            n->input(1)});
    }
    if (replacement == nullptr) continue;
    replacement->setType(n->output()->type());
    n->output()->replaceAllUsesWith(replacement);
    n->destroy();
  }
}

}  // namespace metafuse::compiler
