#include "compiler/pipeline.h"
#include "compiler/ir_helpers.h"

#include <chrono>

#include <ATen/ATen.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include "compiler/autodiff.h"
#include "compiler/decompose.h"
#include "compiler/eliminate_optimizer_backward.h"
#include "compiler/fuse_elementwise.h"
#include "compiler/fuse_horizontal.h"
#include "compiler/grad_marker.h"
#include "compiler/lower_broadcast.h"
#include "compiler/lower_fusion_group.h"
#include "compiler/lower_matmul.h"
#include "compiler/merge_fusion_groups.h"
#include "compiler/broadcast_expanded_operands.h"
#include "compiler/cancel_transposes.h"
#include "compiler/scatter_into_zeros.h"
#include "compiler/fuse_pool_epilogue.h"
#include "compiler/rank_one_products.h"
#include "compiler/split_grouped_convolutions.h"
#include "compiler/lower_optimizer_ops.h"
#include "compiler/lower_to_program.h"
#include "compiler/plan_buffers.h"
#include "compiler/rematerialize.h"
#include "compiler/specialize_shapes.h"
#include "compiler/split_chunks.h"
#include "runtime/fused_kernel_launch.h"

namespace metafuse::compiler {
namespace {

using Clock = std::chrono::steady_clock;
using torch::jit::Graph;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// prepare: what every captured graph goes through before differentiation.
void Prepare(const std::shared_ptr<Graph>& graph, StageLog* log) {
  torch::jit::Inline(*graph);
  torch::jit::LowerAllTuples(graph);  // a tuple of results -> one output each
  SplitChunksIntoCrops(graph);  // copies, not views: their in-place ops can go
  torch::jit::RemoveTensorMutation(graph);
  if (log) log->Record("captured", *graph);
  LowerOptimizerOps(graph);
  LowerBroadcastTensors(graph);
  std::string names;
  for (const auto& name : DecomposeToPrimitives(graph)) {
    // Gradient markers are expanded below, once everything they
    // differentiate is in the primitive set.
    if (name == "metafuse::grad") continue;
    names += (names.empty() ? "" : ", ") + name;
  }
  if (!names.empty()) throw UnsupportedOp(names);
  EliminateOptimizerBackwardStage(graph, log);  // before any differentiation
  ExpandGradMarkers(graph);
  CleanUp(graph);
  if (log) log->Record("decomposed", *graph);
}

// matmul -> fuse -> plan -> lower, for one shape-specialized graph. If
// fusion fails, a warning says why and the graph is lowered unfused.
runtime::ProgramCode FuseAndLower(std::shared_ptr<Graph> graph, const std::string& label,
                                  const runtime::Options& options, SpecializationReport* report,
                                  std::shared_ptr<Graph>* unfused_out,
                                  std::shared_ptr<Graph>* fused_out) {
  std::shared_ptr<Graph> unfused = graph->copy();
  ScopedLoweringCache lowered_once;  // the passes and the lowering share kernels
  runtime::ProgramCode code;
  const ConvolutionSplitPolicy split_policy = ConvolutionSplitPolicyFromEnvironment();
  try {
    const ConvolutionSplitStats convolutions = SplitGroupedConvolutions(graph, split_policy);
    report->grouped_convolutions = convolutions.grouped;
    report->split_convolutions = convolutions.split;
    RankOneProductsToMultiplies(graph);  // before GEMMs: outer products fuse
    CancelTransposesAroundElementwise(graph);  // their gradients' transposes
    report->gemms = LowerMatmulToGemm(graph);
    BroadcastExpandedOperands(graph);  // before fusion: kernels read the sources
    ScatterIntoFreshZeros(graph);  // pooling gradients: one pass, not two
    const FusionStats vertical = FuseElementwise(graph, options.reduction_fusion);
    report->merged_groups = MergeFusionGroups(graph);
    const HorizontalFusionStats horizontal = FuseHorizontally(graph);
    report->fusion_groups = vertical.groups;
    report->fused_nodes = vertical.fused_nodes;
    report->horizontal_nodes = horizontal.merged_nodes;
    report->horizontal_segments = horizontal.segments;
    report->fused_reductions = vertical.reductions;
    report->pooled_kernels = FusePoolEpilogues(graph);
    if (options.buffer_reuse) report->planned_reuses = PlanBuffers(graph);
    code = LowerToProgram(*graph, label, {.plain_reductions = true});
    runtime::LoadKernels(code);  // a kernel that does not compile falls back here
  } catch (const std::exception& e) {
    // Correct results come first: run the specialized graph unfused.
    report->fallback = e.what();
    TORCH_WARN("metafuse: fusion of the ", label, " program failed (", e.what(),
               "); running it unfused");
    graph = unfused;
    code = LowerToProgram(*graph, label);
  }
  report->nodes_after = CountGraphNodes(*graph);
  report->instructions = static_cast<int64_t>(code.instructions.size());
  *unfused_out = std::move(unfused);
  *fused_out = std::move(graph);
  return code;
}

}  // namespace

std::vector<int64_t> InnerLoopDifferentiableInputs(const InnerLoopSpec& spec) {
  const InnerLoopLayout& layout = spec.layout;
  std::vector<int64_t> diff;
  for (int64_t i = 0; i < layout.num_params; ++i) diff.push_back(i);
  const int64_t extras_begin = layout.num_params + layout.num_batch;
  for (int64_t i = 0; i < layout.num_extra; ++i) diff.push_back(extras_begin + i);
  if (spec.optimizer.lr_is_input) {
    const int64_t count = spec.optimizer.lr_per_param ? layout.num_params : 1;
    for (int64_t i = 0; i < count; ++i) diff.push_back(extras_begin + layout.num_extra + i);
  }
  return diff;
}

SplitProgram CompileGeneric(const CompileRequest& request, StageLog* log) {
  TORCH_CHECK(request.captured != nullptr, "metafuse compiler: no captured graph");
  // capture: the traced graph, copied (the request keeps its own).
  std::shared_ptr<Graph> program = request.captured->copy();
  // prepare
  Prepare(program, log);
  // unroll
  std::vector<int64_t> differentiable = request.differentiable_inputs;
  if (request.inner_loop) {
    program = BuildInnerLoopProgram(*program, request.inner_loop->layout,
                                    request.inner_loop->optimizer, log);
    differentiable = InnerLoopDifferentiableInputs(*request.inner_loop);
  }
  // autodiff
  return BuildMetaBackward(program, differentiable, log);
}

runtime::CompiledProgram LowerGeneric(const SplitProgram& split) {
  runtime::CompiledProgram p;
  p.forward = LowerToProgram(*split.forward, "forward");
  p.backward = LowerToProgram(*split.backward, "backward");
  p.num_inputs = static_cast<int64_t>(split.forward->inputs().size());
  p.num_outputs = split.num_outputs;
  p.differentiable_inputs = split.differentiable_inputs;
  p.versions = runtime::CurrentVersions();
  return p;
}

Specialization Specialize(const SplitProgram& split, const std::vector<c10::IValue>& inputs,
                          const runtime::Options& options, StageLog* log) {
  Specialization s;
  SpecializationReport& fr = s.forward_report;
  SpecializationReport& br = s.backward_report;

  // specialize: the forward, then the backward on its saved values and
  // cotangents of ones.
  auto start = Clock::now();
  std::shared_ptr<Graph> forward = split.forward->copy();
  fr.nodes_before = CountGraphNodes(*forward);
  ShapeSpecialization fs = SpecializeShapes(forward, inputs);
  fr.shape_queries_folded = fs.shape_queries_folded;
  fr.identities_removed = fs.identities_removed;
  const double forward_record = SecondsSince(start);

  start = Clock::now();
  std::vector<c10::IValue> backward_inputs(fs.outputs.begin() + split.num_outputs,
                                           fs.outputs.end());
  for (int64_t i = 0; i < split.num_outputs; ++i) {
    backward_inputs.push_back(at::ones_like(fs.outputs[i].toTensor()));
  }
  std::shared_ptr<Graph> backward = split.backward->copy();
  br.nodes_before = CountGraphNodes(*backward);
  ShapeSpecialization bs = SpecializeShapes(backward, std::move(backward_inputs));
  br.shape_queries_folded = bs.shape_queries_folded;
  br.identities_removed = bs.identities_removed;

  // prune: saved values the specialized backward does not read leave both.
  s.saved_before = split.num_saved;
  for (int64_t i = split.num_saved - 1; i >= 0; --i) {
    if (backward->inputs()[i]->hasUses()) continue;
    backward->eraseInput(i);
    forward->eraseOutput(split.num_outputs + i);
  }
  // remat
  s.rematerialized = Rematerialize(*forward, *backward, split.num_outputs);
  s.saved_after = static_cast<int64_t>(forward->outputs().size()) - split.num_outputs;
  torch::jit::EliminateDeadCode(forward);
  fr.nodes_specialized = CountGraphNodes(*forward);
  br.nodes_specialized = CountGraphNodes(*backward);

  // matmul -> fuse -> plan -> lower
  std::shared_ptr<Graph> backward_unfused, backward_fused, forward_unfused, forward_fused;
  s.program.backward =
      FuseAndLower(backward, "backward", options, &br, &backward_unfused, &backward_fused);
  br.seconds = SecondsSince(start);
  start = Clock::now();
  s.program.forward =
      FuseAndLower(forward, "forward", options, &fr, &forward_unfused, &forward_fused);
  fr.seconds = forward_record + SecondsSince(start);

  s.program.num_inputs = static_cast<int64_t>(split.forward->inputs().size());
  s.program.num_outputs = split.num_outputs;
  s.program.differentiable_inputs = split.differentiable_inputs;
  s.program.guard = runtime::InputSignature(inputs);
  s.program.versions = runtime::CurrentVersions();
  if (log != nullptr) {
    log->RecordFinal("forward_specialized", forward_unfused);
    log->RecordFinal("forward_fused", forward_fused);
    log->RecordFinal("backward_specialized", backward_unfused);
    log->RecordFinal("backward_fused", backward_fused);
  }
  return s;
}

SpecializedGraph SpecializeGraph(const Graph& graph, const std::vector<c10::IValue>& inputs,
                                 const runtime::Options& options, const std::string& label,
                                 StageLog* log) {
  const auto start = Clock::now();
  SpecializedGraph result;
  std::shared_ptr<Graph> copy = const_cast<Graph&>(graph).copy();  // copy() reads only
  result.report.nodes_before = CountGraphNodes(*copy);
  ShapeSpecialization shapes = SpecializeShapes(copy, inputs);
  result.report.shape_queries_folded = shapes.shape_queries_folded;
  result.report.identities_removed = shapes.identities_removed;
  result.report.nodes_specialized = CountGraphNodes(*copy);
  result.code = FuseAndLower(copy, label, options, &result.report, &result.unfused,
                             &result.fused);
  result.outputs = std::move(shapes.outputs);
  result.report.seconds = SecondsSince(start);
  if (log != nullptr) {
    log->RecordFinal(label + "_specialized", result.unfused);
    log->RecordFinal(label + "_fused", result.fused);
  }
  return result;
}

}  // namespace metafuse::compiler
