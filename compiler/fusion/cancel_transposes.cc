#include "compiler/fusion/cancel_transposes.h"

#include "compiler/ir/ir_helpers.h"
#include "compiler/ir/op_table.h"
#include "compiler/ir/shape_facts.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = torch::jit::aten;

namespace {

// The two dims aten::transpose `n` swaps, normalized and ordered, or
// {-1, -1} when `n` is not a transpose with constant dims of a known rank.
std::pair<int64_t, int64_t> SwappedDims(const Node* n) {
  auto type = n->kind() == aten::transpose ? CompleteTensorType(n->input(0)) : nullptr;
  const auto dims = type ? TransposedDims(n, static_cast<int64_t>(*type->dim())) : std::nullopt;
  if (!dims || dims->first == dims->second) return {-1, -1};
  return *dims;
}

// Arithmetic the fuser lowers (the result's dtype is its operands').
bool Arithmetic(const Node* n) {
  const PrimitiveOp* op = FindPrimitiveOp(n);
  if (!op || op->family != OpFamily::kElementwise) return false;
  switch (op->fuser_form) {
    case FuserForm::kUnary:
    case FuserForm::kBinary:
    case FuserForm::kBinaryAlpha:
    case FuserForm::kPowScalar:
      return true;
    default:
      return false;
  }
}

// Rewrites `n` when every tensor operand is a transpose of a dense tensor of
// the result's rank swapping `dims`, and every reader transposes it back.
bool Rewrite(torch::jit::Graph& graph, Node* n) {
  if (n->outputs().size() != 1 || !Arithmetic(n) || !n->output()->hasUses()) return false;
  auto out = CompleteTensorType(n->output());
  if (!out) return false;
  const int64_t rank = static_cast<int64_t>(*out->dim());
  std::pair<int64_t, int64_t> dims{-1, -1};
  std::vector<Value*> sources(n->inputs().begin(), n->inputs().end());
  bool any = false;
  for (size_t k = 0; k < sources.size(); ++k) {
    Value* v = sources[k];
    auto type = v->type()->cast<c10::TensorType>();
    if (!type) continue;  // a scalar operand
    auto swapped = SwappedDims(v->node());
    if (swapped.first < 0) return false;
    auto source = CompleteTensorType(v->node()->input(0));
    if (!source || static_cast<int64_t>(*source->dim()) != rank ||
        !RowMajorLayout(source) ||
        source->scalarType() != out->scalarType() || (any && swapped != dims)) {
      return false;
    }
    dims = swapped;
    any = true;
    sources[k] = v->node()->input(0);
  }
  if (!any) return false;
  for (const torch::jit::Use& use : n->output()->uses()) {
    if (SwappedDims(use.user) != dims || use.user->input(0) != n->output()) return false;
  }
  // Operands dense in their own layout make a dense result of the readers'
  // shape (which is the transposed result's shape).
  auto back = CompleteTensorType(n->output()->uses()[0].user->output());
  if (!back) return false;
  torch::jit::WithInsertPoint guard(n);
  Node* direct = graph.create(n->kind(), sources, 1);
  direct->insertBefore(n);
  direct->output()->setType(back->contiguous());
  for (const torch::jit::Use& use : n->output()->uses()) {
    use.user->output()->replaceAllUsesWith(direct->output());
  }
  return true;
}

// Transposes and the rewritten operations nothing reads any more (the graph
// may hold metafuse nodes, which a generic dead-code pass rejects).
void RemoveDead(torch::jit::Graph& graph) {
  for (auto it = graph.nodes().rbegin(); it != graph.nodes().rend();) {
    Node* n = *it;
    ++it;
    if ((n->kind() == aten::transpose || Arithmetic(n)) && n->outputs().size() == 1 &&
        !n->output()->hasUses()) {
      n->destroy();
    }
  }
}

}  // namespace

int64_t CancelTransposesAroundElementwise(const std::shared_ptr<torch::jit::Graph>& graph) {
  int64_t rewritten = 0;
  for (Node* n : graph->nodes()) {
    if (Rewrite(*graph, n)) ++rewritten;
  }
  if (rewritten > 0) RemoveDead(*graph);
  return rewritten;
}

}  // namespace metafuse::compiler
