// Builds one step of an inner loop as a program of its own (the loop body),
// for loops run as loops (runtime/executor/loop_node.h) instead of unrolled:
// compile time and program size do not grow with the number of steps.
//
// Body inputs, in order:
//   state      params, then (Adam) first and second moments, or (SGD with
//              momentum) momentum buffers, one per param
//   fixed      batch, extras, [lr or one lr per param]
//   per step   the step's coefficients, 0-dim tensors of the params' dtype:
//              row k of the tables PerStepTables makes: (Adam) lr / bc1 and
//              1 / bc2; (SGD with momentum) keep and take (0 and 1 at the
//              first step, when the buffer becomes the gradient itself)
// Body outputs: the next state, then the step's loss.
//
//   loss    = loss(params, batch, extras)
//   grads   = d loss / d params                 (AppendVjp: symbolic)
//   SGD:  params' = params - lr (+-grads + wd params)   (as unrolled)
//   SGD with momentum: kernels/optim_math.h's SgdElement in primitives
//   Adam: the update of kernels/optim_math.h's AdamElement in primitives,
//         its two step-dependent coefficients read from the per-step inputs
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/ir/ir.h>

#include "compiler/autodiff/inner_loop.h"
#include "compiler/ir/ir_dump.h"

namespace metafuse::compiler {

std::shared_ptr<torch::jit::Graph> BuildInnerLoopBody(const torch::jit::Graph& loss_graph,
                                                      const InnerLoopLayout& layout,
                                                      const OptimizerSpec& optimizer,
                                                      StageLog* log);

// How many state slots a body carries per param (1 for SGD, 2 with
// momentum, 3 for Adam) and how many per-step inputs it takes (0 for SGD, 2
// for SGD with momentum and for Adam).
int64_t StateSlotsPerParam(const OptimizerSpec& optimizer);
int64_t PerStepInputs(const OptimizerSpec& optimizer);

// The body's differentiable inputs: the whole state, extras, [lr...].
std::vector<int64_t> InnerLoopBodyDifferentiableInputs(const InnerLoopLayout& layout,
                                                       const OptimizerSpec& optimizer);

// The per-step tables for `steps` steps ([steps] tensors, one per per-step
// input): Adam's lr / bc1(k) and 1 / bc2(k), or SGD momentum's keep(k) and
// take(k), k = 1..steps, computed in double and stored in `options`' dtype
// (the rounding of the fused kernels' coefficients); none for plain SGD.
std::vector<at::Tensor> PerStepTables(const OptimizerSpec& optimizer, int64_t steps,
                                      const at::TensorOptions& options);

}  // namespace metafuse::compiler
