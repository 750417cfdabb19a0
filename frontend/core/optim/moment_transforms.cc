// Adam-family preconditioners: first and second moments with bias correction.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "kernels/adam_direction.h"
#include "metafuse/optim/state_helpers.h"
#include "metafuse/optim/transforms.h"

namespace metafuse::optim {
namespace {

using internal::CheckStateMatches;
using internal::Ema;
using internal::EmaSquare;

// State shared by the three: mu, nu and the host-side count.
TransformState MomentsState(const char* name, const TensorList& params,
                            const char* second_name, bool requires_grad) {
  return {name,
          {internal::FilledLike("mu", params, 0.0, requires_grad),
           internal::FilledLike(second_name, params, 0.0, requires_grad),
           internal::CountField()},
          {}};
}

// mu_hat / (sqrt(second_hat + eps_root) + eps) in ATen ops (any dtype,
// device, layout; differentiable when the tensors require grad).
at::Tensor DirectionOfMoments(const at::Tensor& mu, const at::Tensor& second,
                              const AdamDirectionScalars& s) {
  at::Tensor denom = internal::RootOfMoment(second / s.bc2 + s.eps_root) + s.eps;
  return (mu / s.bc1) / denom;
}

// Adam's moments and direction as the chain of ATen ops.
at::Tensor AdamDirectionByOps(at::Tensor& mu, at::Tensor& nu, const at::Tensor& g,
                              const AdamDirectionScalars& s, bool inplace) {
  Ema(mu, g, s.b1, inplace);
  EmaSquare(nu, g, s.b2, inplace);
  return DirectionOfMoments(mu, nu, s);
}

// Probe gradients without touching any random generator (the user's
// streams stay where they are; vmap's randomness checks never see it):
// a linear congruential sequence over signs and magnitudes 1e-6..1e3.
at::Tensor ProbeGradient(int64_t n, uint64_t seed, at::ScalarType dtype) {
  std::vector<double> values(n);
  for (double& v : values) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    const double unit = static_cast<double>(seed >> 11) / 9007199254740992.0;
    const double magnitude = std::pow(10.0, static_cast<int>((seed >> 3) % 10) - 6);
    v = (unit * 2.0 - 1.0) * magnitude;
  }
  return at::tensor(values, at::TensorOptions().dtype(at::kDouble)).to(dtype);
}

// Three steps of the loop and of the op chain on n elements agree bit for bit.
bool OneLoopReproducesTheOpsAt(at::ScalarType type, int64_t n) {
  at::NoGradGuard no_grad;
  at::Tensor mu_ops = at::zeros({n}, at::TensorOptions().dtype(type));
  at::Tensor nu_ops = at::zeros_like(mu_ops);
  at::Tensor mu_loop = mu_ops.clone(), nu_loop = nu_ops.clone();
  for (int t = 1; t <= 3; ++t) {
    const at::Tensor g = ProbeGradient(n, t, type);
    const AdamDirectionScalars s{0.9, 0.999, 1.0 - std::pow(0.9, t),
                                 1.0 - std::pow(0.999, t), 1e-8, 1e-10};
    at::Tensor by_ops = AdamDirectionByOps(mu_ops, nu_ops, g, s, true);
    at::Tensor by_loop = AdamDirectionInPlace(mu_loop, nu_loop, g, s);
    if (!at::equal(by_ops, by_loop) || !at::equal(mu_ops, mu_loop) ||
        !at::equal(nu_ops, nu_loop)) {
      return false;
    }
  }
  return true;
}

// Whether kernels/adam_direction's one loop gives the op chain's bits in
// this process (it assumes ATen fuses add-with-alpha and addcmul into one
// multiply-add): both run three steps on sizes below, at and above the
// vector widths and on 4099 elements (vector bodies and tails: torch 2.15's
// float chain differed from the loop at 16 elements while agreeing at
// 4099); decided once per dtype.
bool OneLoopReproducesTheOps(at::ScalarType dtype) {
  auto probe = [](at::ScalarType type) {
    for (int64_t n : {1, 7, 16, 33, 4099}) {
      if (!OneLoopReproducesTheOpsAt(type, n)) return false;
    }
    return true;
  };
  static const bool for_float = probe(at::kFloat);
  static const bool for_double = probe(at::kDouble);
  return dtype == at::kFloat ? for_float : dtype == at::kDouble && for_double;
}

// The one loop runs where it changes nothing: in place, no autograd to
// record, tensors it takes, and the probe above agreeing.
bool UseOneLoop(const at::Tensor& mu, const at::Tensor& nu, const at::Tensor& g,
                bool inplace) {
  if (!inplace) return false;
  if (at::GradMode::is_enabled() &&
      (mu.requires_grad() || nu.requires_grad() || g.requires_grad())) {
    return false;
  }
  return AdamDirectionApplies(mu, nu, g) && OneLoopReproducesTheOps(g.scalar_type());
}

class ScaleByAdamTx final : public GradientTransformation {
 public:
  ScaleByAdamTx(double b1, double b2, double eps, double eps_root, bool rg,
                bool amsgrad)
      : b1_(b1), b2_(b2), eps_(eps), eps_root_(eps_root), requires_grad_(rg),
        amsgrad_(amsgrad) {}

  TransformState Init(const TensorList& params) const override {
    if (!amsgrad_) {
      return MomentsState("ScaleByAdamState", params, "nu", requires_grad_);
    }
    // AMSGrad keeps the running maximum of nu as well.
    TransformState s = MomentsState("ScaleByAmsgradState", params, "nu",
                                    requires_grad_);
    s.fields.insert(s.fields.begin() + 2,
                    internal::FilledLike("nu_max", params, 0.0, requires_grad_));
    return s;
  }

  TensorList Update(const TensorList& updates, TransformState& state,
                    const TensorList*, bool inplace) const override {
    CheckStateMatches(state, updates);
    const int64_t t = internal::ReadCount(state) + 1;
    const double bc1 = 1.0 - std::pow(b1_, t);
    const double bc2 = 1.0 - std::pow(b2_, t);
    TensorList& mu = state.field("mu").tensors;
    TensorList& nu = state.field("nu").tensors;
    const AdamDirectionScalars s{b1_, b2_, bc1, bc2, eps_, eps_root_};
    TensorList out;
    out.reserve(updates.size());
    for (size_t i = 0; i < updates.size(); ++i) {
      if (!amsgrad_) {
        out.push_back(UseOneLoop(mu[i], nu[i], updates[i], inplace)
                          ? AdamDirectionInPlace(mu[i], nu[i], updates[i], s)
                          : AdamDirectionByOps(mu[i], nu[i], updates[i], s, inplace));
        continue;
      }
      Ema(mu[i], updates[i], b1_, inplace);
      EmaSquare(nu[i], updates[i], b2_, inplace);
      at::Tensor& nu_max = state.field("nu_max").tensors[i];
      nu_max = inplace ? at::maximum_out(nu_max, nu_max, nu[i])
                       : at::maximum(nu_max, nu[i]);
      out.push_back(DirectionOfMoments(mu[i], nu_max, s));
    }
    internal::AdvanceCount(state, inplace);
    return out;
  }

  std::string Describe() const override {
    std::ostringstream os;
    os << "scale_by_adam(b1=" << b1_ << ", b2=" << b2_ << ", eps=" << eps_
       << ", eps_root=" << eps_root_ << (amsgrad_ ? ", amsgrad" : "") << ")";
    return os.str();
  }

 private:
  double b1_, b2_, eps_, eps_root_;
  bool requires_grad_, amsgrad_;
};

class ScaleByAdamaxTx final : public GradientTransformation {
 public:
  ScaleByAdamaxTx(double b1, double b2, double eps, bool rg)
      : b1_(b1), b2_(b2), eps_(eps), requires_grad_(rg) {}

  TransformState Init(const TensorList& params) const override {
    return MomentsState("ScaleByAdamaxState", params, "nu", requires_grad_);
  }

  TensorList Update(const TensorList& updates, TransformState& state,
                    const TensorList*, bool inplace) const override {
    CheckStateMatches(state, updates);
    const int64_t t = internal::ReadCount(state) + 1;
    const double bc1 = 1.0 - std::pow(b1_, t);
    TensorList& mu = state.field("mu").tensors;
    TensorList& nu = state.field("nu").tensors;
    TensorList out;
    out.reserve(updates.size());
    for (size_t i = 0; i < updates.size(); ++i) {
      Ema(mu[i], updates[i], b1_, inplace);
      // The infinity norm: max(b2 * nu, |g| + eps), as torch.optim.Adamax.
      at::Tensor candidate = updates[i].abs() + eps_;
      if (inplace) {
        at::maximum_out(nu[i], nu[i].mul_(b2_), candidate);
      } else {
        nu[i] = at::maximum(nu[i] * b2_, candidate);
      }
      out.push_back((mu[i] / bc1) / nu[i]);
    }
    internal::AdvanceCount(state, inplace);
    return out;
  }

  std::string Describe() const override {
    std::ostringstream os;
    os << "scale_by_adamax(b1=" << b1_ << ", b2=" << b2_ << ", eps=" << eps_
       << ")";
    return os.str();
  }

 private:
  double b1_, b2_, eps_;
  bool requires_grad_;
};

class ScaleByRAdamTx final : public GradientTransformation {
 public:
  ScaleByRAdamTx(double b1, double b2, double eps, double threshold, bool rg)
      : b1_(b1), b2_(b2), eps_(eps), threshold_(threshold),
        requires_grad_(rg) {}

  TransformState Init(const TensorList& params) const override {
    return MomentsState("ScaleByRAdamState", params, "nu", requires_grad_);
  }

  TensorList Update(const TensorList& updates, TransformState& state,
                    const TensorList*, bool inplace) const override {
    CheckStateMatches(state, updates);
    const int64_t t = internal::ReadCount(state) + 1;
    const double bc1 = 1.0 - std::pow(b1_, t);
    const double bc2 = 1.0 - std::pow(b2_, t);
    // Length of the approximated simple moving average (Liu et al., 2020).
    const double rho_inf = 2.0 / (1.0 - b2_) - 1.0;
    const double rho_t = rho_inf - 2.0 * t * std::pow(b2_, t) / bc2;
    const bool rectify = rho_t > threshold_;
    const double rect =
        rectify ? std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                            ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                : 0.0;
    TensorList& mu = state.field("mu").tensors;
    TensorList& nu = state.field("nu").tensors;
    TensorList out;
    out.reserve(updates.size());
    for (size_t i = 0; i < updates.size(); ++i) {
      Ema(mu[i], updates[i], b1_, inplace);
      EmaSquare(nu[i], updates[i], b2_, inplace);
      at::Tensor mu_hat = mu[i] / bc1;
      if (rectify) {
        at::Tensor adaptive =
            std::sqrt(bc2) / (internal::RootOfMoment(nu[i]) + eps_);
        out.push_back(mu_hat * adaptive * rect);
      } else {
        out.push_back(mu_hat);
      }
    }
    internal::AdvanceCount(state, inplace);
    return out;
  }

  std::string Describe() const override {
    std::ostringstream os;
    os << "scale_by_radam(b1=" << b1_ << ", b2=" << b2_ << ", eps=" << eps_
       << ", threshold=" << threshold_ << ")";
    return os.str();
  }

 private:
  double b1_, b2_, eps_, threshold_;
  bool requires_grad_;
};

void CheckBetas(double b1, double b2) {
  internal::CheckInUnitInterval(b1, "b1 (betas[0])", /*closed_right=*/false);
  internal::CheckInUnitInterval(b2, "b2 (betas[1])", /*closed_right=*/false);
}

}  // namespace

TransformPtr ScaleByAdam(double b1, double b2, double eps, double eps_root,
                         bool moment_requires_grad, bool amsgrad) {
  CheckBetas(b1, b2);
  internal::CheckNonNegative(eps, "eps");
  internal::CheckNonNegative(eps_root, "eps_root");
  return std::make_shared<ScaleByAdamTx>(b1, b2, eps, eps_root,
                                         moment_requires_grad, amsgrad);
}

TransformPtr ScaleByAdamax(double b1, double b2, double eps,
                           bool moment_requires_grad) {
  CheckBetas(b1, b2);
  internal::CheckNonNegative(eps, "eps");
  return std::make_shared<ScaleByAdamaxTx>(b1, b2, eps, moment_requires_grad);
}

TransformPtr ScaleByRAdam(double b1, double b2, double eps, double threshold,
                          bool moment_requires_grad) {
  CheckBetas(b1, b2);
  internal::CheckNonNegative(eps, "eps");
  return std::make_shared<ScaleByRAdamTx>(b1, b2, eps, threshold,
                                          moment_requires_grad);
}

}  // namespace metafuse::optim
