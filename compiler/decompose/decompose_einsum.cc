// einsum of one or two operands as sums, permutes, reshapes and one bmm
// (decompose_rewrite.h). With two operands, each index is
//   batch      in both operands and the output,
//   contracted in both operands, not the output,
//   kept       in one operand and the output,
//   summed     in one operand only (summed away first);
// the operands become [batch, kept, contracted] and [batch, contracted,
// kept] and one bmm multiplies them (as eager's einsum contracts a pair),
// then the result is permuted into the output's order. One operand: the
// summed indices are summed, the rest permuted. Declined with the reason:
// ellipsis, an index repeated within an operand (a diagonal), more than
// two operands.
#include <torch/csrc/jit/ir/constants.h>

#include <map>
#include <string>
#include <vector>

#include "compiler/decompose/decompose_rewrite.h"
#include "compiler/ir/ir_helpers.h"

namespace metafuse::compiler::decompose_internal {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace {

struct Operand {
  Value* value;
  std::string letters;
  std::vector<int64_t> sizes;
};

// Sums the operand over the letters not in `keep` (keepdim false).
void SumAway(Graph& g, Operand& x, const std::string& keep) {
  std::vector<int64_t> dims, sizes;
  std::string letters;
  for (size_t i = 0; i < x.letters.size(); ++i) {
    if (keep.find(x.letters[i]) == std::string::npos) {
      dims.push_back(static_cast<int64_t>(i));
    } else {
      letters += x.letters[i];
      sizes.push_back(x.sizes[i]);
    }
  }
  if (dims.empty()) return;
  x.value = WithSizes(
      InsertOp(g, "aten::sum",
               {x.value, g.insertConstant(dims), g.insertConstant(false)}),
      x.value, sizes);
  x.letters = letters;
  x.sizes = sizes;
}

// The operand's dims in the order of `order` (a permutation of its letters).
void Arrange(Graph& g, Operand& x, const std::string& order) {
  if (order == x.letters) return;
  std::vector<int64_t> perm, sizes;
  for (char c : order) {
    const auto at = x.letters.find(c);
    perm.push_back(static_cast<int64_t>(at));
    sizes.push_back(x.sizes[at]);
  }
  x.value =
      WithSizes(InsertOp(g, "aten::permute", {x.value, g.insertConstant(perm)}),
                x.value, sizes);
  x.letters = order;
  x.sizes = sizes;
}

int64_t SizeOf(const Operand& x, const std::string& letters) {
  int64_t n = 1;
  for (char c : letters) n *= x.sizes[x.letters.find(c)];
  return n;
}

}  // namespace

Value* Einsum(Graph& g, Node* n) {
  auto equation = ConstantOf(n->input(0));
  std::vector<Value*> tensors = ListElements(n->input(1));
  if (!equation || !equation->isString() || tensors.empty() ||
      tensors.size() > 2) {
    return Reject("a constant equation of one or two operands expected");
  }
  std::string eq;
  for (char c : equation->toStringRef()) {
    if (c != ' ') eq += c;
  }
  if (eq.find('.') != std::string::npos)
    return Reject("ellipsis is not compiled");
  const auto arrow = eq.find("->");
  std::string inputs = eq.substr(0, arrow);
  std::vector<Operand> ops;
  for (size_t start = 0, i = 0; i < tensors.size(); ++i) {
    const auto comma = inputs.find(',', start);
    const std::string letters = inputs.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma + 1;
    auto sizes = StaticSizes(tensors[i]);
    if (!sizes || sizes->size() != letters.size())
      return Reject("operands of static shape, one letter per dim, expected");
    for (char c : letters) {
      if (letters.find(c) != letters.rfind(c))
        return Reject("an index repeated within an operand is not compiled");
    }
    ops.push_back({tensors[i], letters, *sizes});
  }
  std::string output;
  if (arrow != std::string::npos) {
    output = eq.substr(arrow + 2);
  } else {  // implicit: the letters appearing once, alphabetically
    std::map<char, int> count;
    for (const Operand& op : ops)
      for (char c : op.letters) ++count[c];
    for (const auto& [c, k] : count)
      if (k == 1) output += c;
  }
  auto out_sizes = StaticSizes(n->output());
  if (!out_sizes || out_sizes->size() != output.size())
    return Reject("a result of static shape expected");

  if (ops.size() == 1) {
    Operand& x = ops[0];
    SumAway(g, x, output);
    Arrange(g, x, output);
    return InsertOp(g, "aten::contiguous", {x.value});  // (after a permute)
  }
  Operand &a = ops[0], &b = ops[1];
  auto in = [](const Operand& x, char c) {
    return x.letters.find(c) != std::string::npos;
  };
  // What each operand must keep: the output's letters and the other's.
  SumAway(g, a, output + b.letters);
  SumAway(g, b, output + a.letters);
  std::string batch, contracted, left, right;
  for (char c : a.letters) {
    if (in(b, c)) {
      (output.find(c) != std::string::npos ? batch : contracted) += c;
    } else {
      left += c;
    }
  }
  for (char c : b.letters) {
    if (!in(a, c)) right += c;
  }
  for (const std::string* group : {&batch, &contracted}) {
    for (char c : *group) {
      if (a.sizes[a.letters.find(c)] != b.sizes[b.letters.find(c)])
        return Reject("equal sizes of each shared index expected");
    }
  }
  Arrange(g, a, batch + left + contracted);
  Arrange(g, b, batch + contracted + right);
  const int64_t nb = SizeOf(a, batch), nl = SizeOf(a, left),
                nc = SizeOf(a, contracted), nr = SizeOf(b, right);
  auto as_3d = [&](Value* v, const std::vector<int64_t>& sizes) {
    return WithSizes(InsertOp(g, "aten::reshape", {v, g.insertConstant(sizes)}),
                     v, sizes);
  };
  Value* a3 = as_3d(a.value, {nb, nl, nc});
  Value* b3 = as_3d(b.value, {nb, nc, nr});
  Operand product{
      WithSizes(InsertOp(g, "aten::bmm", {a3, b3}), a.value, {nb, nl, nr}),
      batch + left + right,
      {}};
  for (char c : batch + left)
    product.sizes.push_back(a.sizes[a.letters.find(c)]);
  for (char c : right) product.sizes.push_back(b.sizes[b.letters.find(c)]);
  product.value =
      WithSizes(InsertOp(g, "aten::reshape",
                         {product.value, g.insertConstant(product.sizes)}),
                product.value, product.sizes);
  Arrange(g, product, output);
  return InsertOp(g, "aten::contiguous", {product.value});
}

}  // namespace metafuse::compiler::decompose_internal
