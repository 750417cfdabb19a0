#include "compiler/decompose/lower_broadcast.h"

#include <vector>

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;

void LowerBroadcastTensors(const std::shared_ptr<torch::jit::Graph>& graph) {
  std::vector<Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  for (Node* node : nodes) {
    if (node->kind() != c10::Symbol::fromQualString("aten::broadcast_tensors")) continue;
    Node* list = node->input(0)->node();
    if (list->kind() != torch::jit::prim::ListConstruct) continue;
    // Only the common form: the result list is unpacked right away.
    if (node->output()->uses().size() != 1) continue;
    Node* unpack = node->output()->uses()[0].user;
    if (unpack->kind() != torch::jit::prim::ListUnpack ||
        unpack->outputs().size() != list->inputs().size()) {
      continue;
    }
    bool shapes_known = true;
    for (Value* out : unpack->outputs()) {
      auto type = out->type()->cast<c10::TensorType>();
      shapes_known = shapes_known && type && type->sizes().concrete_sizes();
    }
    if (!shapes_known) continue;
    torch::jit::WithInsertPoint guard(unpack);
    for (size_t i = 0; i < unpack->outputs().size(); ++i) {
      Value* out = unpack->output(i);
      auto sizes = *out->type()->cast<c10::TensorType>()->sizes().concrete_sizes();
      Value* expanded = graph->insert(c10::Symbol::fromQualString("aten::expand"),
                                      {list->input(i), graph->insertConstant(sizes)});
      expanded->setType(out->type());
      out->replaceAllUsesWith(expanded);
    }
    unpack->destroy();
    node->destroy();
  }
}

}  // namespace metafuse::compiler
