#include "compiler/lower_matmul.h"

#include <torch/csrc/jit/ir/constants.h>

#include "compiler/specialize_shapes.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = torch::jit::aten;

namespace {

bool RowMajorMatrix(const Value* v) {
  auto t = CompleteTensorType(v);
  if (!t || t->dim() != 2 || t->device() != at::kCPU) return false;
  const auto type = *t->scalarType();
  if (type != at::kFloat && type != at::kDouble) return false;
  const auto sizes = *t->sizes().concrete_sizes();
  const auto strides = *t->strides().concrete_sizes();
  return (sizes[1] == 1 || strides[1] == 1) && (sizes[0] == 1 || strides[0] == sizes[1]);
}

// The row-major matrix `v` is the transpose of, or nullptr.
Value* TransposedFrom(Value* v) {
  Node* n = v->node();
  if (n->kind() == aten::t && RowMajorMatrix(n->input(0))) return n->input(0);
  if (n->kind() == aten::transpose && RowMajorMatrix(n->input(0))) {
    auto d0 = torch::jit::constant_as<int64_t>(n->input(1));
    auto d1 = torch::jit::constant_as<int64_t>(n->input(2));
    if (d0 && d1 && ((*d0 == 0 && *d1 == 1) || (*d0 == 1 && *d1 == 0) ||
                     (*d0 == -2 && *d1 == -1) || (*d0 == -1 && *d1 == -2))) {
      return n->input(0);
    }
  }
  return nullptr;
}

}  // namespace

c10::Symbol GemmKind() {
  static const c10::Symbol kind = c10::Symbol::fromQualString("metafuse::gemm");
  return kind;
}

int64_t LowerMatmulToGemm(const std::shared_ptr<torch::jit::Graph>& graph) {
  static const c10::Symbol trans_a = c10::Symbol::attr("trans_a");
  static const c10::Symbol trans_b = c10::Symbol::attr("trans_b");
  int64_t lowered = 0;
  for (auto it = graph->nodes().begin(); it != graph->nodes().end(); ++it) {
    Node* mm = *it;
    if (mm->kind() != aten::mm || !CompleteTensorType(mm->output())) continue;
    Value* operands[2] = {mm->input(0), mm->input(1)};
    bool transposed[2] = {false, false};
    bool ok = true;
    for (int k = 0; k < 2; ++k) {
      if (Value* base = TransposedFrom(operands[k])) {
        operands[k] = base;
        transposed[k] = true;
      } else if (!RowMajorMatrix(operands[k])) {
        ok = false;
      }
    }
    const auto out = CompleteTensorType(mm->output());
    if (!ok || *out->scalarType() != *CompleteTensorType(operands[0])->scalarType() ||
        *out->scalarType() != *CompleteTensorType(operands[1])->scalarType()) {
      continue;
    }
    torch::jit::WithInsertPoint guard(mm);
    Node* gemm = graph->create(GemmKind(), {operands[0], operands[1]}, 1);
    gemm->i_(trans_a, transposed[0] ? 1 : 0);
    gemm->i_(trans_b, transposed[1] ? 1 : 0);
    gemm->insertBefore(mm);
    gemm->output()->copyMetadata(mm->output());
    mm->output()->replaceAllUsesWith(gemm->output());
    ++lowered;
  }
  // The products and the transposes only they read are dead now. (No
  // torch::jit DCE: its alias analysis wants a schema for metafuse::gemm.)
  for (auto it = graph->nodes().rbegin(); it != graph->nodes().rend();) {
    Node* n = *it;
    ++it;
    if ((n->kind() == aten::mm || n->kind() == aten::t || n->kind() == aten::transpose) &&
        !n->output()->hasUses()) {
      n->destroy();
    }
  }
  return lowered;
}

}  // namespace metafuse::compiler
