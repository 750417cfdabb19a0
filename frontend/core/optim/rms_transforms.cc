// Square-average preconditioners: RMSProp (plain and centered), Adagrad,
// Adadelta.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <sstream>

#include "metafuse/optim/state_helpers.h"
#include "metafuse/optim/transforms.h"

namespace metafuse::optim {
namespace {

using internal::CheckStateMatches;
using internal::Ema;
using internal::EmaSquare;

class ScaleByRmsTx final : public GradientTransformation {
 public:
  ScaleByRmsTx(double alpha, double eps, double initial_scale, bool centered)
      : alpha_(alpha), eps_(eps), initial_(initial_scale), centered_(centered) {}

  TransformState Init(const TensorList& params) const override {
    if (centered_) {
      return {"ScaleByStddevState",
              {internal::FilledLike("mu", params, 0.0, false),
               internal::FilledLike("nu", params, initial_, false)},
              {}};
    }
    return {"ScaleByRmsState",
            {internal::FilledLike("nu", params, initial_, false)},
            {}};
  }

  TensorList Update(const TensorList& updates, TransformState& state,
                    const TensorList*, bool inplace) const override {
    CheckStateMatches(state, updates);
    TensorList& nu = state.field("nu").tensors;
    TensorList out;
    out.reserve(updates.size());
    for (size_t i = 0; i < updates.size(); ++i) {
      EmaSquare(nu[i], updates[i], alpha_, inplace);
      at::Tensor variance = nu[i];
      if (centered_) {
        at::Tensor& mu = state.field("mu").tensors[i];
        Ema(mu, updates[i], alpha_, inplace);
        variance = nu[i].addcmul(mu, mu, -1.0);
      }
      out.push_back(updates[i] / (internal::RootOfMoment(variance) + eps_));
    }
    return out;
  }

  std::string Describe() const override {
    std::ostringstream os;
    os << (centered_ ? "scale_by_stddev" : "scale_by_rms") << "(alpha="
       << alpha_ << ", eps=" << eps_ << ")";
    return os.str();
  }

 private:
  double alpha_, eps_, initial_;
  bool centered_;
};

class ScaleByRssTx final : public GradientTransformation {
 public:
  ScaleByRssTx(double initial, double eps) : initial_(initial), eps_(eps) {}

  TransformState Init(const TensorList& params) const override {
    return {"ScaleByRssState",
            {internal::FilledLike("sum_of_squares", params, initial_, false)},
            {}};
  }

  TensorList Update(const TensorList& updates, TransformState& state,
                    const TensorList*, bool inplace) const override {
    CheckStateMatches(state, updates);
    TensorList& sum = state.field("sum_of_squares").tensors;
    TensorList out;
    out.reserve(updates.size());
    for (size_t i = 0; i < updates.size(); ++i) {
      const at::Tensor& g = updates[i];
      sum[i] = inplace ? sum[i].addcmul_(g, g) : sum[i].addcmul(g, g);
      out.push_back(g / (internal::RootOfMoment(sum[i]) + eps_));
    }
    return out;
  }

  std::string Describe() const override {
    std::ostringstream os;
    os << "scale_by_rss(initial_accumulator_value=" << initial_
       << ", eps=" << eps_ << ")";
    return os.str();
  }

 private:
  double initial_, eps_;
};

class ScaleByAdadeltaTx final : public GradientTransformation {
 public:
  ScaleByAdadeltaTx(double rho, double eps, bool rg)
      : rho_(rho), eps_(eps), requires_grad_(rg) {}

  TransformState Init(const TensorList& params) const override {
    return {"ScaleByAdadeltaState",
            {internal::FilledLike("e_g", params, 0.0, requires_grad_),
             internal::FilledLike("e_x", params, 0.0, requires_grad_)},
            {}};
  }

  TensorList Update(const TensorList& updates, TransformState& state,
                    const TensorList*, bool inplace) const override {
    CheckStateMatches(state, updates);
    TensorList& e_g = state.field("e_g").tensors;  // E[g^2]
    TensorList& e_x = state.field("e_x").tensors;  // E[dx^2]
    TensorList out;
    out.reserve(updates.size());
    for (size_t i = 0; i < updates.size(); ++i) {
      EmaSquare(e_g[i], updates[i], rho_, inplace);
      at::Tensor delta =
          internal::RootOfMoment(e_x[i] + eps_) /
              internal::RootOfMoment(e_g[i] + eps_) * updates[i];
      EmaSquare(e_x[i], delta, rho_, inplace);
      out.push_back(delta);
    }
    return out;
  }

  std::string Describe() const override {
    std::ostringstream os;
    os << "scale_by_adadelta(rho=" << rho_ << ", eps=" << eps_ << ")";
    return os.str();
  }

 private:
  double rho_, eps_;
  bool requires_grad_;
};

}  // namespace

TransformPtr ScaleByRms(double alpha, double eps, double initial_scale) {
  internal::CheckInUnitInterval(alpha, "alpha", /*closed_right=*/true);
  internal::CheckNonNegative(eps, "eps");
  return std::make_shared<ScaleByRmsTx>(alpha, eps, initial_scale, false);
}

TransformPtr ScaleByStddev(double alpha, double eps, double initial_scale) {
  internal::CheckInUnitInterval(alpha, "alpha", /*closed_right=*/true);
  internal::CheckNonNegative(eps, "eps");
  return std::make_shared<ScaleByRmsTx>(alpha, eps, initial_scale, true);
}

TransformPtr ScaleByRss(double initial_accumulator_value, double eps) {
  internal::CheckNonNegative(initial_accumulator_value,
                             "initial_accumulator_value");
  internal::CheckNonNegative(eps, "eps");
  return std::make_shared<ScaleByRssTx>(initial_accumulator_value, eps);
}

TransformPtr ScaleByAdadelta(double rho, double eps,
                             bool moment_requires_grad) {
  internal::CheckInUnitInterval(rho, "rho", /*closed_right=*/true);
  // With eps = 0 the first step is 0 / 0 wherever a gradient is 0, and every
  // update is 0 (E[dx^2] starts at 0); the fused operator refuses it too.
  TORCH_CHECK(eps > 0.0, "scale_by_adadelta: `eps` must be > 0, got ", eps);
  return std::make_shared<ScaleByAdadeltaTx>(rho, eps, moment_requires_grad);
}

}  // namespace metafuse::optim
