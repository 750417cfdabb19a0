#include "compiler/autodiff/grad_marker.h"

#include <unordered_map>

#include <torch/autograd.h>
#include <torch/library.h>

#include "compiler/autodiff/autodiff.h"

namespace metafuse::compiler {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

std::vector<at::Tensor> GradEager(const at::Tensor& output, at::TensorList inputs) {
  TORCH_CHECK(output.numel() == 1, "metafuse.grad: `output` must be a scalar, got "
              "shape ", output.sizes());
  TORCH_CHECK(output.requires_grad(), "metafuse.grad: `output` does not depend "
              "on the inputs (it does not require grad)");
  std::vector<at::Tensor> in(inputs.begin(), inputs.end());
  auto grads = torch::autograd::grad({output}, in, {}, /*retain_graph=*/true,
                                     /*create_graph=*/true, /*allow_unused=*/true);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) grads[i] = at::zeros_like(in[i]);
  }
  return grads;
}

const c10::Symbol kGrad = c10::Symbol::fromQualString("metafuse::grad");

}  // namespace

void ExpandGradMarkers(const std::shared_ptr<Graph>& graph) {
  bool any = false;
  for (Node* n : graph->nodes()) any = any || n->kind() == kGrad;
  if (!any) return;
  // Copy the graph node by node; at each marker the new graph ends exactly
  // there, so AppendVjp's nodes land at the marker's position.
  auto rebuilt = std::make_shared<Graph>();
  std::unordered_map<Value*, Value*> map;
  std::unordered_map<Value*, std::vector<Value*>> grad_lists;
  for (Value* in : graph->inputs()) {
    Value* v = rebuilt->addInput();
    v->setType(in->type());
    map[in] = v;
  }
  auto lookup = [&](Value* v) { return map.at(v); };
  for (Node* n : graph->nodes()) {
    if (n->kind() == kGrad) {
      Node* list = n->input(1)->node();
      TORCH_CHECK(list->kind() == torch::jit::prim::ListConstruct,
                  "metafuse.grad: inputs must be a list of tensors");
      std::vector<Value*> wrt;
      for (Value* v : list->inputs()) wrt.push_back(map.at(v));
      Value* output = map.at(n->input(0));
      torch::jit::WithInsertPoint at_end(rebuilt->return_node());
      Value* seed = rebuilt->insert(c10::Symbol::fromQualString("aten::ones_like"),
                                    {output});
      grad_lists[n->output()] = AppendVjp(*rebuilt, {output}, {seed}, wrt);
      continue;
    }
    if (n->kind() == torch::jit::prim::ListUnpack && grad_lists.count(n->input(0))) {
      const auto& grads = grad_lists.at(n->input(0));
      for (size_t i = 0; i < n->outputs().size(); ++i) map[n->output(i)] = grads.at(i);
      continue;
    }
    for (Value* in : n->inputs()) {
      TORCH_CHECK(!grad_lists.count(in), "metafuse.grad: its result must be "
                  "unpacked into tensors (a list is used as a whole by ",
                  n->kind().toQualString(), ")");
    }
    Node* clone = rebuilt->createClone(n, lookup);
    rebuilt->insertNode(clone);
    for (size_t i = 0; i < n->outputs().size(); ++i) map[n->output(i)] = clone->output(i);
  }
  for (Value* out : graph->outputs()) rebuilt->registerOutput(map.at(out));
  // Replace the contents of `graph` (callers hold this shared_ptr).
  graph->block()->clear();
  std::unordered_map<Value*, Value*> back;
  for (Value* in : rebuilt->inputs()) {
    Value* v = graph->addInput();
    v->setType(in->type());
    back[in] = v;
  }
  for (Node* n : rebuilt->nodes()) {
    Node* clone = graph->createClone(n, [&](Value* v) { return back.at(v); });
    graph->insertNode(clone);
    for (size_t i = 0; i < n->outputs().size(); ++i) back[n->output(i)] = clone->output(i);
  }
  for (Value* out : rebuilt->outputs()) graph->registerOutput(back.at(out));
}

TORCH_LIBRARY_FRAGMENT(metafuse, m) {
  m.def("grad(Tensor output, Tensor[] inputs) -> Tensor[]");
}

// CompositeImplicitAutograd: the kernel runs above autograd, so the eager
// gradients stay differentiable (create_graph).
TORCH_LIBRARY_IMPL(metafuse, CompositeImplicitAutograd, m) {
  m.impl("grad", &GradEager);
}

}  // namespace metafuse::compiler
