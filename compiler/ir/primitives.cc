#include "compiler/ir/primitives.h"

#include "compiler/ir/op_table.h"

#include <unordered_set>

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;

std::string OpName(const Node* node) { return node->kind().toQualString(); }

bool CarriesTensor(const Value* value) {
  const auto& type = value->type();
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (auto list = type->cast<c10::ListType>()) {
    return list->getElementType()->kind() == c10::TypeKind::TensorType;
  }
  return false;
}

namespace {

// Arithmetic on ints (sizes, output paddings): no tensor in, none out.
bool IsScalarArithmetic(const Node* node) {
  static const std::unordered_set<std::string> kOps = {
      "aten::add",      "aten::sub", "aten::mul",         "aten::remainder",
      "aten::floordiv", "aten::neg", "aten::__getitem__", "aten::len"};
  if (!kOps.count(OpName(node)) || !node->blocks().empty()) return false;
  for (const Value* v : node->inputs()) {
    if (CarriesTensor(v)) return false;
  }
  for (const Value* v : node->outputs()) {
    if (CarriesTensor(v)) return false;
  }
  return true;
}

}  // namespace

bool IsPrimitive(const Node* node) {
  const std::string name = OpName(node);
  if (name == "aten::conv2d") {
    // The padding="same"/"valid" overload and unbatched inputs are
    // rewritten by decomposition.
    auto type = node->input(0)->type()->cast<c10::TensorType>();
    auto rank = type ? type->dim() : c10::nullopt;
    return node->inputs().size() == 7 && (!rank || *rank == 4) &&
           node->input(4)->type()->kind() != c10::TypeKind::StringType;
  }
  if (name == "aten::flatten") {
    return node->inputs().size() == 3 &&
           node->input(1)->type()->kind() == c10::TypeKind::IntType;
  }
  return FindPrimitiveOp(node) != nullptr || IsScalarArithmetic(node);
}

}  // namespace metafuse::compiler
