// metafuse::adam / adam_multi: Adam and AdamW, fused, with the exact
// closed-form backward.
#include <torch/library.h>

#include "kernels/adam_family.h"

namespace metafuse {
namespace kernels {
namespace {

struct Adam : AdamFamily {
  static constexpr const char* kName = "adam";
  template <typename A>
  using Coeffs = AdamCoeffs<A>;

  static void Check(const Hyper& h) { CheckCommon(kName, h); }

  template <typename A>
  static Coeffs<A> MakeCoeffs(const Hyper& h) {
    return MakeAdamCoeffs<A>(static_cast<int64_t>(h.count), h.lr, h.b1,
                             h.b2, h.eps, h.eps_root, h.weight_decay,
                             h.decoupled != 0.0, h.maximize != 0.0);
  }

  template <typename A, int V>
  static MF_HD void Element(const Coeffs<A>& c, A g, A p, A s0, A s1, A s2,
                             A* u, A* o0, A* o1, A* o2, A* x0, A* x1) {
    AdamElement<A>(c, g, p, s0, s1, u, o0, o1, x0);
  }

  // With K = lr/bc1, D = r + eps, update = -K mu'/D - dec p:
  //   G_mu' = grad_mu' - K gu / D
  //   G_r   = K gu mu' / D^2 + grad_r            (du/dr; D = r + eps exactly)
  //   G_nu' = grad_nu' + G_r / (2 r bc2)          (dr/dnu' from the saved r)
  // No square root is recomputed and none is differentiated: 1/(2r) uses the
  // saved r, which is >= sqrt(eps_root) > 0 when eps_root > 0.
  static std::vector<at::Tensor> Backward(const Hyper& h, int,
                                          const SavedStep& s) {
    const at::Tensor& r = s.aux[0];
    const at::Tensor d = r + h.eps;
    const at::Tensor t = s.grad_u * (h.lr / Bc1(h)) / d;
    const at::Tensor g_mu = s.grad_s[0] - t;
    const at::Tensor g_r = AddOpt(t * s.s_out[0] / d, s.grad_aux[0]);
    const at::Tensor g_nu = s.grad_s[1] + g_r / r * (0.5 / Bc2(h));
    return MomentGrads(h, s, g_mu, g_nu);
  }

  // The same closed form, one element at a time (fused_backward.h).
  static constexpr bool kFusedBackward = true;
  template <typename A, int V>
  static MF_HD void BackwardElement(const Coeffs<A>& c, A g, A p, A, A, A,
                                     A mu_new, A, A, A r, A, A gu, A gmu,
                                     A gnu, A, A* grad_g, A* grad_p,
                                     A* grad_mu, A* grad_nu, A*) {
    AdamBackwardElement<A>(c, g, p, mu_new, r, gu, gmu, gnu, grad_g, grad_p,
                           grad_mu, grad_nu);
  }
};

}  // namespace
}  // namespace kernels

std::tuple<at::Tensor, at::Tensor, at::Tensor> adam(
    const at::Tensor& grad, const at::Tensor& mu, const at::Tensor& nu,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double b1, double b2, double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize) {
  METAFUSE_CALL_OP("adam", adam, grad, mu, nu, param, count, lr, b1, b2, eps,
                   eps_root, weight_decay, decoupled_weight_decay, maximize);
}

std::tuple<TensorVec, TensorVec, TensorVec> adam_multi(
    at::TensorList grads, at::TensorList mus, at::TensorList nus,
    at::TensorList params, int64_t count, double lr, double b1, double b2,
    double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize) {
  METAFUSE_CALL_OP("adam_multi", adam_multi, grads, mus, nus, params, count,
                   lr, b1, b2, eps, eps_root, weight_decay,
                   decoupled_weight_decay, maximize);
}

// Catch-all kernels: the autograd node is made inside (FusedStep), so the
// ops work under every dispatch key the CPU build has.
TORCH_LIBRARY_FRAGMENT(metafuse, m) {
  using kernels::Adam;
  m.def("adam(Tensor grad, Tensor mu, Tensor nu, Tensor? param=None, *, "
        METAFUSE_ADAM_FAMILY_OPTIONS("0.001")
        ") -> (Tensor update, Tensor mu, Tensor nu)",
        TORCH_FN(kernels::AdamFamily::Single<Adam>));
  m.def("adam_multi(Tensor[] grads, Tensor[] mus, Tensor[] nus, "
        "Tensor[] params, *, " METAFUSE_ADAM_FAMILY_OPTIONS("0.001")
        ") -> (Tensor[] updates, Tensor[] mus, Tensor[] nus)",
        TORCH_FN(kernels::AdamFamily::Multi<Adam>));
  m.def("adam_multi_(Tensor[] grads, Tensor(a!)[] mus, Tensor(b!)[] nus, "
        "Tensor(c!)[] params, *, " METAFUSE_ADAM_FAMILY_OPTIONS("0.001")
        ") -> ()",
        TORCH_FN(kernels::AdamFamily::MultiInPlace<Adam>));
}

}  // namespace metafuse
