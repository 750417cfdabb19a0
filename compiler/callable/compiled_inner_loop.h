// The C++ front for inner loops: a traced per-step loss run for K steps of
// an optimizer, compiled by the pipeline (pipeline.h) into one autograd node
// whose backward is the compiled meta-backward. Unrolled: one program of K
// copies of the step. Looped (layout.looped): one compiled step run K times
// by the runtime's loop node (runtime/executor/loop_node.h), its memory
// bounded by layout.memory_budget.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "compiler/autodiff/inner_loop.h"
#include "compiler/pipeline.h"
#include "compiler/callable/fusion_check.h"
#include "compiler/callable/specializing_function.h"
#include "runtime/executor/loop_node.h"

namespace metafuse::compiler {

class CompiledInnerLoop {
 public:
  // Compiles a traced per-step loss graph (inputs: params, batch, extras)
  // through the pipeline (pipeline.h). Throws UnsupportedOp naming the ops
  // outside the primitive set.
  static std::shared_ptr<CompiledInnerLoop> Compile(
      const std::shared_ptr<torch::jit::Graph>& loss_graph,
      const InnerLoopLayout& layout, const OptimizerSpec& optimizer,
      bool keep_snapshots = false);

  // Runs the loop. `inputs` = params, batch, extras, [lr tensor(s)]; returns
  // adapted params (then inner losses): differentiable w.r.t. params, extras
  // and lr through the compiled meta-backward. A loop made by the C++ front
  // (CompileInnerLoop) runs the fusion cost check (fusion_check.h) on its
  // first call; Python's front runs its own (metafuse/_fusion_check.py).
  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& inputs) const;

  // The fusion check's result, once it ran.
  std::optional<FusionChoice> fusion_choice() const;

  bool looped() const { return spec_.layout.looped; }
  // A looped loop's body inputs for step 0 of a call with `inputs` (state:
  // params and zero moments; fixed; the first per-step values): what its
  // function() is specialized and fusion-checked on.
  std::vector<at::Tensor> BodyInputs(const std::vector<at::Tensor>& inputs) const;
  // The program value a call with `inputs` runs: the unrolled program, or
  // the looped loop's body with its loop section (what metafuse.aot saves).
  runtime::CompiledProgram ProgramFor(const std::vector<at::Tensor>& inputs) const;

  // The schedule of the last looped run (nullptr before one), its backward's
  // recomputation counted once that ran.
  std::shared_ptr<const runtime::LoopSchedule> last_schedule() const;

  SpecializingFunction& function() const { return *function_; }
  const InnerLoopLayout& layout() const { return spec_.layout; }
  const OptimizerSpec& optimizer() const { return spec_.optimizer; }

 private:
  CompiledInnerLoop() = default;
  std::shared_ptr<const runtime::LoopSection> LoopFor(const at::Tensor& param) const;

  InnerLoopSpec spec_;
  std::shared_ptr<SpecializingFunction> function_;
  mutable std::mutex loop_mu_;
  mutable std::map<std::pair<int, std::string>, std::shared_ptr<const runtime::LoopSection>>
      loops_;
  mutable std::shared_ptr<runtime::LoopSchedule> last_schedule_;
  bool check_fusion_ = false;  // set by the C++ front
  mutable std::once_flag fusion_checked_;
  mutable std::optional<FusionChoice> fusion_choice_;

  friend std::shared_ptr<CompiledInnerLoop> CompileInnerLoop(
      const std::function<at::Tensor(const std::vector<at::Tensor>&,
                                     const std::vector<at::Tensor>&)>& loss_fn,
      const std::vector<at::Tensor>& example_params, const std::vector<at::Tensor>& example_batch,
      const OptimizerSpec& optimizer, int64_t steps, bool return_losses, bool looped,
      int64_t memory_budget);
};

// C++ front: traces `loss_fn(params, batch)` on the example tensors with the
// TorchScript tracer, then compiles it; `looped` and `memory_budget` as in
// InnerLoopLayout (unrolled by default).
using LossFunction = std::function<at::Tensor(const std::vector<at::Tensor>& params,
                                              const std::vector<at::Tensor>& batch)>;
std::shared_ptr<CompiledInnerLoop> CompileInnerLoop(
    const LossFunction& loss_fn, const std::vector<at::Tensor>& example_params,
    const std::vector<at::Tensor>& example_batch, const OptimizerSpec& optimizer,
    int64_t steps, bool return_losses = false, bool looped = false,
    int64_t memory_budget = -1);

}  // namespace metafuse::compiler
