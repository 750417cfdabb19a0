#include "compiler/fusion/scatter_into_zeros.h"

#include "compiler/ir/ir_helpers.h"
#include "compiler/ir/shape_facts.h"

namespace metafuse::compiler {

using torch::jit::Node;
namespace aten = torch::jit::aten;

namespace {

// aten::zeros(size, dtype, layout, device, pin_memory) with a constant size,
// dtype and device (what shape specialization makes of a zeros_like).
bool ConstantZeros(const Node* n) {
  if (n->kind() != aten::zeros || n->inputs().size() != 5) return false;
  for (int k : {0, 1, 3}) {
    auto value = torch::jit::toIValue(n->input(k));
    if (!value || value->isNone()) return false;
  }
  return true;
}

}  // namespace

int64_t ScatterIntoFreshZeros(const std::shared_ptr<torch::jit::Graph>& graph) {
  static const c10::Symbol kind = c10::Symbol::fromQualString("metafuse::scatter_add_into_zeros");
  int64_t rewritten = 0;
  for (auto it = graph->nodes().begin(); it != graph->nodes().end();) {
    Node* scatter = *it;
    ++it;
    if (scatter->kind() != aten::scatter_add || scatter->inputs().size() != 4) continue;
    Node* zeros = scatter->input(0)->node();
    if (!ConstantZeros(zeros) || scatter->input(0)->uses().size() != 1 ||
        !CompleteTensorType(scatter->output()) || !torch::jit::toIValue(scatter->input(1))) {
      continue;
    }
    torch::jit::WithInsertPoint guard(scatter);
    Node* fused = graph->create(kind,
                                {zeros->input(0), zeros->input(1), zeros->input(3),
                                 scatter->input(1), scatter->input(2), scatter->input(3)},
                                1);
    fused->insertBefore(scatter);
    fused->output()->setType(scatter->output()->type());
    scatter->output()->replaceAllUsesWith(fused->output());
    scatter->destroy();
    zeros->destroy();
    ++rewritten;
  }
  return rewritten;
}

}  // namespace metafuse::compiler
