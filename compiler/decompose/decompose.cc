#include "compiler/decompose/decompose.h"

#include "compiler/decompose/decompose_rewrite.h"
#include "compiler/ir/ir_helpers.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <set>
#include <unordered_map>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/torch.h>

#include "compiler/ir/primitives.h"

namespace metafuse::compiler {
namespace decompose_internal {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Symbol;
using torch::jit::Value;
using torch::jit::WithInsertPoint;

// BatchNorm's `num_batches_tracked.add_(1)` in training mode, as traced with
// module buffers as inputs: an in-place add on an integer tensor that nothing
// else reads. Like the running statistics, the compiled program does not
// perform this bookkeeping (warned); any other in-place op stays unsupported.
bool IsUnreadCounterIncrement(Node* n) {
  if (OpName(n) != "aten::add_" || n->inputs().size() != 3 ||
      n->output()->hasUses()) {
    return false;
  }
  Value* self = n->input(0);
  auto type = self->type()->cast<c10::TensorType>();
  if (!type || !type->scalarType() ||
      c10::isFloatingType(*type->scalarType()) || self->uses().size() != 1) {
    return false;
  }
  return self->node()->kind() == torch::jit::prim::Param ||
         self->node()->kind() == torch::jit::prim::Constant;
}

// The rewrite for `name` in the first of `tables` that has one, or nullptr.
template <typename Table>
const typename Table::mapped_type* FindRewrite(const std::string& name,
                                               std::initializer_list<const Table*> tables) {
  for (const Table* table : tables) {
    auto it = table->find(name);
    if (it != table->end()) return &it->second;
  }
  return nullptr;
}

}  // namespace decompose_internal

using namespace decompose_internal;  // NOLINT: the pass reads its own tables

std::vector<std::string> DecomposeToPrimitives(
    const std::shared_ptr<Graph>& graph) {
  std::set<std::string> unsupported;
  std::vector<Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  for (Node* node : nodes) {
    if (IsPrimitive(node)) continue;
    const std::string name = OpName(node);
    if (IsUnreadCounterIncrement(node)) {
      TORCH_WARN(
          "metafuse compiler: the in-place increment of an integer tensor "
          "(BatchNorm's "
          "num_batches_tracked) is not performed by the compiled program; the "
          "loss does "
          "not read it.");
      node->destroy();
      continue;
    }
    if (node->outputs().size() > 1) {
      const MultiRewrite* multi = FindRewrite(
          name, {&MultiRewrites(), &NormalizationMultiRewrites(), &RecurrentMultiRewrites()});
      std::vector<Value*> outs;
      last_rejection.clear();
      if (multi != nullptr) {
        WithInsertPoint guard(node);
        try {
          outs = (*multi)(*graph, node);
        } catch (const std::exception& error) {  // c10::Error or a schema mismatch
          outs.clear();
          Reject(error.what());
        }
      }
      if (outs.size() != node->outputs().size()) {
        unsupported.insert(last_rejection.empty() ? name : name + " (" + last_rejection + ")");
        continue;
      }
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!node->output(i)->hasUses()) continue;  // (its replacement may be nullptr)
        outs[i]->setType(node->output(i)->type());
        node->output(i)->replaceAllUsesWith(outs[i]);
      }
      node->destroy();
      continue;
    }
    const Rewrite* rewrite =
        FindRewrite(name, {&Rewrites(), &LossRewrites(), &NormalizationRewrites(),
                                 &IndexingRewrites(), &AttentionRewrites()});
    Value* replacement = nullptr;
    last_rejection.clear();
    if (rewrite != nullptr && node->outputs().size() == 1) {
      WithInsertPoint guard(node);
      try {
        replacement = (*rewrite)(*graph, node);
      } catch (const c10::Error& error) {  // an argument form it cannot write
        replacement = Reject(error.what_without_backtrace());
      } catch (const std::exception& error) {  // e.g. no schema matches what it inserts
        replacement = Reject(error.what());
      }
    }
    if (replacement == nullptr) {
      unsupported.insert(
          last_rejection.empty() ? name : name + " (" + last_rejection + ")");
      continue;
    }
    replacement->setType(node->output()->type());
    node->output()->replaceAllUsesWith(replacement);
    node->destroy();
  }
  return {unsupported.begin(), unsupported.end()};
}

}  // namespace metafuse::compiler
