// C++ optimizers on top of GradientTransformation.
//
//  - Optimizer: torch::optim-style, in place, for a torch::nn::Module's
//    parameters (or any list of leaf tensors): zero_grad(), step().
//  - FuncOptimizer: differentiable, Step(loss, params) -> new params, for
//    meta-learning with a functional model.
//
// A C++ torch::nn::Module keeps its parameters in member tensors that cannot
// be swapped for graph-carrying results, so the differentiable (meta) path in
// C++ is FuncOptimizer with a functional forward; Python's MetaOptimizer
// swaps nn.Module parameters directly.
#pragma once

#include <torch/nn/module.h>

#include "metafuse/optim/gradient_transformation.h"

namespace metafuse::optim {

class Optimizer {
 public:
  Optimizer(TensorList params, TransformPtr transform);
  Optimizer(const torch::nn::Module& module, TransformPtr transform)
      : Optimizer(module.parameters(), std::move(transform)) {}

  // Sets every parameter's gradient to None.
  void ZeroGrad();
  // One in-place update from the parameters' .grad (those without a gradient
  // are skipped, as in torch.optim).
  void Step();

  const TransformState& state() const { return state_; }
  void set_state(TransformState state) { state_ = std::move(state); }

 private:
  TensorList params_;
  TransformPtr transform_;
  TransformState state_;
};

class FuncOptimizer {
 public:
  explicit FuncOptimizer(TransformPtr transform);

  // Gradients of `loss` w.r.t. `params` (with create_graph), one
  // differentiable update, the new parameters. State is created on the first
  // call from `params`.
  TensorList Step(const at::Tensor& loss, const TensorList& params);

  const TransformState& state() const { return state_; }

 private:
  TransformPtr transform_;
  TransformState state_;
  bool initialized_ = false;
};

}  // namespace metafuse::optim
