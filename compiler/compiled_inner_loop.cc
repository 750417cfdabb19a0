#include "compiler/compiled_inner_loop.h"

#include <torch/csrc/jit/frontend/tracer.h>

namespace metafuse::compiler {
std::shared_ptr<CompiledInnerLoop> CompiledInnerLoop::Compile(
    const std::shared_ptr<torch::jit::Graph>& loss_graph,
    const InnerLoopLayout& layout, const OptimizerSpec& optimizer, bool keep_snapshots) {
  auto loop = std::shared_ptr<CompiledInnerLoop>(new CompiledInnerLoop());
  loop->layout_ = layout;
  loop->optimizer_ = optimizer;
  loop->loss_graph_ = loss_graph->copy();
  loop->stages_.set_keep_snapshots(keep_snapshots);
  std::shared_ptr<torch::jit::Graph> graph = loss_graph->copy();
  PrepareCapturedGraph(graph, &loop->stages_);
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
  loop->function_ = CompiledFunction::Build(program, diff, &loop->stages_);
  return loop;
}

std::vector<std::pair<std::string, std::string>> CompiledInnerLoop::stages() const {
  if (stages_.keeps_snapshots()) return stages_.stages();
  std::vector<std::pair<std::string, std::string>> result;
  {
    std::lock_guard<std::mutex> lock(compile_stages_mu_);
    if (compile_stages_.empty()) {
      // The pipeline is deterministic: the same compile, snapshots kept.
      compile_stages_ = Compile(loss_graph_, layout_, optimizer_, true)->stages_.stages();
    }
    result = compile_stages_;
  }
  for (const auto& stage : stages_.stages()) result.push_back(stage);
  return result;
}

std::vector<at::Tensor> CompiledInnerLoop::operator()(
    const std::vector<at::Tensor>& inputs) const {
  const size_t num_lr = !optimizer_.lr_is_input ? 0
                        : optimizer_.lr_per_param ? layout_.num_params : 1;
  const size_t expected =
      layout_.num_params + layout_.num_batch + layout_.num_extra + num_lr;
  TORCH_CHECK(inputs.size() == expected, "compiled inner loop takes ", expected,
              " tensors (params, batch, extras, [lr]), got ", inputs.size());
  return (*function_)(inputs);
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
