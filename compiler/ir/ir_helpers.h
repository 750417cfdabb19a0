// Small questions and edits on TorchScript IR that every pass asks: one
// definition each.
#pragma once

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// True if `v` holds a tensor.
inline bool IsTensor(const torch::jit::Value* v) {
  return v->type()->cast<c10::TensorType>() != nullptr;
}

// Inserts `op` (a qualified name, e.g. "aten::mul") at the graph's insert
// point, matching its schema to `args`; returns its (single) output.
inline torch::jit::Value* InsertOp(torch::jit::Graph& g, const char* op,
                                   std::vector<torch::jit::NamedValue> args) {
  return g.insert(c10::Symbol::fromQualString(op), args);
}

// The value of a constant int or float, or nullopt.
inline std::optional<double> ConstantNumber(const torch::jit::Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (!iv) return std::nullopt;
  if (iv->isDouble()) return iv->toDouble();
  if (iv->isInt()) return static_cast<double>(iv->toInt());
  return std::nullopt;
}

// A constant int list: a constant list or int, or a ListConstruct of
// constant ints; nullopt otherwise.
inline std::optional<std::vector<int64_t>> ConstantIntList(const torch::jit::Value* v) {
  if (auto iv = torch::jit::toIValue(v)) {
    if (iv->isIntList()) return iv->toIntVector();
    if (iv->isInt()) return std::vector<int64_t>{iv->toInt()};
    return std::nullopt;
  }
  if (v->node()->kind() != torch::jit::prim::ListConstruct) return std::nullopt;
  std::vector<int64_t> out;
  for (const torch::jit::Value* in : v->node()->inputs()) {
    auto item = torch::jit::toIValue(in);
    if (!item || !item->isInt()) return std::nullopt;
    out.push_back(item->toInt());
  }
  return out;
}

// Which of its input's `rank` dims a sum or mean (no dtype argument; dims a
// constant list, a ListConstruct of ints, or None / [] for all) or a
// sum_to_size (a constant size) reduces; nullopt for anything else. The
// reduction epilogues and the direct reductions accept the same nodes
// through this.
inline std::optional<std::vector<bool>> ReducedDims(const torch::jit::Node* node,
                                                    int64_t rank) {
  const auto is_none = [](const torch::jit::Value* v) {
    auto iv = torch::jit::toIValue(v);
    return iv && iv->isNone();
  };
  const size_t n = node->inputs().size();
  std::vector<bool> reduced(rank, false);
  if (node->kind() == c10::aten::sum_to_size) {
    auto size = n == 2 ? ConstantIntList(node->input(1)) : std::nullopt;
    const int64_t offset = size ? rank - static_cast<int64_t>(size->size()) : -1;
    if (offset < 0) return std::nullopt;
    for (int64_t d = 0; d < rank; ++d) reduced[d] = d < offset || (*size)[d - offset] == 1;
    return reduced;
  }
  if (node->kind() != c10::aten::sum && node->kind() != c10::aten::mean) return std::nullopt;
  if (n == 2 && is_none(node->input(1))) {  // sum(x, dtype=None): everything
    return std::vector<bool>(rank, true);
  }
  if (n != 4 || !is_none(node->input(3)) || !torch::jit::toIValue(node->input(2))) {
    return std::nullopt;
  }
  auto dims = is_none(node->input(1)) ? std::vector<int64_t>{} : ConstantIntList(node->input(1));
  if (!dims) return std::nullopt;
  if (dims->empty()) return std::vector<bool>(rank, true);
  for (int64_t d : *dims) {
    if (d < -rank || d >= rank) return std::nullopt;
    reduced[d < 0 ? d + rank : d] = true;
  }
  return reduced;
}

// Whether a tensor type of known sizes and strides is laid out row-major
// (dims of size 1 may have any stride).
inline bool RowMajorLayout(const c10::TensorTypePtr& t) {
  auto sizes = t->sizes().concrete_sizes();
  auto strides = t->strides().concrete_sizes();
  if (!sizes || !strides) return false;
  int64_t expected = 1;
  for (size_t d = sizes->size(); d-- > 0;) {
    if ((*sizes)[d] != 1 && (*strides)[d] != expected) return false;
    expected *= (*sizes)[d];
  }
  return true;
}

// The two dims aten::transpose `n` swaps on a tensor of `rank`, normalized
// and ordered, or nullopt when `n` is not a transpose with constant dims.
inline std::optional<std::pair<int64_t, int64_t>> TransposedDims(const torch::jit::Node* n,
                                                                  int64_t rank) {
  if (n->kind() != torch::jit::aten::transpose) return std::nullopt;
  auto d0 = torch::jit::constant_as<int64_t>(n->input(1));
  auto d1 = torch::jit::constant_as<int64_t>(n->input(2));
  if (!d0 || !d1) return std::nullopt;
  const int64_t a = *d0 < 0 ? *d0 + rank : *d0, b = *d1 < 0 ? *d1 + rank : *d1;
  return std::make_pair(std::min(a, b), std::max(a, b));
}

// Nodes of the graph's top-level block, constants not counted.
inline int64_t CountGraphNodes(const torch::jit::Graph& graph) {
  int64_t n = 0;
  for (const torch::jit::Node* node : graph.nodes()) {
    n += node->kind() != torch::jit::prim::Constant;
  }
  return n;
}

}  // namespace metafuse::compiler
