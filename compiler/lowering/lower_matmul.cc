#include "compiler/lowering/lower_matmul.h"

#include <torch/csrc/jit/ir/constants.h>

#include "compiler/ir/ir_helpers.h"
#include "compiler/ir/shape_facts.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = torch::jit::aten;

namespace {

// A float32/float64 CPU or CUDA matrix of `rank` 2, or a stack of them
// (rank 3, one per task, from aten::bmm): on the CPU the GEMM operation reads
// row-major or column-major matrices in place and copies any other layout;
// on CUDA it calls ATen (cuBLAS) with the transposes folded in.
bool RowMajorMatrix(const Value* v, int64_t rank = 2) {
  auto t = CompleteTensorType(v);
  if (!t || static_cast<int64_t>(t->dim().value_or(0)) != rank ||
      !(t->device()->is_cpu() || t->device()->is_cuda()))
    return false;
  const auto type = *t->scalarType();
  return type == at::kFloat || type == at::kDouble;
}

// Whether `n` swaps the last two dims of a tensor of `rank` 2 or 3.
bool SwapsLastTwo(const Node* n, int64_t rank) {
  if (n->kind() == aten::t) return rank == 2;
  const auto dims = TransposedDims(n, rank);
  return dims && dims->first == rank - 2 && dims->second == rank - 1;
}

// The row-major matrix (stack) `v` is the transpose of, or nullptr.
Value* TransposedFrom(Value* v, int64_t rank = 2) {
  Node* n = v->node();
  if (SwapsLastTwo(n, rank) && RowMajorMatrix(n->input(0), rank)) return n->input(0);
  return nullptr;
}

}  // namespace

c10::Symbol GemmKind() {
  static const c10::Symbol kind = c10::Symbol::fromQualString("metafuse::gemm");
  return kind;
}

namespace {

const c10::Symbol trans_a = c10::Symbol::attr("trans_a");
const c10::Symbol trans_b = c10::Symbol::attr("trans_b");

// A metafuse::gemm of `operands` (a, b[, accumulator]) with the given flags,
// inserted before `replaced`, whose output it takes over with `type`.
void ReplaceWithGemm(torch::jit::Graph& graph, Node* replaced,
                     at::ArrayRef<Value*> operands, int64_t ta, int64_t tb,
                     const c10::TypePtr& type) {
  torch::jit::WithInsertPoint guard(replaced);
  Node* gemm = graph.create(GemmKind(), operands, 1);
  gemm->i_(trans_a, ta);
  gemm->i_(trans_b, tb);
  gemm->insertBefore(replaced);
  gemm->output()->setType(type);
  replaced->output()->replaceAllUsesWith(gemm->output());
}

// Products, transposes and additions nothing reads any more.
void RemoveDeadNodes(torch::jit::Graph& graph) {
  for (auto it = graph.nodes().rbegin(); it != graph.nodes().rend();) {
    Node* n = *it;
    ++it;
    if ((n->kind() == aten::mm || n->kind() == aten::bmm || n->kind() == aten::t ||
         n->kind() == aten::transpose ||
         n->kind() == aten::add || n->kind() == GemmKind()) &&
        !n->output()->hasUses()) {
      n->destroy();
    }
  }
}

// transpose(v, -2, -1), inserted before `before`, with its strided type.
Value* TransposeLastTwo(torch::jit::Graph& graph, Value* v, const c10::TensorTypePtr& type,
                        Node* before) {
  torch::jit::WithInsertPoint guard(before);
  const int64_t rank = static_cast<int64_t>(*type->dim());
  std::vector<int64_t> sizes = *type->sizes().concrete_sizes();
  std::vector<int64_t> strides = *type->strides().concrete_sizes();
  std::swap(sizes[rank - 2], sizes[rank - 1]);
  std::swap(strides[rank - 2], strides[rank - 1]);
  Node* t = graph.create(aten::transpose,
                         {v, graph.insertConstant(rank - 2), graph.insertConstant(rank - 1)}, 1);
  t->insertBefore(before);
  t->output()->setType(type->withSizesStrides(sizes, strides));
  return t->output();
}

// t(op(A) op(B)) = op(B)^T op(A)^T: a transposed product is the product with
// the operands swapped and both flags flipped, so its transpose view (and
// the instruction making it) goes too.
int64_t FoldTransposedProducts(torch::jit::Graph& graph) {
  int64_t folded = 0;
  for (auto it = graph.nodes().begin(); it != graph.nodes().end(); ++it) {
    Node* t = *it;
    auto in_type = t->inputs().empty() ? nullptr
                                       : t->input(0)->type()->cast<c10::TensorType>();
    const int64_t rank = in_type && in_type->dim() ? static_cast<int64_t>(*in_type->dim()) : -1;
    if (!SwapsLastTwo(t, rank)) continue;
    // t(t(x)) is x (rematerialized transposes meet transposed gradients).
    Node* inner = t->input(0)->node();
    if (SwapsLastTwo(inner, rank) && inner->input(0)->type()->cast<c10::TensorType>()) {
      t->output()->replaceAllUsesWith(inner->input(0));
      ++folded;
      continue;
    }
    if (t->input(0)->node()->kind() != GemmKind() ||
        t->input(0)->uses().size() != 1 || !CompleteTensorType(t->output())) {
      continue;
    }
    Node* product = t->input(0)->node();
    std::vector<Value*> operands = {product->input(1), product->input(0)};
    if (product->inputs().size() == 3) {
      // t(acc + op(A) op(B)) = t(acc) + op(B)^T op(A)^T: the accumulator is
      // read transposed, which folds again when it is a product itself.
      Value* acc = product->input(2);
      auto acc_type = CompleteTensorType(acc);
      if (!acc_type) continue;
      operands.push_back(TransposeLastTwo(graph, acc, acc_type, t));
    }
    // The result is a fresh row-major matrix, not the strided view t made.
    ReplaceWithGemm(graph, t, operands, 1 - product->i(trans_b), 1 - product->i(trans_a),
                    CompleteTensorType(t->output())->contiguous());
    ++folded;
  }
  return folded;
}

int64_t LowerProducts(torch::jit::Graph& graph) {
  int64_t lowered = 0;
  for (auto it = graph.nodes().begin(); it != graph.nodes().end(); ++it) {
    Node* mm = *it;
    if ((mm->kind() != aten::mm && mm->kind() != aten::bmm) ||
        !CompleteTensorType(mm->output()))
      continue;
    const int64_t rank = mm->kind() == aten::bmm ? 3 : 2;
    Value* operands[2] = {mm->input(0), mm->input(1)};
    bool transposed[2] = {false, false};
    bool ok = true;
    for (int k = 0; k < 2; ++k) {
      if (Value* base = TransposedFrom(operands[k], rank)) {
        operands[k] = base;
        transposed[k] = true;
      } else if (!RowMajorMatrix(operands[k], rank)) {
        ok = false;
      }
    }
    const auto out = CompleteTensorType(mm->output());
    if (!ok || *out->scalarType() != *CompleteTensorType(operands[0])->scalarType() ||
        *out->scalarType() != *CompleteTensorType(operands[1])->scalarType()) {
      continue;
    }
    ReplaceWithGemm(graph, mm, {operands[0], operands[1]}, transposed[0] ? 1 : 0,
                    transposed[1] ? 1 : 0, mm->output()->type());
    ++lowered;
  }
  return lowered;
}

// add(x, P) with P a product read only there: P accumulates into x
// (C = x + op(A) op(B), beta = 1), one instruction and one buffer fewer.
int64_t FoldAccumulations(torch::jit::Graph& graph) {
  int64_t folded = 0;
  for (auto it = graph.nodes().begin(); it != graph.nodes().end(); ++it) {
    Node* add = *it;
    if (add->kind() != aten::add || add->inputs().size() != 3) continue;
    auto alpha = torch::jit::toIValue(add->input(2));  // int or float
    const bool one = alpha && ((alpha->isInt() && alpha->toInt() == 1) ||
                               (alpha->isDouble() && alpha->toDouble() == 1.0));
    auto out = CompleteTensorType(add->output());
    if (!one || !out) continue;
    for (int k = 0; k < 2; ++k) {
      Value* product = add->input(1 - k);
      Value* acc = add->input(k);
      Node* p = product->node();
      auto acc_type = CompleteTensorType(acc);
      auto p_type = CompleteTensorType(product);
      if (p->kind() != GemmKind() || p->inputs().size() != 2 || product->uses().size() != 1 ||
          !acc_type || !p_type || acc_type->sizes().concrete_sizes() != out->sizes().concrete_sizes() ||
          p_type->sizes().concrete_sizes() != out->sizes().concrete_sizes() ||
          acc_type->scalarType() != out->scalarType() ||
          p_type->scalarType() != out->scalarType()) {
        continue;
      }
      ReplaceWithGemm(graph, add, {p->input(0), p->input(1), acc}, p->i(trans_a),
                      p->i(trans_b), out->contiguous());
      ++folded;
      break;
    }
  }
  return folded;
}

}  // namespace

int64_t LowerMatmulToGemm(const std::shared_ptr<torch::jit::Graph>& graph) {
  int64_t lowered = 0;
  // A folded transpose can make another product's operand row-major.
  for (int64_t changed = 1; changed > 0;) {
    const int64_t folded = FoldTransposedProducts(*graph);  // t(t(x)) first
    const int64_t products = LowerProducts(*graph);
    lowered += products;
    changed = folded + products;
    RemoveDeadNodes(*graph);
  }
  FoldAccumulations(*graph);
  RemoveDeadNodes(*graph);
  // Transposed accumulating products (a weight gradient summed over the
  // inner steps, read as W's layout) fold too; their accumulators in turn.
  while (FoldTransposedProducts(*graph) > 0) RemoveDeadNodes(*graph);
  return lowered;
}

}  // namespace metafuse::compiler
