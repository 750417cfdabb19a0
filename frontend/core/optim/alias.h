// The optimizers users name (torch.optim / TorchOpt aliases), each a chain of
// the transforms in transforms.h. Defaults follow torch.optim.
#pragma once

#include "metafuse/optim/transforms.h"

namespace metafuse::optim {

// A learning rate: a number, a tensor (learned), or a schedule of the count.
struct LearningRate {
  Hyper constant = 0.0;
  Schedule schedule;  // when set, used instead of `constant`
  LearningRate(double v) : constant(v) {}            // NOLINT
  LearningRate(at::Tensor t) : constant(std::move(t)) {}  // NOLINT
  LearningRate(Schedule s) : schedule(std::move(s)) {}    // NOLINT
};

struct SgdOptions {
  LearningRate lr = 1e-3;
  double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false, maximize = false, moment_requires_grad = false;
  bool fused = false;  // one multi-tensor kernel from kernels/ per update
};
struct AdamOptions {
  LearningRate lr = 1e-3;
  double b1 = 0.9, b2 = 0.999, eps = 1e-8, eps_root = 0.0, weight_decay = 0.0;
  bool maximize = false, moment_requires_grad = false;
  bool amsgrad = false;
  std::vector<bool> weight_decay_mask;  // AdamW only; empty: every leaf
  bool fused = false;
};
struct AdamaxOptions {
  LearningRate lr = 2e-3;
  double b1 = 0.9, b2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool maximize = false, moment_requires_grad = false;
  bool fused = false;
};
struct RAdamOptions {
  LearningRate lr = 1e-3;
  double b1 = 0.9, b2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double threshold = 5.0;
  bool maximize = false, moment_requires_grad = false;
  bool fused = false;
};
struct AdadeltaOptions {
  LearningRate lr = 1.0;
  double rho = 0.9, eps = 1e-6, weight_decay = 0.0;
  bool maximize = false, moment_requires_grad = false;
  bool fused = false;
};
struct AdagradOptions {
  LearningRate lr = 1e-2;
  double lr_decay = 0.0, weight_decay = 0.0, initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;
  bool fused = false;
};
struct RmsPropOptions {
  LearningRate lr = 1e-2;
  double alpha = 0.99, eps = 1e-8, weight_decay = 0.0, momentum = 0.0;
  bool centered = false, maximize = false, moment_requires_grad = false;
  bool fused = false;
  // TorchOpt's extensions: the square average starts at initial_scale, and
  // nesterov momentum (g + momentum * trace) when momentum > 0.
  double initial_scale = 0.0;
  bool nesterov = false;
};

TransformPtr Sgd(const SgdOptions& o);
TransformPtr Adam(const AdamOptions& o);
TransformPtr AdamW(AdamOptions o);  // weight_decay defaults to 1e-2 there
TransformPtr Adamax(const AdamaxOptions& o);
TransformPtr RAdam(const RAdamOptions& o);
TransformPtr Adadelta(const AdadeltaOptions& o);
TransformPtr Adagrad(const AdagradOptions& o);
TransformPtr RmsProp(const RmsPropOptions& o);

// scale(-lr) or scale_by_schedule(-schedule): the final step of every alias.
TransformPtr ScaleByLearningRate(const LearningRate& lr, bool flip = true);

}  // namespace metafuse::optim
