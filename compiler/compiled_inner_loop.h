// A compiled inner loop: capture -> decompose -> unroll (symbolic inner
// gradients) -> meta-backward (symbolic) -> two runtime programs, exposed as
// one autograd node whose backward is the compiled meta-backward.
#pragma once

#include <functional>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "compiler/compiled_function.h"
#include "compiler/inner_loop.h"
#include "compiler/ir_dump.h"
#include "runtime/program.h"

namespace metafuse::compiler {

class CompiledInnerLoop {
 public:
  // Compiles a traced per-step loss graph (inputs: params, batch, extras).
  // Throws UnsupportedOp naming the first op outside the primitive set.
  // `keep_snapshots`: record the IR of every compile stage now (otherwise
  // stages() recompiles once to produce it; see StageLog).
  static std::shared_ptr<CompiledInnerLoop> Compile(
      const std::shared_ptr<torch::jit::Graph>& loss_graph,
      const InnerLoopLayout& layout, const OptimizerSpec& optimizer,
      bool keep_snapshots = false);

  // Runs the loop. `inputs` = params, batch, extras, [lr tensor(s)]; returns
  // adapted params (then inner losses): differentiable w.r.t. params, extras
  // and lr through the compiled meta-backward.
  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& inputs) const;

  const runtime::Program& forward_program() const { return function_->forward_program(); }
  const runtime::Program& backward_program() const { return function_->backward_program(); }
  // (stage, IR) of the compile pipeline, then of every specialization so
  // far.
  std::vector<std::pair<std::string, std::string>> stages() const;
  CompiledFunction& function() const { return *function_; }
  const InnerLoopLayout& layout() const { return layout_; }

 private:
  CompiledInnerLoop() = default;
  InnerLoopLayout layout_;
  OptimizerSpec optimizer_;
  std::shared_ptr<CompiledFunction> function_;
  StageLog stages_;
  std::shared_ptr<torch::jit::Graph> loss_graph_;  // as given, for stages()
  mutable std::mutex compile_stages_mu_;
  mutable std::vector<std::pair<std::string, std::string>> compile_stages_;
};

// C++ front: traces `loss_fn(params, batch)` on the example tensors with the
// TorchScript tracer, then compiles it.
using LossFunction = std::function<at::Tensor(const std::vector<at::Tensor>& params,
                                              const std::vector<at::Tensor>& batch)>;
std::shared_ptr<CompiledInnerLoop> CompileInnerLoop(
    const LossFunction& loss_fn, const std::vector<at::Tensor>& example_params,
    const std::vector<at::Tensor>& example_batch, const OptimizerSpec& optimizer,
    int64_t steps, bool return_losses = false);

}  // namespace metafuse::compiler
