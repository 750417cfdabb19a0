// What Adam, AdamW and RAdam share (included by kernels/adam.cc and
// kernels/radam.cc): the schema (states and options), the hyper-parameters,
// their checks, and the closed-form backward in ATen ops, which is
// AdamBackwardElement (kernels/optim_math.h) on tensors.
#pragma once

#include <cmath>
#include <optional>
#include <vector>

#include "kernels/fused_op.h"

namespace metafuse::kernels {

struct AdamFamily : FusedOptimizer {
  static constexpr StateArg kStates[] = {{"mu", "mus"}, {"nu", "nus"}};
  static constexpr const char* kOptions =
      "int count, float lr=0.001, float b1=0.9, float b2=0.999, "
      "float eps=1e-8, float eps_root=0.0, float weight_decay=0.0, "
      "bool decoupled_weight_decay=False, bool maximize=False";
  static constexpr int kNumAux = 1;  // the square root of the second moment
  struct Hyper {
    double count, lr, b1, b2, eps, eps_root, weight_decay, decoupled, maximize;
  };

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

  template <typename A>
  static AdamCoeffs<A> MakeAdamCoeffsOf(const Hyper& h) {
    return MakeAdamCoeffs<A>(static_cast<int64_t>(h.count), h.lr, h.b1, h.b2,
                             h.eps, h.eps_root, h.weight_decay,
                             h.decoupled != 0.0, h.maximize != 0.0);
  }

  // The closed-form backward in differentiable ATen ops (so every order is
  // exact): AdamBackwardElement with A = at::Tensor, C = double, on the saved
  // root r = aux[0]. A gradient reaching r itself (when this backward is
  // differentiated again) enters like one reaching nu':
  //   gnu' += grad_r inv_bc2 / (2 r)   (0 where r = 0: RootInverse)
  // With `plain_step` (RAdam's unrectified steps, update = -plain_step mu'
  // - dec p) the update does not depend on r: G_mu' = gmu' - plain_step gu,
  // G_nu' = gnu', then AdamMomentBackward.
  static std::vector<at::Tensor> TensorBackward(
      const AdamCoeffs<double>& c, const SavedStep& s,
      std::optional<double> plain_step = std::nullopt) {
    const at::Tensor& r = s.aux[0];
    const at::Tensor p = OrZero(s, s.p);
    const at::Tensor g_nu =
        s.grad_aux[0].defined()
            ? s.grad_s[1] + s.grad_aux[0] * (0.5 * c.inv_bc2) *
                               RootInverse<at::Tensor>::Of(r)
            : s.grad_s[1];
    at::Tensor grad_g, grad_p, grad_mu, grad_nu;
    if (plain_step) {
      AdamMomentBackward<at::Tensor, double>(
          c, s.g, p, s.grad_u, s.grad_s[0] - s.grad_u * *plain_step, g_nu,
          &grad_g, &grad_p, &grad_mu, &grad_nu);
    } else {
      AdamBackwardElement<at::Tensor, double>(
          c, s.g, p, s.s_out[0], r, s.grad_u, s.grad_s[0], g_nu, &grad_g,
          &grad_p, &grad_mu, &grad_nu);
    }
    return {grad_g, ParamGrad(s, grad_p), grad_mu, grad_nu};
  }
};

}  // namespace metafuse::kernels
