#include "compiler/callable/compiled_inner_loop.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include "compiler/autodiff/inner_loop_body.h"

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
      fusion_choice_ = CheckFusion(*function_, looped() ? BodyInputs(inputs) : inputs,
                                   "C++ inner loop");
    });
  }
  if (!looped()) return (*function_)(inputs);
  const std::vector<at::Tensor> body_inputs = BodyInputs(inputs);
  auto body = function_->ExecutableFor(body_inputs);
  auto schedule = std::make_shared<runtime::LoopSchedule>();
  {
    std::lock_guard<std::mutex> lock(loop_mu_);
    last_schedule_ = schedule;
  }
  return runtime::RunLoopDifferentiable(std::move(body), LoopFor(inputs[0]), inputs,
                                        std::move(schedule));
}

runtime::CompiledProgram CompiledInnerLoop::ProgramFor(
    const std::vector<at::Tensor>& inputs) const {
  if (!looped()) return function_->ProgramFor(inputs);
  runtime::CompiledProgram value = function_->ProgramFor(BodyInputs(inputs));
  value.loop = *LoopFor(inputs.at(0));
  value.num_inputs = static_cast<int64_t>(inputs.size());
  value.num_outputs = spec_.layout.num_params + (spec_.layout.return_losses ? spec_.layout.steps : 0);
  value.differentiable_inputs = InnerLoopDifferentiableInputs(spec_);
  value.guard = runtime::InputSignature(std::vector<c10::IValue>(inputs.begin(), inputs.end()));
  return value;
}

std::shared_ptr<const runtime::LoopSection> CompiledInnerLoop::LoopFor(
    const at::Tensor& param) const {
  const auto key = std::make_pair(static_cast<int>(param.scalar_type()), param.device().str());
  std::lock_guard<std::mutex> lock(loop_mu_);
  auto& plan = loops_[key];
  if (plan) return plan;
  const InnerLoopLayout& layout = spec_.layout;
  auto made = std::make_shared<runtime::LoopSection>();
  made->steps = layout.steps;
  const int64_t slots = StateSlotsPerParam(spec_.optimizer);
  for (int64_t s = 0; s < slots; ++s) {
    for (int64_t i = 0; i < layout.num_params; ++i) {
      made->state_inputs.push_back(i);
      made->state_zeros.push_back(s > 0 ? 1 : 0);
    }
  }
  made->body_differentiable_inputs = InnerLoopBodyDifferentiableInputs(layout, spec_.optimizer);
  const int64_t num_lr = !spec_.optimizer.lr_is_input ? 0
                         : spec_.optimizer.lr_per_param ? layout.num_params : 1;
  for (int64_t i = layout.num_params;
       i < layout.num_params + layout.num_batch + layout.num_extra + num_lr; ++i) {
    made->fixed_inputs.push_back(i);
  }
  made->per_step = PerStepTables(spec_.optimizer, layout.steps, param.options());
  made->num_results = layout.num_params;
  made->return_losses = layout.return_losses;
  made->memory_budget = layout.memory_budget;
  plan = made;
  return plan;
}

std::vector<at::Tensor> CompiledInnerLoop::BodyInputs(
    const std::vector<at::Tensor>& inputs) const {
  TORCH_CHECK(looped(), "BodyInputs: this inner loop is unrolled");
  const auto plan = LoopFor(inputs.at(0));
  std::vector<at::Tensor> body;
  for (size_t i = 0; i < plan->state_inputs.size(); ++i) {
    const at::Tensor& from = inputs[plan->state_inputs[i]];
    body.push_back(plan->state_zeros[i] ? at::zeros_like(from) : from);
  }
  for (int64_t i : plan->fixed_inputs) body.push_back(inputs[i]);
  for (const at::Tensor& table : plan->per_step) body.push_back(table.select(0, 0));
  return body;
}

std::shared_ptr<const runtime::LoopSchedule> CompiledInnerLoop::last_schedule() const {
  std::lock_guard<std::mutex> lock(loop_mu_);
  return last_schedule_;
}

std::optional<FusionChoice> CompiledInnerLoop::fusion_choice() const { return fusion_choice_; }

std::shared_ptr<CompiledInnerLoop> CompileInnerLoop(
    const LossFunction& loss_fn, const std::vector<at::Tensor>& example_params,
    const std::vector<at::Tensor>& example_batch, const OptimizerSpec& optimizer,
    int64_t steps, bool return_losses, bool looped, int64_t memory_budget) {
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
  layout.looped = looped;
  layout.memory_budget = memory_budget;
  auto loop = CompiledInnerLoop::Compile(std::get<0>(traced)->graph, layout, optimizer);
  loop->check_fusion_ = true;
  return loop;
}

}  // namespace metafuse::compiler
