#include "compiler/ir/op_table.h"

#include <unordered_map>

namespace metafuse::compiler {

const std::vector<PrimitiveOp>& PrimitiveOps() {
  using F = OpFamily;
  using X = FuserForm;
  static const auto* ops = new std::vector<PrimitiveOp>{
      // structural
      {"prim::Constant", F::kStructural, false, X::kNone},
      {"prim::ListConstruct", F::kStructural, false, X::kNone},
      {"prim::TupleConstruct", F::kStructural, false, X::kNone},
      {"prim::TupleUnpack", F::kStructural, false, X::kNone},
      {"prim::ListUnpack", F::kStructural, false, X::kNone},
      // elementwise
      {"aten::add", F::kElementwise, true, X::kBinaryAlpha},
      {"aten::sub", F::kElementwise, true, X::kBinaryAlpha},
      {"aten::rsub", F::kElementwise, true, X::kBinaryAlpha},
      {"aten::mul", F::kElementwise, true, X::kBinary},
      {"aten::div", F::kElementwise, true, X::kBinary},
      {"aten::neg", F::kElementwise, true, X::kUnary},
      {"aten::exp", F::kElementwise, true, X::kUnary},
      {"aten::log", F::kElementwise, true, X::kUnary},
      {"aten::tanh", F::kElementwise, true, X::kUnary},
      {"aten::sigmoid", F::kElementwise, true, X::kUnary},
      {"aten::relu", F::kElementwise, true, X::kUnary},
      {"aten::sqrt", F::kElementwise, true, X::kUnary},
      {"aten::pow", F::kElementwise, true, X::kPowScalar},
      {"aten::sin", F::kElementwise, true, X::kNone},
      {"aten::cos", F::kElementwise, true, X::kNone},
      {"aten::abs", F::kElementwise, true, X::kUnary},
      {"aten::erf", F::kElementwise, true, X::kNone},
      {"aten::log1p", F::kElementwise, true, X::kNone},
      {"aten::expm1", F::kElementwise, true, X::kNone},
      {"aten::where", F::kElementwise, true, X::kWhere},
      {"aten::gt", F::kElementwise, false, X::kCompare},
      {"aten::lt", F::kElementwise, false, X::kCompare},
      {"aten::ge", F::kElementwise, false, X::kCompare},
      {"aten::le", F::kElementwise, false, X::kCompare},
      {"aten::eq", F::kElementwise, false, X::kCompare},
      {"aten::ne", F::kElementwise, false, X::kCompare},
      {"aten::type_as", F::kElementwise, true, X::kTypeAs},
      {"aten::zeros_like", F::kElementwise, false, X::kLike},
      {"aten::ones_like", F::kElementwise, false, X::kLike},
      {"aten::clone", F::kElementwise, true, X::kNone},
      {"aten::contiguous", F::kElementwise, true, X::kNone},
      // stops the gradient (its output is a constant to the derivative)
      {"aten::detach", F::kElementwise, false, X::kNone},
      // piecewise constant: no gradient, as eager's zero one
      {"aten::floor", F::kElementwise, false, X::kNone},
      {"aten::ceil", F::kElementwise, false, X::kNone},
      {"aten::round", F::kElementwise, false, X::kNone},
      {"aten::trunc", F::kElementwise, false, X::kNone},
      // reductions
      {"aten::sum", F::kReduction, true, X::kNone},
      {"aten::mean", F::kReduction, true, X::kNone},
      {"aten::logsumexp", F::kReduction, true, X::kNone},
      {"aten::amax", F::kReduction, true, X::kNone},
      // shape
      {"aten::reshape", F::kShape, true, X::kNone},
      {"aten::expand", F::kShape, true, X::kExpand},
      {"aten::sum_to_size", F::kShape, true, X::kNone},
      {"aten::t", F::kShape, true, X::kNone},
      {"aten::transpose", F::kShape, true, X::kNone},
      {"aten::unsqueeze", F::kShape, true, X::kNone},
      {"aten::squeeze", F::kShape, true, X::kNone},
      {"aten::flatten", F::kShape, true, X::kNone},
      {"aten::permute", F::kShape, true, X::kNone},
      {"aten::constant_pad_nd", F::kShape, true, X::kNone},
      // sizes as values
      {"aten::size", F::kScalar, false, X::kNone},
      {"aten::numel", F::kScalar, false, X::kNone},
      {"aten::Int", F::kScalar, false, X::kNone},
      {"prim::NumToTensor", F::kScalar, false, X::kNone},
      // linear algebra, convolution, pooling, indexing
      {"aten::mm", F::kLinalg, true, X::kNone},
      {"aten::bmm", F::kLinalg, true, X::kNone},
      {"aten::conv2d", F::kConvPool, true, X::kNone},
      {"aten::conv_transpose2d", F::kConvPool, true, X::kNone},
      {"aten::max_pool2d_with_indices", F::kConvPool, true, X::kNone},
      {"aten::gather", F::kIndexing, true, X::kNone},
      {"aten::scatter_add", F::kIndexing, true, X::kNone},
      {"aten::argmax", F::kIndexing, false, X::kNone},
      {"aten::argmin", F::kIndexing, false, X::kNone},
      // fused optimizer updates
      {"metafuse::adam", F::kOptimizer, true, X::kNone},
  };
  return *ops;
}

const PrimitiveOp* FindPrimitiveOp(const std::string& name) {
  static const auto* by_name = [] {
    auto* m = new std::unordered_map<std::string, const PrimitiveOp*>();
    for (const PrimitiveOp& op : PrimitiveOps()) m->emplace(op.name, &op);
    return m;
  }();
  auto it = by_name->find(name);
  return it == by_name->end() ? nullptr : it->second;
}

const PrimitiveOp* FindPrimitiveOp(const torch::jit::Node* node) {
  // Symbols are interned: a table by symbol avoids building the name.
  static const auto* by_symbol = [] {
    auto* m = new std::unordered_map<c10::Symbol, const PrimitiveOp*>();
    for (const PrimitiveOp& op : PrimitiveOps()) {
      m->emplace(c10::Symbol::fromQualString(op.name), &op);
    }
    return m;
  }();
  auto it = by_symbol->find(node->kind());
  return it == by_symbol->end() ? nullptr : it->second;
}

}  // namespace metafuse::compiler
