#include "compiler/primitives.h"

#include <unordered_set>

namespace metafuse::compiler {

using torch::jit::Node;

std::string OpName(const Node* node) { return node->kind().toQualString(); }

bool IsPrimitive(const Node* node) {
  static const std::unordered_set<std::string> kPrimitives = {
      "prim::Constant", "prim::ListConstruct", "prim::TupleConstruct",
      "prim::TupleUnpack", "prim::ListUnpack",
      // elementwise
      "aten::add", "aten::sub", "aten::rsub", "aten::mul", "aten::div",
      "aten::neg", "aten::exp", "aten::log", "aten::tanh", "aten::sigmoid",
      "aten::relu", "aten::sqrt", "aten::pow", "aten::sin", "aten::cos",
      "aten::abs", "aten::where", "aten::gt", "aten::lt", "aten::ge",
      "aten::le", "aten::eq", "aten::type_as", "aten::zeros_like",
      "aten::ones_like", "aten::clone", "aten::contiguous",
      // reductions
      "aten::sum", "aten::mean", "aten::logsumexp", "aten::amax",
      // shape
      "aten::reshape", "aten::view", "aten::expand", "aten::sum_to_size",
      "aten::t", "aten::transpose", "aten::unsqueeze", "aten::squeeze",
      "aten::size", "aten::numel",
      // linear algebra, indexing
      "aten::mm", "aten::gather", "aten::scatter_add",
      // fused optimizer update
      "metafuse::adam",
  };
  return kPrimitives.count(OpName(node)) > 0;
}

}  // namespace metafuse::compiler
