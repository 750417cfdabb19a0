#include "compiler/fusion/rank_one_products.h"

#include "compiler/ir/shape_facts.h"

namespace metafuse::compiler {

using torch::jit::Node;
namespace aten = torch::jit::aten;

int64_t RankOneProductsToMultiplies(const std::shared_ptr<torch::jit::Graph>& graph) {
  int64_t rewritten = 0;
  for (auto it = graph->nodes().begin(); it != graph->nodes().end();) {
    Node* product = *it;
    ++it;
    if (product->kind() != aten::mm && product->kind() != aten::bmm) continue;
    const int64_t rank = product->kind() == aten::bmm ? 3 : 2;
    auto a = CompleteTensorType(product->input(0));
    auto b = CompleteTensorType(product->input(1));
    auto out = CompleteTensorType(product->output());
    if (!a || !b || !out || static_cast<int64_t>(*a->dim()) != rank ||
        static_cast<int64_t>(*b->dim()) != rank || a->scalarType() != b->scalarType() ||
        a->device() != b->device()) {
      continue;
    }
    const auto a_sizes = *a->sizes().concrete_sizes();
    const auto b_sizes = *b->sizes().concrete_sizes();
    if (a_sizes[rank - 1] != 1 || b_sizes[rank - 2] != 1) continue;
    // [.., M, 1] * [.., 1, N] broadcasts to [.., M, N]: the product's shape.
    torch::jit::WithInsertPoint guard(product);
    Node* mul = graph->create(aten::mul, {product->input(0), product->input(1)}, 1);
    mul->insertBefore(product);
    mul->output()->setType(out);
    product->output()->replaceAllUsesWith(mul->output());
    product->destroy();
    ++rewritten;
  }
  return rewritten;
}

}  // namespace metafuse::compiler
