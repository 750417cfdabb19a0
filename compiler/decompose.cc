#include "compiler/decompose.h"

#include <functional>
#include <set>
#include <unordered_map>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "compiler/primitives.h"

namespace metafuse::compiler {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Symbol;
using torch::jit::Value;
using torch::jit::WithInsertPoint;

c10::optional<c10::IValue> ConstantOf(Value* v) { return torch::jit::toIValue(v); }

int64_t TensorRank(Value* v) {
  auto type = v->type()->cast<c10::TensorType>();
  if (!type) return -1;
  auto dim = type->dim();
  return dim ? static_cast<int64_t>(*dim) : -1;
}

Value* Insert(Graph& g, const char* op, std::vector<torch::jit::NamedValue> args) {
  return g.insert(Symbol::fromQualString(op), args);
}

// Each rewrite returns the replacement value or nullptr when the node's
// arguments are outside what the rewrite supports.
using Rewrite = std::function<Value*(Graph&, Node*)>;

Value* MeanSquared(Graph& g, Value* a, Value* b, int64_t reduction) {
  Value* diff = Insert(g, "aten::sub", {a, b});
  Value* sq = Insert(g, "aten::mul", {diff, diff});
  if (reduction == 0) return sq;
  return Insert(g, reduction == 1 ? "aten::mean" : "aten::sum", {sq});
}

Value* LogSoftmax(Graph& g, Value* x, int64_t dim) {
  Value* dims = g.insertConstant(std::vector<int64_t>{dim});
  Value* lse = Insert(g, "aten::logsumexp", {x, dims, g.insertConstant(true)});
  return Insert(g, "aten::sub", {x, lse});
}

Value* NegativeLogLikelihood(Graph& g, Value* log_probs, Value* target) {
  Value* index = Insert(g, "aten::unsqueeze", {target, g.insertConstant(1)});
  Value* picked = Insert(g, "aten::gather", {log_probs, g.insertConstant(1), index});
  return Insert(g, "aten::neg", {Insert(g, "aten::mean", {picked})});
}

const std::unordered_map<std::string, Rewrite>& Rewrites() {
  static const auto* rewrites = new std::unordered_map<std::string, Rewrite>{
      {"aten::linear",
       [](Graph& g, Node* n) -> Value* {
         if (TensorRank(n->input(0)) != 2) return nullptr;
         Value* out = Insert(g, "aten::mm", {n->input(0), Insert(g, "aten::t", {n->input(1)})});
         if (n->input(2)->type()->kind() != c10::TypeKind::NoneType) {
           out = Insert(g, "aten::add", {out, n->input(2)});
         }
         return out;
       }},
      {"aten::matmul",
       [](Graph& g, Node* n) -> Value* {
         if (TensorRank(n->input(0)) != 2 || TensorRank(n->input(1)) != 2) return nullptr;
         return Insert(g, "aten::mm", {n->input(0), n->input(1)});
       }},
      {"aten::addmm",
       [](Graph& g, Node* n) -> Value* {
         auto beta = ConstantOf(n->input(3)), alpha = ConstantOf(n->input(4));
         if (!beta || !alpha || beta->toScalar().toDouble() != 1.0 ||
             alpha->toScalar().toDouble() != 1.0) {
           return nullptr;
         }
         return Insert(g, "aten::add",
                       {Insert(g, "aten::mm", {n->input(1), n->input(2)}), n->input(0)});
       }},
      {"aten::mse_loss",
       [](Graph& g, Node* n) -> Value* {
         auto reduction = ConstantOf(n->input(2));
         if (!reduction) return nullptr;
         return MeanSquared(g, n->input(0), n->input(1), reduction->toInt());
       }},
      {"aten::square",
       [](Graph& g, Node* n) -> Value* {
         return Insert(g, "aten::mul", {n->input(0), n->input(0)});
       }},
      {"aten::log_softmax",
       [](Graph& g, Node* n) -> Value* {
         auto dim = ConstantOf(n->input(1));
         if (!dim || (n->inputs().size() > 2 &&
                      n->input(2)->type()->kind() != c10::TypeKind::NoneType)) {
           return nullptr;
         }
         return LogSoftmax(g, n->input(0), dim->toInt());
       }},
      {"aten::softmax",
       [](Graph& g, Node* n) -> Value* {
         auto dim = ConstantOf(n->input(1));
         if (!dim || (n->inputs().size() > 2 &&
                      n->input(2)->type()->kind() != c10::TypeKind::NoneType)) {
           return nullptr;
         }
         return Insert(g, "aten::exp", {LogSoftmax(g, n->input(0), dim->toInt())});
       }},
      {"aten::cross_entropy_loss",
       [](Graph& g, Node* n) -> Value* {
         // (input, target, weight, reduction, ignore_index, label_smoothing)
         auto reduction = ConstantOf(n->input(3));
         auto smoothing = ConstantOf(n->input(5));
         if (TensorRank(n->input(0)) != 2 || TensorRank(n->input(1)) != 1 ||
             n->input(2)->type()->kind() != c10::TypeKind::NoneType || !reduction ||
             reduction->toInt() != 1 || !smoothing || smoothing->toDouble() != 0.0) {
           return nullptr;
         }
         return NegativeLogLikelihood(g, LogSoftmax(g, n->input(0), 1), n->input(1));
       }},
      {"aten::nll_loss",
       [](Graph& g, Node* n) -> Value* {
         auto reduction = ConstantOf(n->input(3));
         if (TensorRank(n->input(0)) != 2 ||
             n->input(2)->type()->kind() != c10::TypeKind::NoneType || !reduction ||
             reduction->toInt() != 1) {
           return nullptr;
         }
         return NegativeLogLikelihood(g, n->input(0), n->input(1));
       }},
      {"aten::dropout",
       [](Graph& g, Node* n) -> Value* {
         auto p = ConstantOf(n->input(1)), train = ConstantOf(n->input(2));
         if (!p || !train || (train->toBool() && p->toDouble() != 0.0)) return nullptr;
         return n->input(0);
       }},
  };
  return *rewrites;
}

}  // namespace

std::vector<std::string> DecomposeToPrimitives(const std::shared_ptr<Graph>& graph) {
  std::set<std::string> unsupported;
  std::vector<Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  for (Node* node : nodes) {
    if (IsPrimitive(node)) continue;
    const std::string name = OpName(node);
    auto it = Rewrites().find(name);
    Value* replacement = nullptr;
    if (it != Rewrites().end() && node->outputs().size() == 1) {
      WithInsertPoint guard(node);
      replacement = it->second(*graph, node);
    }
    if (replacement == nullptr) {
      unsupported.insert(name);
      continue;
    }
    replacement->setType(node->output()->type());
    node->output()->replaceAllUsesWith(replacement);
    node->destroy();
  }
  return {unsupported.begin(), unsupported.end()};
}

}  // namespace metafuse::compiler
