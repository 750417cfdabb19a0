#include "compiler/callable/compiled_inner_loop.h"

#include <torch/csrc/jit/frontend/tracer.h>

namespace metafuse::compiler {
std::shared_ptr<CompiledInnerLoop> CompiledInnerLoop::Compile(
    const std::shared_ptr<torch::jit::Graph>& loss_graph,
    const InnerLoopLayout& layout, const OptimizerSpec& optimizer, bool keep_snapshots) {
  auto loop = std::shared_ptr<CompiledInnerLoop>(new CompiledInnerLoop());
  loop->spec_ = InnerLoopSpec{layout, optimizer};
  CompileRequest request;
  request.captured = loss_graph->copy();
  request.inner_loop = loop->spec_;
  loop->function_ = SpecializingFunction::Compile(std::move(request), keep_snapshots);
  return loop;
}

std::vector<at::Tensor> CompiledInnerLoop::operator()(
    const std::vector<at::Tensor>& inputs) const {
  const InnerLoopLayout& layout = spec_.layout;
  const size_t num_lr = !spec_.optimizer.lr_is_input ? 0
                        : spec_.optimizer.lr_per_param ? layout.num_params : 1;
  const size_t expected = layout.num_params + layout.num_batch + layout.num_extra + num_lr;
  TORCH_CHECK(inputs.size() == expected, "compiled inner loop takes ", expected,
              " tensors (params, batch, extras, [lr]), got ", inputs.size());
  if (check_fusion_) {
    std::call_once(fusion_checked_, [&] {
      fusion_choice_ = CheckFusion(*function_, inputs, "C++ inner loop");
    });
  }
  return (*function_)(inputs);
}

std::optional<FusionChoice> CompiledInnerLoop::fusion_choice() const { return fusion_choice_; }

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
  auto loop = CompiledInnerLoop::Compile(std::get<0>(traced)->graph, layout, optimizer);
  loop->check_fusion_ = true;
  return loop;
}

}  // namespace metafuse::compiler
