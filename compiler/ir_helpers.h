// Small questions and edits on TorchScript IR that every pass asks: one
// definition each.
#pragma once

#include <optional>
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

// Nodes of the graph's top-level block, constants not counted.
inline int64_t CountGraphNodes(const torch::jit::Graph& graph) {
  int64_t n = 0;
  for (const torch::jit::Node* node : graph.nodes()) {
    n += node->kind() != torch::jit::prim::Constant;
  }
  return n;
}

}  // namespace metafuse::compiler
