// A differentiable compiled function: a forward program and its symbolic
// backward (BuildMetaBackward), run by the runtime as one autograd node.
// CompiledInnerLoop and metafuse.compile both produce one.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "compiler/inner_loop.h"
#include "compiler/ir_dump.h"
#include "compiler/specialize_pair.h"
#include "compiler/specializing_program.h"
#include "runtime/program.h"

namespace metafuse::compiler {

class CompiledFunction : public std::enable_shared_from_this<CompiledFunction> {
 public:
  // `program`: a graph in the primitive set. Gradients flow to the inputs
  // listed in `differentiable_inputs`. Stages are appended to `log`, which
  // must outlive the function (specializations record theirs later).
  static std::shared_ptr<CompiledFunction> Build(
      const std::shared_ptr<torch::jit::Graph>& program,
      const std::vector<int64_t>& differentiable_inputs, StageLog* log);

  // Runs the forward program; outputs are connected to the inputs through
  // the compiled backward.
  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& inputs) const;

  // The generic (unspecialized, unfused) programs, lowered on first use
  // (with fusion on they may never run).
  const runtime::Program& forward_program() const;
  const runtime::Program& backward_program() const;
  int64_t num_outputs() const { return split_.num_outputs; }
  const std::vector<int64_t>& differentiable_inputs() const {
    return split_.differentiable_inputs;
  }

  // Fusion on (default; METAFUSE_DISABLE_FUSION=1 turns it off): each input
  // signature gets a forward/backward pair specialized and fused together
  // (specialize_pair.h). Off: the generic programs run.
  void set_fusion(bool enabled);
  bool fusion() const;
  // The pair for `inputs` (specialized on first use, then `first_outputs`
  // receives its forward's outputs), or nullptr when fusion is off or the
  // function already holds SignatureCache::kMax pairs.
  std::shared_ptr<const SpecializedPair> PairFor(const std::vector<c10::IValue>& inputs,
                                                 std::vector<c10::IValue>* first_outputs) const;
  // The most recently used pair (nullptr before the first).
  std::shared_ptr<const SpecializedPair> last_pair() const;

 private:
  CompiledFunction() = default;
  SplitProgram split_;
  mutable std::unique_ptr<runtime::Program> forward_, backward_;  // lazily
  mutable std::once_flag forward_once_, backward_once_;
  StageLog* log_ = nullptr;
  mutable std::mutex mu_;
  bool fusion_ = true;
  mutable SignatureCache<std::shared_ptr<const SpecializedPair>> pairs_;
};

// The passes every captured graph goes through before differentiation:
// inlining, mutation removal, gradient markers, optimizer-op lowering,
// broadcast lowering, decomposition, clean-up. Throws UnsupportedOp naming
// the ops outside the primitive set.
void PrepareCapturedGraph(const std::shared_ptr<torch::jit::Graph>& graph,
                          StageLog* log);

}  // namespace metafuse::compiler
