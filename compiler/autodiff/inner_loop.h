// Builds the unrolled inner-loop program and its meta-backward.
//
// Given the traced per-step loss graph  loss(params..., batch..., extras...)
// the program is K steps of
//     loss_k  = loss(params_k, batch, extras)
//     grads_k = d loss_k / d params_k          (AppendVjp: symbolic)
//     params_{k+1} = update(params_k, grads_k) (SGD in primitives, Adam as
//                                              metafuse::adam nodes)
// and the meta-backward is AppendVjp of the whole program with respect to
// params_0, extras and a tensor learning rate: it differentiates through the
// inner gradients, i.e. contains the Hessian-vector products.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "compiler/ir/ir_dump.h"

namespace metafuse::compiler {

struct OptimizerSpec {
  std::string kind = "sgd";  // "sgd" | "adam" | "adamw"
  double lr = 0.1;
  bool lr_is_input = false;  // a tensor learning rate, passed after the extras
  bool lr_per_param = false;  // with lr_is_input: one rate tensor per param
  double weight_decay = 0.0;
  bool maximize = false;
  double b1 = 0.9, b2 = 0.999, eps = 1e-8, eps_root = 0.0;  // adam
  // sgd with momentum (torch.optim.SGD's; compiled as a loop only)
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
};

struct InnerLoopLayout {
  int64_t num_params = 0;  // differentiable, updated by the loop
  int64_t num_batch = 0;   // not differentiated
  int64_t num_extra = 0;   // closed-over tensors: differentiated
  int64_t steps = 1;
  bool return_losses = false;
  // Run as a loop of one compiled step (inner_loop_body.h) instead of K
  // unrolled copies; then `memory_budget` bounds what the backward keeps
  // (runtime/program_value/program_code.h's LoopSection: < 0 every step, 0
  // auto, bytes).
  bool looped = false;
  int64_t memory_budget = -1;
};

// The forward program: inputs = params, batch, extras, [lr or one lr per
// param]; outputs =
// adapted params, then (if return_losses) the K inner losses.
std::shared_ptr<torch::jit::Graph> BuildInnerLoopProgram(
    const torch::jit::Graph& loss_graph, const InnerLoopLayout& layout,
    const OptimizerSpec& optimizer, StageLog* log);

// Forward and backward programs for one autograd node. The forward program
// returns its outputs followed by the values the backward needs ("saved");
// the backward program takes (saved..., cotangents...) and returns one
// gradient per differentiable input (params, extras, [lr]).
struct SplitProgram {
  std::shared_ptr<torch::jit::Graph> forward;
  std::shared_ptr<torch::jit::Graph> backward;
  int64_t num_outputs = 0;
  int64_t num_saved = 0;
  std::vector<int64_t> differentiable_inputs;  // indices into the inputs
};

SplitProgram BuildMetaBackward(const std::shared_ptr<torch::jit::Graph>& program,
                               const std::vector<int64_t>& differentiable_inputs,
                               StageLog* log);

// One SGD update of `p` by its gradient, in primitives at the graph's
// insertion point: p - lr (+-grad + wd p). `lr`: a tensor rate, or nullptr
// for the spec's constant.
torch::jit::Value* AppendSgdStep(torch::jit::Graph& graph, torch::jit::Value* p,
                                 torch::jit::Value* grad, const OptimizerSpec& optimizer,
                                 torch::jit::Value* lr);

// torch::jit's own clean-up passes: dead code, CSE, constant propagation
// (of immutable values: tensor constants are the caller's, see inner_loop.cc).
void CleanUp(std::shared_ptr<torch::jit::Graph> graph);

}  // namespace metafuse::compiler
