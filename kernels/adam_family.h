// What Adam, AdamW and RAdam share (included by kernels/adam.cc and
// kernels/radam.cc): the options, the two moment states, the moment part of
// the closed-form backward and the op plumbing. Each optimizer adds its own
// coefficients, element function and the update's part of the backward.
#pragma once

#include <cmath>
#include <tuple>

#include "kernels/fused_step.h"
#include "kernels/optimizers.h"

namespace metafuse::kernels {

struct AdamFamily {
  static constexpr int kNumAux = 1;  // the square root of the second moment
  static constexpr int kNumVariants = 1;
  struct Hyper {
    double count, lr, b1, b2, eps, eps_root, weight_decay, decoupled, maximize;
  };

  static constexpr int NumStates(int) { return 2; }
  static const char* StateName(int j) { return j == 0 ? "mus" : "nus"; }
  static int Variant(const Hyper&) { return 0; }
  static bool UsesParam(const Hyper& h) { return h.weight_decay != 0.0; }
  static double Sign(const Hyper& h) { return SignOf(h.maximize); }
  static double L2(const Hyper& h) { return h.decoupled ? 0.0 : h.weight_decay; }
  static double Decoupled(const Hyper& h) {
    return h.decoupled ? h.lr * h.weight_decay : 0.0;
  }
  static double Bc1(const Hyper& h) { return 1.0 - std::pow(h.b1, h.count); }
  static double Bc2(const Hyper& h) { return 1.0 - std::pow(h.b2, h.count); }

  static void CheckCommon(const char* name, const Hyper& h) {
    CheckCount(name, static_cast<int64_t>(h.count));
    TORCH_CHECK(h.b1 >= 0.0 && h.b1 < 1.0, "metafuse::", name,
                ": `b1` must lie in [0, 1), got ", h.b1);
    TORCH_CHECK(h.b2 > 0.0 && h.b2 < 1.0, "metafuse::", name,
                ": `b2` must lie in (0, 1), got ", h.b2);
    TORCH_CHECK(h.eps >= 0.0 && h.eps_root >= 0.0, "metafuse::", name,
                ": `eps` and `eps_root` must be >= 0, got ", h.eps, " and ",
                h.eps_root);
  }

  // Given G_mu' and G_nu' (all that reaches the new moments):
  //   grad_mu = b1 G_mu',  grad_nu = b2 G_nu'
  //   grad_ge = (1-b1) G_mu' + 2 (1-b2) ge G_nu'
  static std::vector<at::Tensor> MomentGrads(const Hyper& h,
                                             const SavedStep& s,
                                             const at::Tensor& g_mu,
                                             const at::Tensor& g_nu) {
    const at::Tensor ge = EffectiveGrad(s, Sign(h), L2(h));
    const at::Tensor grad_ge =
        g_mu * (1.0 - h.b1) + ge * g_nu * (2.0 * (1.0 - h.b2));
    std::vector<at::Tensor> out =
        GradsFromEffective(s, grad_ge, Sign(h), L2(h), Decoupled(h));
    out.push_back(g_mu * h.b1);
    out.push_back(g_nu * h.b2);
    return out;
  }

  template <class Opt>
  static std::tuple<TensorVec, TensorVec, TensorVec> Multi(
      at::TensorList grads, at::TensorList mus, at::TensorList nus,
      at::TensorList params, int64_t count, double lr, double b1, double b2,
      double eps, double eps_root, double weight_decay,
      bool decoupled_weight_decay, bool maximize) {
    const Hyper h{static_cast<double>(count), lr, b1, b2, eps, eps_root,
                  weight_decay, decoupled_weight_decay ? 1.0 : 0.0,
                  maximize ? 1.0 : 0.0};
    StepOutputs out = FusedStep<Opt>(h, grads, params, {mus, nus});
    return {out.updates, out.states[0], out.states[1]};
  }

  // In place: params += update, mus and nus overwritten.
  template <class Opt>
  static void MultiInPlace(at::TensorList grads, at::TensorList mus,
                           at::TensorList nus, at::TensorList params,
                           int64_t count, double lr, double b1, double b2,
                           double eps, double eps_root, double weight_decay,
                           bool decoupled_weight_decay, bool maximize) {
    const Hyper h{static_cast<double>(count), lr, b1, b2, eps, eps_root,
                  weight_decay, decoupled_weight_decay ? 1.0 : 0.0,
                  maximize ? 1.0 : 0.0};
    FusedStepInPlace<Opt>(h, params, grads, {mus, nus});
  }

  template <class Opt>
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> Single(
      const at::Tensor& grad, const at::Tensor& mu, const at::Tensor& nu,
      const c10::optional<at::Tensor>& param, int64_t count, double lr,
      double b1, double b2, double eps, double eps_root, double weight_decay,
      bool decoupled_weight_decay, bool maximize) {
    auto [u, m, v] =
        Multi<Opt>({grad}, {mu}, {nu}, ListOf(param), count, lr, b1, b2, eps,
                   eps_root, weight_decay, decoupled_weight_decay, maximize);
    return {u[0], m[0], v[0]};
  }
};

// The schema text both ops use after their name.
#define METAFUSE_ADAM_FAMILY_OPTIONS(LR)                                   \
  "int count, float lr=" LR ", float b1=0.9, float b2=0.999, "            \
  "float eps=1e-8, float eps_root=0.0, float weight_decay=0.0, "          \
  "bool decoupled_weight_decay=False, bool maximize=False"

}  // namespace metafuse::kernels
