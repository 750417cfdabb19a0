#include "compiler/specializing_program.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "compiler/fuse_elementwise.h"
#include "compiler/fuse_horizontal.h"
#include "compiler/fused_kernel_op.h"
#include "compiler/fusion_group.h"
#include "compiler/gemm_op.h"
#include "compiler/lower_fusion_group.h"
#include "compiler/lower_matmul.h"
#include "compiler/reduction_op.h"
#include "compiler/plan_buffers.h"
#include "compiler/specialize_shapes.h"

namespace metafuse::compiler {

namespace {

// dtype, device, sizes and strides of every tensor input; the value of every
// integer input (it may decide a shape); the kind of anything else.
std::vector<int64_t> SignatureOf(const std::vector<c10::IValue>& inputs) {
  std::vector<int64_t> sig;
  sig.reserve(inputs.size() * 8);
  for (const c10::IValue& v : inputs) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) {
        sig.push_back(-1);
        continue;
      }
      sig.push_back(static_cast<int64_t>(t.scalar_type()));
      sig.push_back(static_cast<int64_t>(t.device().type()) * 1024 + t.device().index());
      sig.push_back(t.dim());
      for (int64_t s : t.sizes()) sig.push_back(s);
      for (int64_t s : t.strides()) sig.push_back(s);
    } else if (v.isInt()) {
      sig.push_back(-2);
      sig.push_back(v.toInt());
    } else {
      sig.push_back(-3);
    }
  }
  return sig;
}

int64_t CountNodes(const torch::jit::Graph& graph) {
  int64_t n = 0;
  for (const torch::jit::Node* node : graph.nodes()) {
    n += node->kind() != torch::jit::prim::Constant;
  }
  return n;
}

torch::jit::Operation FusedOperations(torch::jit::Node* node) {
  if (node->kind() == FusionGroupKind()) return MakeFusedKernelOperation(node);
  if (node->kind() == GemmKind()) return MakeGemmOperation(node);
  return MakeReductionOperation(node);
}

}  // namespace

bool FusionEnabledByDefault() {
  const char* off = std::getenv("METAFUSE_DISABLE_FUSION");
  return off == nullptr || std::strcmp(off, "1") != 0;
}

SpecializingProgram::SpecializingProgram(std::shared_ptr<torch::jit::Graph> graph,
                                         std::string label, StageLog* log)
    : graph_(std::move(graph)), label_(std::move(label)), log_(log),
      generic_(std::make_unique<runtime::Program>(graph_, label_)),
      fusion_(FusionEnabledByDefault()) {}

void SpecializingProgram::set_fusion(bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  fusion_ = enabled;
}

bool SpecializingProgram::fusion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fusion_;
}

const runtime::Program* SpecializingProgram::specialized() const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto* last = programs_.last();
  return last != nullptr ? last->get() : nullptr;
}

SpecializationReport SpecializingProgram::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  return report_;
}

std::vector<c10::IValue> SpecializingProgram::Run(std::vector<c10::IValue> inputs) const {
  const runtime::Program* program = nullptr;
  std::vector<int64_t> signature;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fusion_) {
      program = generic_.get();
    } else {
      signature = SignatureOf(inputs);
      if (const auto* found = programs_.Find(signature)) {
        program = found->get();
      } else if (programs_.full()) {
        program = generic_.get();
      }
    }
  }
  if (program != nullptr) return program->Run(std::move(inputs));
  return Specialize(std::move(inputs), std::move(signature));
}

FusedProgram BuildFusedProgram(std::shared_ptr<torch::jit::Graph> graph,
                               const std::string& label, SpecializationReport* report) {
  FusedProgram result;
  result.unfused = graph->copy();
  ScopedLoweringCache lowered_once;
  try {
    report->gemms = LowerMatmulToGemm(graph);
    FusionStats vertical = FuseElementwise(graph);
    HorizontalFusionStats horizontal = FuseHorizontally(graph);
    report->fusion_groups = vertical.groups;
    report->fused_nodes = vertical.fused_nodes;
    report->horizontal_nodes = horizontal.merged_nodes;
    report->horizontal_segments = horizontal.segments;
    // METAFUSE_DISABLE_BUFFER_REUSE=1: every kernel output allocated (to
    // measure what planning saves).
    const char* no_reuse = std::getenv("METAFUSE_DISABLE_BUFFER_REUSE");
    if (no_reuse == nullptr || std::strcmp(no_reuse, "1") != 0) {
      report->planned_reuses = PlanBuffers(graph);
    }
    result.program = std::make_unique<runtime::Program>(graph, label, FusedOperations);
  } catch (const std::exception& e) {
    // Correct results come first: run the specialized graph unfused.
    report->fallback = e.what();
    TORCH_WARN("metafuse: fusion of the ", label, " program failed (", e.what(),
               "); running it unfused");
    graph = result.unfused;
    result.program = std::make_unique<runtime::Program>(graph, label);
  }
  result.fused = graph;
  report->nodes_after = CountNodes(*graph);
  report->instructions = static_cast<int64_t>(result.program->num_instructions());
  return result;
}

int64_t CountGraphNodes(const torch::jit::Graph& graph) { return CountNodes(graph); }

std::vector<c10::IValue> SpecializingProgram::Specialize(std::vector<c10::IValue> inputs,
                                                         std::vector<int64_t> signature) const {
  const auto start = std::chrono::steady_clock::now();
  SpecializationReport report;
  report.nodes_before = CountNodes(*graph_);
  auto graph = graph_->copy();
  const std::vector<c10::IValue> held = inputs;  // for the specialized program's first run
  ShapeSpecialization shapes = SpecializeShapes(graph, std::move(inputs));
  report.shape_queries_folded = shapes.shape_queries_folded;
  report.identities_removed = shapes.identities_removed;
  report.nodes_specialized = CountNodes(*graph);
  FusedProgram fused = BuildFusedProgram(graph, label_, &report);
  // The first call returns what the specialized program computes, so a
  // single call exercises it (and tests of one call test it).
  shapes.outputs = fused.program->Run(held);
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  if (log_) {
    log_->RecordFinal(label_ + "_specialized", fused.unfused);
    log_->RecordFinal(label_ + "_fused", fused.fused);
  }
  report_ = report;
  programs_.Insert(std::move(signature), std::move(fused.program));
  return std::move(shapes.outputs);
}

std::vector<int64_t> InputSignature(const std::vector<c10::IValue>& inputs) {
  return SignatureOf(inputs);
}

}  // namespace metafuse::compiler
