#include "compiler/specialize/specialize_shapes.h"

#include <unordered_map>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include "compiler/ir/ir_helpers.h"
#include "compiler/lowering/lower_fusion_group.h"
#include "compiler/lowering/lower_to_program.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = torch::jit::aten;
namespace prim = torch::jit::prim;

namespace {

void Annotate(Value* value, const c10::IValue& observed) {
  if (observed.isTensor() && value->type()->isSubtypeOf(*c10::TensorType::get())) {
    const at::Tensor& t = observed.toTensor();
    if (t.defined()) value->setType(c10::TensorType::create(t)->withRequiresGrad(false));
  }
}

// Shape queries answered by the recorded run.
bool IsShapeQuery(const Node* node) {
  static const c10::Symbol numel = c10::Symbol::fromQualString("aten::numel");
  return node->kind() == aten::size || node->kind() == numel || node->kind() == aten::dim;
}

// The value a no-op shape node passes through, or nullptr.
Value* IdentityOf(Node* node) {
  const auto kind = node->kind();
  // int(tensor(n)) is n: a traced size read back as a Python int.
  if (kind == aten::Int && node->input(0)->node()->kind() == prim::NumToTensor &&
      node->input(0)->node()->input(0)->type()->kind() == c10::TypeKind::IntType) {
    return node->input(0)->node()->input(0);
  }
  Value* in = node->inputs().empty() ? nullptr : node->input(0);
  const auto in_type = in ? CompleteTensorType(in) : nullptr;
  const auto out_type = node->outputs().size() == 1 ? CompleteTensorType(node->output())
                                                    : nullptr;
  if (!in_type || !out_type) return nullptr;
  const auto in_sizes = *in_type->sizes().concrete_sizes();
  const auto out_sizes = *out_type->sizes().concrete_sizes();
  if (kind == aten::sum_to_size || kind == aten::expand || kind == aten::reshape) {
    if (in_sizes == out_sizes && in_type->scalarType() == out_type->scalarType()) {
      return in;
    }
  } else if (kind == aten::type_as) {
    if (in_type->scalarType() == out_type->scalarType()) return in;
  } else if (kind == aten::contiguous) {
    if (RowMajorLayout(in_type)) return in;
  }
  return nullptr;
}

// zeros_like(x) / ones_like(x) read by ops that are not fused (a pooling
// gradient's scatter_add; the seed of a per-task loss's gradient, expanded
// to the tasks) needs only x's type: a fresh aten::zeros / aten::ones of
// that type lets x go (otherwise a backward recomputes or keeps a whole
// activation just for its shape). Read by fused kernels it stays (there it
// costs nothing) unless x is computed for nothing else: an inner step's
// loss, summed over the tasks only to seed its gradient with ones_like.
bool FoldFillLike(torch::jit::Graph* graph, Node* node) {
  if (node->kind() != aten::zeros_like && node->kind() != aten::ones_like) return false;
  const auto out = CompleteTensorType(node->output());
  // A fresh tensor is row-major: only a row-major result can be replaced.
  if (!out || !out->device() || !out->scalarType() || !RowMajorLayout(out)) return false;
  const bool only_shape_read = node->input(0)->uses().size() == 1 &&
                               node->input(0)->node()->kind() != prim::Param;
  for (const torch::jit::Use& use : node->output()->uses()) {
    if (IsFusibleNode(use.user) && !only_shape_read) return false;
  }
  torch::jit::WithInsertPoint guard(node);
  const c10::IValue none;
  const auto fill = node->kind() == aten::zeros_like ? aten::zeros : aten::ones;
  Value* filled =
      graph->insertNode(graph->create(fill,
                                      {graph->insertConstant(c10::IValue(
                                           *out->sizes().concrete_sizes())),
                                       graph->insertConstant(*out->scalarType()),
                                       graph->insertConstant(none),
                                       graph->insertConstant(*out->device()),
                                       graph->insertConstant(none)}))
          ->output()
          ->setType(out);
  node->output()->replaceAllUsesWith(filled);
  return true;
}

}  // namespace

ShapeSpecialization SpecializeShapes(const std::shared_ptr<torch::jit::Graph>& graph,
                                     std::vector<c10::IValue> inputs) {
  ShapeSpecialization result;
  for (size_t i = 0; i < inputs.size() && i < graph->inputs().size(); ++i) {
    Annotate(graph->inputs()[i], inputs[i]);
  }
  std::unordered_map<const Node*, std::vector<c10::IValue>> queries;
  std::vector<const Node*> nodes;  // per instruction
  runtime::Program recorder(LowerToProgram(*graph, "specialize", {}, &nodes));
  result.outputs = recorder.Run(
      std::move(inputs), [&](size_t index, const c10::IValue* outs, size_t n) {
        const Node* node = nodes[index];
        for (size_t k = 0; k < n; ++k) {
          Annotate(const_cast<Node*>(node)->outputs()[k], outs[k]);
        }
        if (IsShapeQuery(node)) queries[node] = {outs[0]};
      });

  for (Node* node : graph->nodes()) {
    auto it = queries.find(node);
    if (it == queries.end()) continue;
    torch::jit::WithInsertPoint guard(node);
    Value* constant = graph->insertConstant(it->second[0]);
    node->output()->replaceAllUsesWith(constant);
    ++result.shape_queries_folded;
  }
  std::shared_ptr<torch::jit::Graph> mutable_graph = graph;
  torch::jit::ConstantPropagationImmutableTypes(mutable_graph);
  for (auto it = graph->nodes().begin(); it != graph->nodes().end(); ++it) {
    if (Value* same = IdentityOf(*it)) {
      it->output()->replaceAllUsesWith(same);
      ++result.identities_removed;
    } else if (FoldFillLike(graph.get(), *it)) {
      ++result.shape_queries_folded;
    }
  }
  torch::jit::EliminateDeadCode(graph);
  return result;
}

}  // namespace metafuse::compiler
