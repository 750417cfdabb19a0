// The building blocks of every optimizer (Optax/TorchOpt names and meaning).
// Each returns an immutable, shareable GradientTransformation. Arguments are
// validated here, with messages that name the argument.
#pragma once

#include <vector>

#include <c10/util/Optional.h>

#include "metafuse/optim/gradient_transformation.h"

namespace metafuse::optim {

// updates * step_size.
TransformPtr Scale(Hyper step_size);
// updates[i] * factors[i], leaf by leaf (e.g. Meta-SGD's learned
// per-parameter learning rates); factors broadcast against their leaf.
TransformPtr ScalePerLeaf(TensorList factors);
// updates * schedule(count); count starts at 0.
TransformPtr ScaleBySchedule(Schedule schedule, std::string description);
// -updates (maximize instead of minimize).
TransformPtr FlipSign();

// Adam's preconditioning: mu_hat / (sqrt(nu_hat + eps_root) + eps), with bias
// correction from the step count. amsgrad uses the running maximum of nu
// (torch.optim's amsgrad=True).
TransformPtr ScaleByAdam(double b1, double b2, double eps, double eps_root,
                         bool moment_requires_grad, bool amsgrad = false);
// Adamax (torch.optim semantics): mu_hat / max(b2 * nu, |g| + eps).
TransformPtr ScaleByAdamax(double b1, double b2, double eps,
                           bool moment_requires_grad);
// RAdam (torch.optim semantics): rectified Adam, SGD-with-momentum while the
// variance estimate is untrustworthy (rho_t <= threshold).
TransformPtr ScaleByRAdam(double b1, double b2, double eps, double threshold,
                          bool moment_requires_grad);
// Adadelta: sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g.
TransformPtr ScaleByAdadelta(double rho, double eps, bool moment_requires_grad);
// RMSProp: g / (sqrt(nu) + eps).
TransformPtr ScaleByRms(double alpha, double eps, double initial_scale);
// Centered RMSProp: g / (sqrt(nu - mu^2) + eps).
TransformPtr ScaleByStddev(double alpha, double eps, double initial_scale);
// Adagrad: g / (sqrt(sum of g^2) + eps).
TransformPtr ScaleByRss(double initial_accumulator_value, double eps);

// Momentum (torch.optim.SGD semantics, the first step's buffer is g itself);
// nesterov returns g + momentum * trace.
TransformPtr Trace(double momentum, double dampening, bool nesterov,
                   bool moment_requires_grad);
// updates + weight_decay * params, on the leaves where `mask` is true (all
// leaves when `mask` is empty).
TransformPtr AddDecayedWeights(double weight_decay, std::vector<bool> mask);
// Applies `inner` only to the leaves where mask is true; others pass through.
TransformPtr Masked(TransformPtr inner, std::vector<bool> mask);
// Replaces NaN and infinities in the updates.
// Unset posinf/neginf mean the largest finite values of the dtype.
TransformPtr NanToNum(double nan, c10::optional<double> posinf,
                      c10::optional<double> neginf);
// Scales the updates so that their global norm is at most max_norm
// (torch.nn.utils.clip_grad_norm_ semantics; norm_type may be inf). The norm
// is computed without a graph (as torch and TorchOpt do): the coefficient is
// a constant for autograd. error_if_nonfinite throws on a NaN/inf norm.
TransformPtr ClipGradNorm(double max_norm, double norm_type,
                          bool error_if_nonfinite = false);
// Registers `hook` on every update tensor that requires grad: it then acts on
// the gradient flowing back through the update (e.g. zero NaNs).
TransformPtr RegisterHook(std::function<at::Tensor(const at::Tensor&)> hook,
                          std::string description);
// Runs transforms in sequence; state is one child state per transform.
TransformPtr Chain(std::vector<TransformPtr> transforms);
// Passes updates through.
TransformPtr Identity();

}  // namespace metafuse::optim
