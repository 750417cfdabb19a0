#include "metafuse/optim/optimizer.h"

#include <torch/autograd.h>

namespace metafuse::optim {
namespace {

TransformState SelectState(const TransformState& s,
                           const std::vector<size_t>& idx) {
  TransformState out{s.name, {}, {}};
  for (const auto& f : s.fields) {
    TransformState::Field g{f.name, {}, f.per_param};
    if (f.per_param) {
      for (size_t i : idx) g.tensors.push_back(f.tensors[i]);
    } else {
      g.tensors = f.tensors;
    }
    out.fields.push_back(std::move(g));
  }
  for (const auto& c : s.children) out.children.push_back(SelectState(c, idx));
  return out;
}

void ScatterState(TransformState& full, const TransformState& sub,
                  const std::vector<size_t>& idx) {
  for (size_t k = 0; k < full.fields.size(); ++k) {
    auto& f = full.fields[k];
    if (!f.per_param) {
      f.tensors = sub.fields[k].tensors;
      continue;
    }
    for (size_t j = 0; j < idx.size(); ++j) {
      f.tensors[idx[j]] = sub.fields[k].tensors[j];
    }
  }
  for (size_t c = 0; c < full.children.size(); ++c) {
    ScatterState(full.children[c], sub.children[c], idx);
  }
}

}  // namespace

Optimizer::Optimizer(TensorList params, TransformPtr transform)
    : params_(std::move(params)), transform_(std::move(transform)) {
  TORCH_CHECK(transform_ != nullptr, "Optimizer: `transform` is null");
  TORCH_CHECK(!params_.empty(), "Optimizer: got an empty parameter list");
  TensorList detached;
  for (const auto& p : params_) detached.push_back(p.detach());
  state_ = transform_->Init(detached);
}

void Optimizer::ZeroGrad() {
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
}

void Optimizer::Step() {
  at::NoGradGuard no_grad;
  std::vector<size_t> with_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad().defined()) with_grad.push_back(i);
  }
  if (with_grad.empty()) return;
  TensorList grads, params;
  for (size_t i : with_grad) {
    grads.push_back(params_[i].grad());
    params.push_back(params_[i]);
  }
  TensorList updates;
  if (with_grad.size() == params_.size()) {
    updates = transform_->Update(grads, state_, &params, /*inplace=*/true);
  } else {
    TransformState sub = SelectState(state_, with_grad);
    updates = transform_->Update(grads, sub, &params, /*inplace=*/true);
    ScatterState(state_, sub, with_grad);
  }
  for (size_t j = 0; j < params.size(); ++j) params[j].add_(updates[j]);
}

FuncOptimizer::FuncOptimizer(TransformPtr transform)
    : transform_(std::move(transform)) {
  TORCH_CHECK(transform_ != nullptr, "FuncOptimizer: `transform` is null");
}

TensorList FuncOptimizer::Step(const at::Tensor& loss,
                               const TensorList& params) {
  TORCH_CHECK(loss.numel() == 1, "FuncOptimizer::Step: `loss` must be a "
              "scalar, got shape ", loss.sizes());
  TORCH_CHECK(loss.requires_grad(), "FuncOptimizer::Step: `loss` does not "
              "depend on `params` (it does not require grad)");
  if (!initialized_) {
    state_ = transform_->Init(params);
    initialized_ = true;
  }
  TensorList grads = torch::autograd::grad({loss}, params, {},
                                           /*retain_graph=*/true,
                                           /*create_graph=*/true,
                                           /*allow_unused=*/true);
  bool any = false;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) {
      any = true;
    } else {
      grads[i] = at::zeros_like(params[i]);
    }
  }
  TORCH_CHECK(any, "FuncOptimizer::Step: `loss` does not depend on any of "
              "`params`");
  TensorList updates = transform_->Update(grads, state_, &params, false);
  return ApplyUpdates(params, updates, /*inplace=*/false);
}

}  // namespace metafuse::optim
