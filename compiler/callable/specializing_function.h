// A compiled differentiable function that specializes itself to the input
// signatures it is called with: what `metafuse.compile` and
// `compile_inner_loop` return (through CompiledInnerLoop for the latter).
//
// Compile runs phase 1 of the pipeline (pipeline.h) once. Each call then
// either (fusion on) looks up the specialization for the inputs' signature,
// running phase 2 on the first call under a new signature, or (fusion off)
// uses the generic programs; the chosen runtime::CompiledProgram runs as one
// autograd node (runtime/executor/autograd_node.h).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "compiler/ir/ir_dump.h"
#include "compiler/pipeline.h"
#include "compiler/callable/signature_cache.h"
#include "runtime/executor/autograd_node.h"

namespace metafuse::compiler {

// A specialization with its executors.
struct SpecializedExecutable {
  Specialization info;  // info.program's code moved into `executable`
  std::shared_ptr<const runtime::ExecutableProgram> executable;
};

class SpecializingFunction : public std::enable_shared_from_this<SpecializingFunction> {
 public:
  // Phase 1 of the pipeline. `keep_snapshots`: record the IR of every
  // compile stage now (otherwise stages() recompiles once to produce it).
  static std::shared_ptr<SpecializingFunction> Compile(CompileRequest request,
                                                       bool keep_snapshots = false);

  // Runs on `inputs` (one tensor per program input); outputs are connected
  // to the inputs through the compiled backward.
  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& inputs) const;

  // The executable a call with `inputs` runs (what operator() runs as one
  // autograd node; a looped inner loop runs it as its body).
  std::shared_ptr<const runtime::ExecutableProgram> ExecutableFor(
      const std::vector<at::Tensor>& inputs) const;

  // The program value a call with `inputs` runs: its specialization (made
  // now if needed) with fusion on, the generic program with fusion off.
  runtime::CompiledProgram ProgramFor(const std::vector<at::Tensor>& inputs) const;

  // Fusion on (default; METAFUSE_DISABLE_FUSION=1 turns it off): each input
  // signature gets its own specialization. Off: the generic programs run.
  void set_fusion(bool enabled);
  bool fusion() const;
  // The most recently used specialization (nullptr before the first).
  std::shared_ptr<const SpecializedExecutable> last_specialization() const;
  // The generic programs, built on first use.
  const runtime::ExecutableProgram& generic() const;

  // (stage, IR) of the compile pipeline, then of every specialization so far.
  std::vector<std::pair<std::string, std::string>> stages() const;
  const SplitProgram& split() const { return split_; }
  const CompileRequest& request() const { return request_; }
  int64_t num_inputs() const { return static_cast<int64_t>(split_.forward->inputs().size()); }

 private:
  SpecializingFunction() = default;
  std::shared_ptr<const runtime::ExecutableProgram> Choose(
      const std::vector<c10::IValue>& inputs) const;

  CompileRequest request_;
  SplitProgram split_;
  mutable StageLog log_;
  mutable std::once_flag generic_once_;
  mutable std::shared_ptr<const runtime::ExecutableProgram> generic_;
  mutable std::mutex mu_;
  bool fusion_ = true;
  mutable SignatureCache<std::shared_ptr<const SpecializedExecutable>> specializations_;
  mutable std::mutex compile_stages_mu_;
  mutable std::vector<std::pair<std::string, std::string>> compile_stages_;
};

}  // namespace metafuse::compiler
