// metafuse::radam / radam_multi: RAdam (rectified Adam), fused, with the
// exact closed-form backward. Whether the step is rectified depends only on
// the host-side count, so it is a host scalar, not a per-element branch.
#include <torch/library.h>

#include <cmath>

#include "kernels/adam_family.h"

namespace metafuse {
namespace kernels {
namespace {

struct RAdam : AdamFamily {
  static constexpr const char* kName = "radam";
  template <typename A>
  using Coeffs = RAdamCoeffs<A>;

  static double RhoInf(const Hyper& h) { return 2.0 / (1.0 - h.b2) - 1.0; }
  static double RhoT(const Hyper& h) {
    return RhoInf(h) - 2.0 * h.count * std::pow(h.b2, h.count) / Bc2(h);
  }
  static bool Rectified(const Hyper& h) { return RhoT(h) > 5.0; }
  // lr * rect * sqrt(bc2) / bc1 (torch.optim's adaptive step).
  static double RectStep(const Hyper& h) {
    if (!Rectified(h)) return 0.0;
    const double rho_inf = RhoInf(h), rho_t = RhoT(h);
    const double rect =
        std::sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf /
                  ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t));
    return h.lr * rect * std::sqrt(Bc2(h)) / Bc1(h);
  }

  static void Check(const Hyper& h) {
    CheckCommon(kName, h);
    TORCH_CHECK(h.eps > 0.0 || h.eps_root > 0.0,
                "metafuse::radam: `eps` or `eps_root` must be > 0 (a zero "
                "second moment would divide by zero), got ", h.eps, " and ",
                h.eps_root);
  }

  template <typename A>
  static Coeffs<A> MakeCoeffs(const Hyper& h) {
    Coeffs<A> c;
    c.sign = static_cast<A>(Sign(h));
    c.l2 = static_cast<A>(L2(h));
    c.b1 = static_cast<A>(h.b1);
    c.one_minus_b1 = static_cast<A>(1.0 - h.b1);
    c.b2 = static_cast<A>(h.b2);
    c.one_minus_b2 = static_cast<A>(1.0 - h.b2);
    c.eps_root = static_cast<A>(h.eps_root);
    c.eps = static_cast<A>(h.eps);
    c.rect_step = static_cast<A>(RectStep(h));
    c.plain_step = static_cast<A>(h.lr / Bc1(h));
    c.rectified = static_cast<A>(Rectified(h) ? 1.0 : 0.0);
    c.decoupled = static_cast<A>(Decoupled(h));
    return c;
  }

  template <typename A, int V>
  static inline void Element(const Coeffs<A>& c, A g, A p, A s0, A s1, A s2,
                             A* u, A* o0, A* o1, A* o2, A* x0, A* x1) {
    RAdamElement<A>(c, g, p, s0, s1, u, o0, o1, x0);
  }

  // Rectified: update = -K mu' / D - dec p, D = r + eps, K = RectStep:
  //   G_mu' = grad_mu' - K gu / D,  G_r = grad_r + K gu mu' / D^2
  // Otherwise: update = -(lr/bc1) mu' - dec p, G_r = grad_r.
  //   G_nu' = grad_nu' + G_r / (2 r)
  static std::vector<at::Tensor> Backward(const Hyper& h, int,
                                          const SavedStep& s) {
    const at::Tensor& r = s.aux[0];
    at::Tensor g_mu, g_r = s.grad_aux[0];
    if (Rectified(h)) {
      const at::Tensor d = r + h.eps;
      const at::Tensor t = s.grad_u * RectStep(h) / d;
      g_mu = s.grad_s[0] - t;
      g_r = AddOpt(t * s.s_out[0] / d, g_r);
    } else {
      g_mu = s.grad_s[0] - s.grad_u * (h.lr / Bc1(h));
    }
    const at::Tensor g_nu =
        g_r.defined() ? s.grad_s[1] + g_r / r * 0.5 : s.grad_s[1];
    return MomentGrads(h, s, g_mu, g_nu);
  }
};

}  // namespace
}  // namespace kernels

std::tuple<at::Tensor, at::Tensor, at::Tensor> radam(
    const at::Tensor& grad, const at::Tensor& mu, const at::Tensor& nu,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double b1, double b2, double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize) {
  METAFUSE_CALL_OP("radam", radam, grad, mu, nu, param, count, lr, b1, b2, eps,
                   eps_root, weight_decay, decoupled_weight_decay, maximize);
}

std::tuple<TensorVec, TensorVec, TensorVec> radam_multi(
    at::TensorList grads, at::TensorList mus, at::TensorList nus,
    at::TensorList params, int64_t count, double lr, double b1, double b2,
    double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize) {
  METAFUSE_CALL_OP("radam_multi", radam_multi, grads, mus, nus, params, count,
                   lr, b1, b2, eps, eps_root, weight_decay,
                   decoupled_weight_decay, maximize);
}

TORCH_LIBRARY_FRAGMENT(metafuse, m) {
  using kernels::RAdam;
  m.def("radam(Tensor grad, Tensor mu, Tensor nu, Tensor? param=None, *, "
        METAFUSE_ADAM_FAMILY_OPTIONS("0.001")
        ") -> (Tensor update, Tensor mu, Tensor nu)",
        TORCH_FN(kernels::AdamFamily::Single<RAdam>));
  m.def("radam_multi(Tensor[] grads, Tensor[] mus, Tensor[] nus, "
        "Tensor[] params, *, " METAFUSE_ADAM_FAMILY_OPTIONS("0.001")
        ") -> (Tensor[] updates, Tensor[] mus, Tensor[] nus)",
        TORCH_FN(kernels::AdamFamily::Multi<RAdam>));
  m.def("radam_multi_(Tensor[] grads, Tensor(a!)[] mus, Tensor(b!)[] nus, "
        "Tensor(c!)[] params, *, " METAFUSE_ADAM_FAMILY_OPTIONS("0.001")
        ") -> ()",
        TORCH_FN(kernels::AdamFamily::MultiInPlace<RAdam>));
}

}  // namespace metafuse
