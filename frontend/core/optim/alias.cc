#include "metafuse/optim/alias.h"

#include "metafuse/optim/fused_transforms.h"
#include "metafuse/optim/state_helpers.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace metafuse::optim {
namespace {

void CheckLearningRate(const LearningRate& lr) {
  if (lr.schedule || lr.constant.is_tensor()) return;
  TORCH_CHECK(lr.constant.value >= 0.0,
              "`lr` must be >= 0 (a learning rate; use maximize=True to "
              "ascend), got ", lr.constant.value);
}

// Assembles [flip_sign] + middle + [scale by -lr] into one chain.
TransformPtr WithSignAndRate(bool maximize, std::vector<TransformPtr> middle,
                             const LearningRate& lr) {
  CheckLearningRate(lr);
  std::vector<TransformPtr> parts;
  if (maximize) parts.push_back(FlipSign());
  for (auto& t : middle) {
    if (t) parts.push_back(std::move(t));
  }
  parts.push_back(ScaleByLearningRate(lr));
  return Chain(std::move(parts));
}

TransformPtr CoupledDecay(double weight_decay) {
  return weight_decay != 0.0 ? AddDecayedWeights(weight_decay, {}) : nullptr;
}

}  // namespace

TransformPtr ScaleByLearningRate(const LearningRate& lr, bool flip) {
  const double sign = flip ? -1.0 : 1.0;
  if (lr.schedule) {
    Schedule s = lr.schedule;
    return ScaleBySchedule([s, sign](int64_t c) { return sign * s(c); },
                           flip ? "-lr(count)" : "lr(count)");
  }
  if (lr.constant.is_tensor()) return Scale(lr.constant.tensor * sign);
  return Scale(sign * lr.constant.value);
}

TransformPtr Sgd(const SgdOptions& o) {
  if (o.fused) {
    auto unfused = o;
    unfused.fused = false;
    return FusedSgd(unfused);
  }
  TransformPtr momentum;
  if (o.momentum != 0.0) {
    momentum = Trace(o.momentum, o.dampening, o.nesterov,
                     o.moment_requires_grad);
  } else {
    TORCH_CHECK(!o.nesterov, "sgd: nesterov needs `momentum` > 0");
  }
  return WithSignAndRate(o.maximize, {CoupledDecay(o.weight_decay), momentum},
                         o.lr);
}

TransformPtr Adam(const AdamOptions& o) {
  if (o.fused) {
    auto unfused = o;
    unfused.fused = false;
    return FusedAdam(unfused, /*decoupled_weight_decay=*/false);
  }
  return WithSignAndRate(
      o.maximize,
      {CoupledDecay(o.weight_decay),
       ScaleByAdam(o.b1, o.b2, o.eps, o.eps_root, o.moment_requires_grad,
                   o.amsgrad)},
      o.lr);
}

TransformPtr AdamW(AdamOptions o) {
  if (o.fused) {
    auto unfused = o;
    unfused.fused = false;
    return FusedAdam(unfused, /*decoupled_weight_decay=*/true);
  }
  // Decoupled decay: applied to the preconditioned update, scaled by lr
  // together with it (torch.optim.AdamW: p *= 1 - lr * wd).
  TransformPtr decay =
      o.weight_decay != 0.0
          ? AddDecayedWeights(o.weight_decay, o.weight_decay_mask)
          : nullptr;
  return WithSignAndRate(
      o.maximize,
      {ScaleByAdam(o.b1, o.b2, o.eps, o.eps_root, o.moment_requires_grad,
                   o.amsgrad),
       decay},
      o.lr);
}

TransformPtr Adamax(const AdamaxOptions& o) {
  if (o.fused) {
    auto unfused = o;
    unfused.fused = false;
    return FusedAdamax(unfused);
  }
  return WithSignAndRate(
      o.maximize,
      {CoupledDecay(o.weight_decay),
       ScaleByAdamax(o.b1, o.b2, o.eps, o.moment_requires_grad)},
      o.lr);
}

TransformPtr RAdam(const RAdamOptions& o) {
  if (o.fused) {
    auto unfused = o;
    unfused.fused = false;
    return FusedRAdam(unfused);
  }
  return WithSignAndRate(
      o.maximize,
      {CoupledDecay(o.weight_decay),
       ScaleByRAdam(o.b1, o.b2, o.eps, o.threshold, o.moment_requires_grad)},
      o.lr);
}

TransformPtr Adadelta(const AdadeltaOptions& o) {
  if (o.fused) {
    auto unfused = o;
    unfused.fused = false;
    return FusedAdadelta(unfused);
  }
  return WithSignAndRate(
      o.maximize,
      {CoupledDecay(o.weight_decay),
       ScaleByAdadelta(o.rho, o.eps, o.moment_requires_grad)},
      o.lr);
}

TransformPtr Adagrad(const AdagradOptions& o) {
  if (o.fused) {
    auto unfused = o;
    unfused.fused = false;
    return FusedAdagrad(unfused);
  }
  TORCH_CHECK(o.lr_decay >= 0.0, "`lr_decay` must be >= 0, got ", o.lr_decay);
  LearningRate lr = o.lr;
  if (o.lr_decay != 0.0) {
    TORCH_CHECK(!o.lr.schedule && !o.lr.constant.is_tensor(),
                "adagrad: `lr_decay` needs a constant number `lr`");
    const double base = o.lr.constant.value, decay = o.lr_decay;
    // torch.optim.Adagrad: lr / (1 + (step - 1) * lr_decay), step from 1.
    lr = LearningRate(Schedule(
        [base, decay](int64_t c) { return base / (1.0 + c * decay); }));
  }
  return WithSignAndRate(
      o.maximize,
      {CoupledDecay(o.weight_decay),
       ScaleByRss(o.initial_accumulator_value, o.eps)},
      lr);
}

TransformPtr RmsProp(const RmsPropOptions& o) {
  internal::CheckNonNegative(o.initial_scale, "initial_scale");
  if (o.fused) {
    TORCH_CHECK(!o.nesterov && o.initial_scale == 0.0,
                "rmsprop(fused=True) supports neither `nesterov` nor a "
                "nonzero `initial_scale`; use fused=False for them");
    auto unfused = o;
    unfused.fused = false;
    return FusedRmsProp(unfused);
  }
  TransformPtr precondition =
      o.centered ? ScaleByStddev(o.alpha, o.eps, o.initial_scale)
                 : ScaleByRms(o.alpha, o.eps, o.initial_scale);
  TransformPtr momentum =
      o.momentum != 0.0
          ? Trace(o.momentum, 0.0, o.nesterov, o.moment_requires_grad)
          : nullptr;
  return WithSignAndRate(
      o.maximize, {CoupledDecay(o.weight_decay), precondition, momentum},
      o.lr);
}

}  // namespace metafuse::optim
