// A differentiable compiled function: a forward program and its symbolic
// backward (BuildMetaBackward), run by the runtime as one autograd node.
// CompiledInnerLoop and metafuse.compile both produce one.
#pragma once

#include <memory>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "compiler/inner_loop.h"
#include "compiler/ir_dump.h"
#include "compiler/specializing_program.h"
#include "runtime/program.h"

namespace metafuse::compiler {

class CompiledFunction : public std::enable_shared_from_this<CompiledFunction> {
 public:
  // `program`: a graph in the primitive set. Gradients flow to the inputs
  // listed in `differentiable_inputs`. Stages are appended to `log`.
  static std::shared_ptr<CompiledFunction> Build(
      const std::shared_ptr<torch::jit::Graph>& program,
      const std::vector<int64_t>& differentiable_inputs, StageLog* log);

  // Runs the forward program; outputs are connected to the inputs through
  // the compiled backward.
  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& inputs) const;

  // The generic (unspecialized, unfused) programs.
  const runtime::Program& forward_program() const { return forward_->generic(); }
  const runtime::Program& backward_program() const { return backward_->generic(); }
  // What runs: specialized to the input shapes and fused on first use.
  const SpecializingProgram& forward() const { return *forward_; }
  const SpecializingProgram& backward() const { return *backward_; }
  // Fusion on (default) or off (the generic programs run), both programs.
  void set_fusion(bool enabled);
  int64_t num_outputs() const { return split_.num_outputs; }
  const std::vector<int64_t>& differentiable_inputs() const {
    return split_.differentiable_inputs;
  }

 private:
  CompiledFunction() = default;
  SplitProgram split_;
  std::unique_ptr<SpecializingProgram> forward_, backward_;
};

// The passes every captured graph goes through before differentiation:
// inlining, mutation removal, gradient markers, optimizer-op lowering,
// broadcast lowering, decomposition, clean-up. Throws UnsupportedOp naming
// the ops outside the primitive set.
void PrepareCapturedGraph(const std::shared_ptr<torch::jit::Graph>& graph,
                          StageLog* log);

}  // namespace metafuse::compiler
