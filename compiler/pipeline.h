// The compiler's one driver: every stage, in order, in pipeline.cc.
//
// A function is compiled in two phases.
//
// Once per function (Compile), shape-generic:
//   capture     the traced graph (frontend: Python tracer or C++ tracer)
//   prepare     inline, tuples, mutation removal, optimizer ops and
//               broadcasts lowered, decomposition into primitives,
//               optimizer-backward elimination, gradient markers expanded,
//               clean-up (CSE, DCE, constants)
//   unroll      inner loops: K steps of loss -> symbolic gradient -> update
//   loop body   or, for a looped inner loop, that step once: a body the
//               runtime runs K times (runtime/executor/loop_node.h)
//   autodiff    the meta-backward, split into a forward program (returning
//               the values the backward reads, "saved") and a backward one
//
// Once per input signature (Specialize), when fusion is on:
//   specialize  record every value's shape (forward, then backward on
//               cotangents of ones), fold shape queries, drop identities
//   prune       saved values the specialized backward does not read
//   remat       rematerialization of cheap saved values
//   fuse and lower, per program (the table FusionPasses in pipeline.cc):
//               split grouped convolutions (measured), rank-one products to
//               multiplies, transposes cancelled around elementwise ops,
//               products to direct GEMM calls, expanded operands read in
//               place, scatters into fresh zeros, vertical fusion (chains),
//               producer groups merged into readers, horizontal fusion
//               (independent launches), max-pools into the kernel whose
//               output they read, buffer reuse; then the graph lowered to
//               the program value (runtime/program_value/program_code.h)
//               and its kernels loaded
// With fusion off, the generic programs are lowered as they are.
//
// Each stage is a `Graph -> Graph` pass in its own file with one entry
// function, run through RunPass (pass_failure.h: an error names the pass);
// each is logged through one StageLog (ir/ir_dump.h). PipelineStages()
// lists them all, in order.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "compiler/autodiff/inner_loop.h"
#include "compiler/ir/ir_dump.h"
#include "runtime/base/options.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::compiler {

struct InnerLoopSpec {
  InnerLoopLayout layout;
  OptimizerSpec optimizer;
};

struct CompileRequest {
  std::shared_ptr<torch::jit::Graph> captured;  // as traced; not modified
  // Set: `captured` is the per-step loss of an inner loop to unroll; its
  // differentiable inputs follow from the layout. Unset: `captured` is the
  // function itself, differentiated w.r.t. `differentiable_inputs`.
  std::optional<InnerLoopSpec> inner_loop;
  std::vector<int64_t> differentiable_inputs;
};

// One stage the driver runs: its phase ("prepare", "generic", "specialize",
// "fuse and lower"), its name and the file that holds it.
struct PipelineStage {
  std::string phase, name, file;
};

// Every stage, in the order the driver runs them, read from the same pass
// tables the driver iterates (docs/pipeline.dot is rendered from this list
// by tools/render_pipeline.py).
std::vector<PipelineStage> PipelineStages();

// Phase 1: capture -> prepare -> [unroll] -> autodiff. Throws UnsupportedOp
// naming the ops outside the primitive set.
SplitProgram CompileGeneric(const CompileRequest& request, StageLog* log);

// The differentiable inputs of an inner loop: params, extras, [lr...].
std::vector<int64_t> InnerLoopDifferentiableInputs(const InnerLoopSpec& spec);

// The generic programs as a value (no specialization, any shapes).
runtime::CompiledProgram LowerGeneric(const SplitProgram& split);

// What specialization and fusion did to one program.
struct SpecializationReport {
  int64_t nodes_before = 0;          // generic graph (without constants)
  int64_t nodes_specialized = 0;     // after shape specialization
  int64_t nodes_after = 0;           // after fusion
  int64_t shape_queries_folded = 0;
  int64_t identities_removed = 0;
  int64_t gemms = 0;                 // matrix products lowered to direct GEMM
  int64_t grouped_convolutions = 0;  // considered for splitting per group
  int64_t split_convolutions = 0;    // of them, split (measured faster)
  int64_t fusion_groups = 0;         // vertical groups formed
  int64_t fused_nodes = 0;           // ops they absorbed
  int64_t horizontal_nodes = 0;      // merged launches
  int64_t horizontal_segments = 0;   // groups they absorbed
  int64_t fused_reductions = 0;      // sums / means run inside fused kernels
  int64_t pooled_kernels = 0;        // max-pools run as their kernel computes its output
  int64_t merged_groups = 0;         // producer groups merged into their readers
  int64_t planned_reuses = 0;        // outputs that may take an input's buffer
  int64_t instructions = 0;          // of the specialized program
  double seconds = 0;                // specialization + fusion + lowering
  std::string fallback;              // why fusion was abandoned, if it was
};

struct Specialization {
  runtime::CompiledProgram program;  // guarded by the inputs' signature
  SpecializationReport forward_report, backward_report;
  int64_t saved_before = 0;    // values the generic forward saves
  int64_t saved_after = 0;     // values the specialized forward saves
  int64_t rematerialized = 0;  // saved values recomputed in the backward instead
};

// Phase 2 for a forward/backward pair, on `inputs` (one per forward input).
Specialization Specialize(const SplitProgram& split, const std::vector<c10::IValue>& inputs,
                          const runtime::Options& options, StageLog* log);

// Phase 2 for one standalone graph (no backward): specialize, fuse, plan,
// lower. `outputs` receives the generic graph's outputs on `inputs`.
struct SpecializedGraph {
  runtime::ProgramCode code;
  SpecializationReport report;
  std::shared_ptr<torch::jit::Graph> unfused, fused;
  std::vector<c10::IValue> outputs;
};
SpecializedGraph SpecializeGraph(const torch::jit::Graph& graph,
                                 const std::vector<c10::IValue>& inputs,
                                 const runtime::Options& options, const std::string& label,
                                 StageLog* log);

}  // namespace metafuse::compiler
