#include "compiler/compiled_inner_loop.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include "compiler/autodiff.h"
#include "compiler/decompose.h"
#include "compiler/lower_broadcast.h"

namespace metafuse::compiler {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keeps the compiled loop alive inside the autograd graph.
struct Holder : torch::CustomClassHolder {
  std::shared_ptr<const CompiledInnerLoop> loop;
};

struct InnerLoopNode : public torch::autograd::Function<InnerLoopNode> {
  static variable_list forward(AutogradContext* ctx,
                               c10::intrusive_ptr<Holder> holder,
                               at::TensorList inputs) {
    const CompiledInnerLoop& loop = *holder->loop;
    std::vector<c10::IValue> in(inputs.begin(), inputs.end());
    std::vector<c10::IValue> out = loop.forward_program().Run(std::move(in));
    variable_list results;
    for (int64_t i = 0; i < loop.num_outputs(); ++i) results.push_back(out[i].toTensor());
    c10::impl::GenericList saved(c10::AnyType::get());
    for (size_t i = loop.num_outputs(); i < out.size(); ++i) saved.push_back(out[i]);
    ctx->saved_data["saved"] = saved;
    ctx->saved_data["outputs"] = c10::List<at::Tensor>(results);
    ctx->saved_data["num_inputs"] = static_cast<int64_t>(inputs.size());
    ctx->saved_data["loop"] = c10::IValue::make_capsule(holder);
    return results;
  }

  static variable_list backward(AutogradContext* ctx, variable_list cotangents) {
    auto holder = c10::static_intrusive_pointer_cast<Holder>(
        ctx->saved_data["loop"].toCapsule());
    const CompiledInnerLoop& loop = *holder->loop;
    std::vector<c10::IValue> in;
    for (const auto& v : ctx->saved_data["saved"].toList()) in.push_back(v);
    auto outputs = ctx->saved_data["outputs"].toTensorList();
    for (size_t i = 0; i < cotangents.size(); ++i) {
      in.push_back(cotangents[i].defined() ? cotangents[i]
                                           : at::zeros_like(outputs.get(i)));
    }
    std::vector<c10::IValue> grads = loop.backward_program().Run(std::move(in));
    const int64_t num_inputs = ctx->saved_data["num_inputs"].toInt();
    variable_list result(1 + num_inputs);  // [holder], then one per input
    const auto& diff = loop.differentiable_inputs();
    for (size_t k = 0; k < diff.size(); ++k) result[1 + diff[k]] = grads[k].toTensor();
    return result;
  }
};

}  // namespace

std::shared_ptr<CompiledInnerLoop> CompiledInnerLoop::Compile(
    const std::shared_ptr<torch::jit::Graph>& loss_graph,
    const InnerLoopLayout& layout, const OptimizerSpec& optimizer) {
  auto loop = std::shared_ptr<CompiledInnerLoop>(new CompiledInnerLoop());
  loop->layout_ = layout;
  loop->optimizer_ = optimizer;
  std::shared_ptr<torch::jit::Graph> graph = loss_graph->copy();
  torch::jit::Inline(*graph);
  torch::jit::RemoveTensorMutation(graph);
  loop->stages_.Record("captured", *graph);
  LowerBroadcastTensors(graph);
  std::vector<std::string> unsupported = DecomposeToPrimitives(graph);
  if (!unsupported.empty()) {
    std::string names;
    for (const auto& n : unsupported) names += (names.empty() ? "" : ", ") + n;
    throw UnsupportedOp(names);
  }
  CleanUp(graph);
  loop->stages_.Record("decomposed", *graph);
  std::shared_ptr<torch::jit::Graph> program =
      BuildInnerLoopProgram(*graph, layout, optimizer, &loop->stages_);
  std::vector<int64_t> diff;
  for (int64_t i = 0; i < layout.num_params; ++i) diff.push_back(i);
  const int64_t extras_begin = layout.num_params + layout.num_batch;
  for (int64_t i = 0; i < layout.num_extra; ++i) diff.push_back(extras_begin + i);
  if (optimizer.lr_is_input) {
    const int64_t count = optimizer.lr_per_param ? layout.num_params : 1;
    for (int64_t i = 0; i < count; ++i) {
      diff.push_back(extras_begin + layout.num_extra + i);
    }
  }
  loop->split_ = BuildMetaBackward(program, diff, &loop->stages_);
  loop->forward_ = std::make_unique<runtime::Program>(loop->split_.forward);
  loop->backward_ = std::make_unique<runtime::Program>(loop->split_.backward);
  return loop;
}

std::vector<at::Tensor> CompiledInnerLoop::operator()(
    const std::vector<at::Tensor>& inputs) const {
  const size_t num_lr = !optimizer_.lr_is_input ? 0
                        : optimizer_.lr_per_param ? layout_.num_params : 1;
  const size_t expected =
      layout_.num_params + layout_.num_batch + layout_.num_extra + num_lr;
  TORCH_CHECK(inputs.size() == expected, "compiled inner loop takes ", expected,
              " tensors (params, batch, extras, [lr]), got ", inputs.size());
  auto holder = c10::make_intrusive<Holder>();
  holder->loop = shared_from_this();
  return InnerLoopNode::apply(holder, at::TensorList(inputs));
}

std::shared_ptr<CompiledInnerLoop> CompileInnerLoop(
    const LossFunction& loss_fn, const std::vector<at::Tensor>& example_params,
    const std::vector<at::Tensor>& example_batch, const OptimizerSpec& optimizer,
    int64_t steps, bool return_losses) {
  TORCH_CHECK(steps >= 1, "CompileInnerLoop: `steps` must be >= 1, got ", steps);
  std::vector<c10::IValue> inputs;
  for (const auto& t : example_params) inputs.push_back(t.detach());
  for (const auto& t : example_batch) inputs.push_back(t.detach());
  const size_t num_params = example_params.size();
  auto traced = torch::jit::tracer::trace(
      c10::Stack(inputs.begin(), inputs.end()),
      [&](c10::Stack in) -> c10::Stack {
        std::vector<at::Tensor> p, b;
        for (size_t i = 0; i < in.size(); ++i) {
          (i < num_params ? p : b).push_back(in[i].toTensor());
        }
        return {loss_fn(p, b)};
      },
      [](const at::Tensor&) { return std::string(); }, /*strict=*/false,
      /*force_outplace=*/true);
  InnerLoopLayout layout;
  layout.num_params = static_cast<int64_t>(num_params);
  layout.num_batch = static_cast<int64_t>(example_batch.size());
  layout.steps = steps;
  layout.return_losses = return_losses;
  return CompiledInnerLoop::Compile(std::get<0>(traced)->graph, layout, optimizer);
}

}  // namespace metafuse::compiler
