#include "compiler/pipeline.h"
#include "compiler/ir/ir_helpers.h"
#include "compiler/pass_failure.h"

#include <chrono>

#include <ATen/ATen.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/decompose/decompose.h"
#include "compiler/autodiff/eliminate_optimizer_backward.h"
#include "compiler/fusion/fuse_elementwise.h"
#include "compiler/fusion/fuse_horizontal.h"
#include "compiler/autodiff/grad_marker.h"
#include "compiler/autodiff/inner_loop_body.h"
#include "compiler/decompose/lower_broadcast.h"
#include "compiler/lowering/lower_fusion_group.h"
#include "compiler/lowering/lower_matmul.h"
#include "compiler/fusion/merge_fusion_groups.h"
#include "compiler/fusion/broadcast_expanded_operands.h"
#include "compiler/fusion/cancel_transposes.h"
#include "compiler/fusion/scatter_into_zeros.h"
#include "compiler/fusion/fuse_pool_epilogue.h"
#include "compiler/fusion/rank_one_products.h"
#include "compiler/fusion/split_grouped_convolutions.h"
#include "compiler/decompose/lower_optimizer_ops.h"
#include "compiler/lowering/lower_to_program.h"
#include "compiler/lowering/plan_buffers.h"
#include "compiler/specialize/rematerialize.h"
#include "compiler/specialize/specialize_shapes.h"
#include "compiler/decompose/split_chunks.h"
#include "runtime/executor/fused_kernel_launch.h"

namespace metafuse::compiler {
namespace {

using Clock = std::chrono::steady_clock;
using torch::jit::Graph;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What a pass of a table below reads and writes besides the graph.
struct PassContext {
  StageLog* log = nullptr;                  // prepare
  const runtime::Options* options = nullptr;  // fuse and lower
  SpecializationReport* report = nullptr;     // fuse and lower
};

// One `Graph -> Graph` pass of a table the driver runs in order. Its name
// and file are what PipelineStages() lists and docs/pipeline.dot draws.
struct GraphPass {
  const char* name;
  const char* file;
  void (*run)(std::shared_ptr<Graph>& graph, PassContext& context);
};

// prepare: what every captured graph goes through before differentiation.
const std::vector<GraphPass>& PreparePasses() {
  static const std::vector<GraphPass> passes = {
      {"inline", "torch/csrc/jit/passes/inliner.h",
       [](std::shared_ptr<Graph>& g, PassContext&) { torch::jit::Inline(*g); }},
      {"lower tuples", "torch/csrc/jit/passes/lower_tuples.h",  // one output per result
       [](std::shared_ptr<Graph>& g, PassContext&) { torch::jit::LowerAllTuples(g); }},
      {"split chunks", "compiler/decompose/split_chunks.cc",  // copies: in-place ops can go
       [](std::shared_ptr<Graph>& g, PassContext&) { SplitChunksIntoCrops(g); }},
      {"remove mutation", "torch/csrc/jit/passes/remove_mutation.h",
       [](std::shared_ptr<Graph>& g, PassContext& c) {
         torch::jit::RemoveTensorMutation(g);
         if (c.log) c.log->Record("captured", *g);
       }},
      {"lower optimizer ops", "compiler/decompose/lower_optimizer_ops.cc",
       [](std::shared_ptr<Graph>& g, PassContext&) { LowerOptimizerOps(g); }},
      {"lower broadcast", "compiler/decompose/lower_broadcast.cc",
       [](std::shared_ptr<Graph>& g, PassContext&) { LowerBroadcastTensors(g); }},
      {"decompose", "compiler/decompose/decompose.cc",
       [](std::shared_ptr<Graph>& g, PassContext&) {
         std::string names;
         for (const auto& name : DecomposeToPrimitives(g)) {
           // Gradient markers are expanded below, once everything they
           // differentiate is in the primitive set.
           if (name == "metafuse::grad") continue;
           names += (names.empty() ? "" : ", ") + name;
         }
         if (!names.empty()) throw UnsupportedOp(names);
       }},
      {"eliminate optimizer backward", "compiler/autodiff/eliminate_optimizer_backward.cc",
       [](std::shared_ptr<Graph>& g, PassContext& c) {  // before any differentiation
         EliminateOptimizerBackwardStage(g, c.log);
       }},
      {"expand grad markers", "compiler/autodiff/grad_marker.cc",
       [](std::shared_ptr<Graph>& g, PassContext&) { ExpandGradMarkers(g); }},
      {"clean up", "compiler/autodiff/inner_loop.cc",  // CSE, DCE, constants
       [](std::shared_ptr<Graph>& g, PassContext& c) {
         CleanUp(g);
         if (c.log) c.log->Record("decomposed", *g);
       }},
  };
  return passes;
}

// fuse and lower: for one shape-specialized graph, in this order.
const std::vector<GraphPass>& FusionPasses() {
  static const std::vector<GraphPass> passes = {
      {"split grouped convolutions", "compiler/fusion/split_grouped_convolutions.cc",
       [](std::shared_ptr<Graph>& g, PassContext& c) {
         const ConvolutionSplitStats s =
             SplitGroupedConvolutions(g, ConvolutionSplitPolicyFromEnvironment());
         c.report->grouped_convolutions = s.grouped;
         c.report->split_convolutions = s.split;
       }},
      {"rank-one products", "compiler/fusion/rank_one_products.cc",  // before GEMMs
       [](std::shared_ptr<Graph>& g, PassContext&) { RankOneProductsToMultiplies(g); }},
      {"cancel transposes", "compiler/fusion/cancel_transposes.cc",  // gradients' transposes
       [](std::shared_ptr<Graph>& g, PassContext&) { CancelTransposesAroundElementwise(g); }},
      {"matmul to GEMM", "compiler/lowering/lower_matmul.cc",
       [](std::shared_ptr<Graph>& g, PassContext& c) { c.report->gemms = LowerMatmulToGemm(g); }},
      {"broadcast expanded operands", "compiler/fusion/broadcast_expanded_operands.cc",
       [](std::shared_ptr<Graph>& g, PassContext&) { BroadcastExpandedOperands(g); }},
      {"scatter into zeros", "compiler/fusion/scatter_into_zeros.cc",  // pooling gradients
       [](std::shared_ptr<Graph>& g, PassContext&) { ScatterIntoFreshZeros(g); }},
      {"fuse elementwise", "compiler/fusion/fuse_elementwise.cc",
       [](std::shared_ptr<Graph>& g, PassContext& c) {
         const FusionStats s = FuseElementwise(g, c.options->reduction_fusion);
         c.report->fusion_groups = s.groups;
         c.report->fused_nodes = s.fused_nodes;
         c.report->fused_reductions = s.reductions;
       }},
      {"merge fusion groups", "compiler/fusion/merge_fusion_groups.cc",
       [](std::shared_ptr<Graph>& g, PassContext& c) {
         c.report->merged_groups = MergeFusionGroups(g);
       }},
      {"fuse horizontally", "compiler/fusion/fuse_horizontal.cc",
       [](std::shared_ptr<Graph>& g, PassContext& c) {
         const HorizontalFusionStats s = FuseHorizontally(g);
         c.report->horizontal_nodes = s.merged_nodes;
         c.report->horizontal_segments = s.segments;
       }},
      {"fuse pool epilogues", "compiler/fusion/fuse_pool_epilogue.cc",
       [](std::shared_ptr<Graph>& g, PassContext& c) {
         c.report->pooled_kernels = FusePoolEpilogues(g);
       }},
      {"plan buffers", "compiler/lowering/plan_buffers.cc",
       [](std::shared_ptr<Graph>& g, PassContext& c) {
         if (c.options->buffer_reuse) c.report->planned_reuses = PlanBuffers(g);
       }},
  };
  return passes;
}

void Prepare(std::shared_ptr<Graph>& graph, StageLog* log) {
  PassContext context{.log = log};
  for (const GraphPass& pass : PreparePasses()) {
    RunPass(pass.name, pass.file, [&] { pass.run(graph, context); });
  }
}

// The fusion passes, then lowering and kernel loading, for one
// shape-specialized graph. An error in any of them abandons fusion with a
// warning (the graph is lowered unfused: correct results come first),
// except under METAFUSE_STRICT, where it raises with the pass named.
runtime::ProgramCode FuseAndLower(std::shared_ptr<Graph> graph, const std::string& label,
                                  const runtime::Options& options, SpecializationReport* report,
                                  std::shared_ptr<Graph>* unfused_out,
                                  std::shared_ptr<Graph>* fused_out) {
  std::shared_ptr<Graph> unfused = graph->copy();
  ScopedLoweringCache lowered_once;  // the passes and the lowering share kernels
  runtime::ProgramCode code;
  PassContext context{.options = &options, .report = report};
  try {
    for (const GraphPass& pass : FusionPasses()) {
      RunPass(pass.name, pass.file, [&] { pass.run(graph, context); });
    }
    RunPass("lower to program", "compiler/lowering/lower_to_program.cc",
            [&] { code = LowerToProgram(*graph, label, {.plain_reductions = true}); });
    RunPass("load kernels", "runtime/executor/fused_kernel_launch.cc",
            [&] { runtime::LoadKernels(code); });
  } catch (const std::exception& e) {
    if (options.strict) throw;  // METAFUSE_STRICT: the PassFailure names the pass
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

std::vector<PipelineStage> PipelineStages() {
  std::vector<PipelineStage> stages;
  for (const GraphPass& pass : PreparePasses()) stages.push_back({"prepare", pass.name, pass.file});
  stages.push_back({"generic", "unroll", "compiler/autodiff/inner_loop.cc"});
  stages.push_back({"generic", "loop body", "compiler/autodiff/inner_loop_body.cc"});
  stages.push_back({"generic", "autodiff", "compiler/autodiff/autodiff.cc"});
  stages.push_back({"specialize", "specialize shapes", "compiler/specialize/specialize_shapes.cc"});
  stages.push_back({"specialize", "prune saved values", "compiler/pipeline.cc"});
  stages.push_back({"specialize", "rematerialize", "compiler/specialize/rematerialize.cc"});
  for (const GraphPass& pass : FusionPasses()) {
    stages.push_back({"fuse and lower", pass.name, pass.file});
  }
  stages.push_back({"fuse and lower", "lower to program", "compiler/lowering/lower_to_program.cc"});
  stages.push_back({"fuse and lower", "load kernels", "runtime/executor/fused_kernel_launch.cc"});
  return stages;
}

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
  if (request.inner_loop && request.inner_loop->layout.looped) {
    const InnerLoopSpec& loop = *request.inner_loop;
    RunPass("loop body", "compiler/autodiff/inner_loop_body.cc",
            [&] { program = BuildInnerLoopBody(*program, loop.layout, loop.optimizer, log); });
    differentiable = InnerLoopBodyDifferentiableInputs(loop.layout, loop.optimizer);
  } else if (request.inner_loop) {
    RunPass("unroll", "compiler/autodiff/inner_loop.cc", [&] {
      program = BuildInnerLoopProgram(*program, request.inner_loop->layout,
                                      request.inner_loop->optimizer, log);
    });
    differentiable = InnerLoopDifferentiableInputs(*request.inner_loop);
  }
  // autodiff
  SplitProgram split;
  RunPass("autodiff", "compiler/autodiff/autodiff.cc",
          [&] { split = BuildMetaBackward(program, differentiable, log); });
  return split;
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
  ShapeSpecialization fs;
  RunPass("specialize shapes", "compiler/specialize/specialize_shapes.cc",
          [&] { fs = SpecializeShapes(forward, inputs); });
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
  ShapeSpecialization bs;
  RunPass("specialize shapes", "compiler/specialize/specialize_shapes.cc",
          [&] { bs = SpecializeShapes(backward, std::move(backward_inputs)); });
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
  RunPass("rematerialize", "compiler/specialize/rematerialize.cc",
          [&] { s.rematerialized = Rematerialize(*forward, *backward, split.num_outputs); });
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
  ShapeSpecialization shapes;
  RunPass("specialize shapes", "compiler/specialize/specialize_shapes.cc",
          [&] { shapes = SpecializeShapes(copy, inputs); });
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
