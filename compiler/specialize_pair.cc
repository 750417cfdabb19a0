#include "compiler/specialize_pair.h"

#include <chrono>

#include <ATen/ATen.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include "compiler/specialize_shapes.h"

namespace metafuse::compiler {

std::shared_ptr<SpecializedPair> SpecializePair(const SplitProgram& split,
                                                const std::vector<c10::IValue>& inputs,
                                                StageLog* log,
                                                std::vector<c10::IValue>* outputs) {
  using Clock = std::chrono::steady_clock;
  auto pair = std::make_shared<SpecializedPair>();
  SpecializationReport& fr = pair->forward_report;
  SpecializationReport& br = pair->backward_report;

  auto start = Clock::now();
  auto forward = split.forward->copy();
  fr.nodes_before = CountGraphNodes(*forward);
  ShapeSpecialization fs = SpecializeShapes(forward, inputs);
  fr.shape_queries_folded = fs.shape_queries_folded;
  fr.identities_removed = fs.identities_removed;
  const double forward_record = std::chrono::duration<double>(Clock::now() - start).count();

  start = Clock::now();
  std::vector<c10::IValue> backward_inputs(fs.outputs.begin() + split.num_outputs,
                                           fs.outputs.end());
  for (int64_t i = 0; i < split.num_outputs; ++i) {
    backward_inputs.push_back(at::ones_like(fs.outputs[i].toTensor()));
  }
  auto backward = split.backward->copy();
  br.nodes_before = CountGraphNodes(*backward);
  ShapeSpecialization bs = SpecializeShapes(backward, std::move(backward_inputs));
  br.shape_queries_folded = bs.shape_queries_folded;
  br.identities_removed = bs.identities_removed;

  // Saved values the specialized backward does not read leave both graphs.
  pair->saved_before = split.num_saved;
  for (int64_t i = split.num_saved - 1; i >= 0; --i) {
    if (backward->inputs()[i]->hasUses()) continue;
    backward->eraseInput(i);
    forward->eraseOutput(split.num_outputs + i);
  }
  pair->saved_after = static_cast<int64_t>(forward->outputs().size()) - split.num_outputs;
  torch::jit::EliminateDeadCode(forward);
  fr.nodes_specialized = CountGraphNodes(*forward);
  br.nodes_specialized = CountGraphNodes(*backward);

  FusedProgram fused_backward = BuildFusedProgram(backward, "backward", &br);
  br.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  start = Clock::now();
  FusedProgram fused_forward = BuildFusedProgram(forward, "forward", &fr);
  pair->forward = std::move(fused_forward.program);
  pair->backward = std::move(fused_backward.program);
  *outputs = pair->forward->Run(inputs);
  fr.seconds = forward_record + std::chrono::duration<double>(Clock::now() - start).count();
  if (log != nullptr) {
    log->Record("forward_specialized", *fused_forward.unfused);
    log->Record("forward_fused", *fused_forward.fused);
    log->Record("backward_specialized", *fused_backward.unfused);
    log->Record("backward_fused", *fused_backward.fused);
  }
  return pair;
}

}  // namespace metafuse::compiler
