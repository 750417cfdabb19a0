// Decompositions of attention (decompose_rewrite.h): torch 2.x's
// scaled_dot_product_attention, which nn.MultiheadAttention and
// F.scaled_dot_product_attention trace to, written as eager's math
// form: softmax(q k^T * scale + mask) v, the stacks flattened into one bmm.
// Only what is deterministic compiles: dropout_p must be 0.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "compiler/decompose/decompose_rewrite.h"
#include "compiler/ir/ir_helpers.h"

namespace metafuse::compiler::decompose_internal {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace {

Value* Reshaped(Graph& g, Value* v, const std::vector<int64_t>& sizes) {
  return WithSizes(InsertOp(g, "aten::reshape", {v, g.insertConstant(sizes)}), v, sizes);
}

// (query, key, value, attn_mask, dropout_p, is_causal, *, scale, enable_gqa)
Value* ScaledDotProductAttention(Graph& g, Node* n) {
  auto q = StaticSizes(n->input(0)), k = StaticSizes(n->input(1)), v = StaticSizes(n->input(2));
  if (!q || !k || !v || q->size() < 2 || k->size() != q->size() || v->size() != q->size())
    return Reject("query, key and value of static shape and one rank expected");
  const std::vector<int64_t> stack(q->begin(), q->end() - 2);
  if (std::vector<int64_t>(k->begin(), k->end() - 2) != stack ||
      std::vector<int64_t>(v->begin(), v->end() - 2) != stack)
    return Reject("query, key and value with the same leading sizes expected");
  const int64_t L = (*q)[q->size() - 2], E = (*q)[q->size() - 1];
  const int64_t S = (*k)[k->size() - 2], Ev = (*v)[v->size() - 1];
  if ((*k)[k->size() - 1] != E || (*v)[v->size() - 2] != S)
    return Reject("key's last size equal to query's and value's rows equal to key's expected");
  auto dropout = ConstantOf(n->input(4)), causal = ConstantOf(n->input(5));
  if (!dropout || dropout->toDouble() != 0.0)
    return Reject("dropout_p 0 expected (dropout is random)");
  if (!causal) return Reject("a constant is_causal expected");
  double scale = 1.0 / std::sqrt(static_cast<double>(E));
  if (n->inputs().size() > 6 && !IsNone(n->input(6))) {
    auto given = ConstantOf(n->input(6));
    if (!given) return Reject("a constant scale expected");
    scale = given->toDouble();
  }
  if (n->inputs().size() > 7) {
    auto gqa = ConstantOf(n->input(7));
    if (!gqa || gqa->toBool()) return Reject("enable_gqa=False expected");
  }
  const int64_t B = Count(stack);
  Value* q3 = Reshaped(g, n->input(0), {B, L, E});
  Value* k3 = Reshaped(g, n->input(1), {B, S, E});
  Value* kt = WithSizes(InsertOp(g, "aten::transpose", {k3, g.insertConstant(int64_t{1}),
                                                         g.insertConstant(int64_t{2})}),
                        k3, {B, E, S});
  Value* scores = WithSizes(InsertOp(g, "aten::bmm", {q3, kt}), q3, {B, L, S});
  scores = WithTypeOf(InsertOp(g, "aten::mul", {scores, g.insertConstant(scale)}), scores);
  const double minus_inf = -std::numeric_limits<double>::infinity();
  auto type = n->input(0)->type()->cast<c10::TensorType>();
  if (causal->toBool()) {  // row i sees columns j <= i (eager's tril of ones(L, S))
    at::Tensor keep = torch::ones({L, S}, at::TensorOptions().dtype(at::kBool)).tril();
    scores = WithTypeOf(InsertOp(g, "aten::where", {g.insertConstant(keep), scores,
                                                    Filled(g, scores, minus_inf)}),
                        scores);
  }
  if (!IsNone(n->input(3))) {
    Value* mask = n->input(3);
    auto m = StaticSizes(mask);
    auto mask_type = mask->type()->cast<c10::TensorType>();
    if (!m || !mask_type || !mask_type->scalarType())
      return Reject("an attention mask of static shape and known dtype expected");
    std::vector<int64_t> trailing{L, S};
    if (*m == trailing) {
      // broadcast over the stack as it is
    } else if (m->size() == q->size() && std::vector<int64_t>(m->begin(), m->end() - 2) == stack &&
               std::vector<int64_t>(m->end() - 2, m->end()) == trailing) {
      mask = Reshaped(g, mask, {B, L, S});
    } else {
      return Reject("an attention mask of sizes [L, S] or query's leading sizes + [L, S] expected");
    }
    if (*mask_type->scalarType() == at::kBool) {
      scores = WithTypeOf(InsertOp(g, "aten::where", {mask, scores, Filled(g, scores, minus_inf)}),
                          scores);
    } else {
      scores = WithTypeOf(InsertOp(g, "aten::add", {scores, mask}), scores);
    }
  }
  if (!type) return Reject("a query of known type expected");
  Value* weights = WithTypeOf(InsertOp(g, "aten::exp", {LogSoftmax(g, scores, 2)}), scores);
  Value* out = WithSizes(InsertOp(g, "aten::bmm", {weights, Reshaped(g, n->input(2), {B, S, Ev})}),
                         q3, {B, L, Ev});
  std::vector<int64_t> sizes = stack;
  sizes.push_back(L);
  sizes.push_back(Ev);
  return InsertOp(g, "aten::reshape", {out, g.insertConstant(sizes)});
}

}  // namespace

const RewriteTable& AttentionRewrites() {
  static const auto* rewrites = new RewriteTable{
      {"aten::scaled_dot_product_attention", ScaledDotProductAttention},
  };
  return *rewrites;
}

}  // namespace metafuse::compiler::decompose_internal
