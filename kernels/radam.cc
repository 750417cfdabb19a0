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

  static RAdamSteps Steps(const Hyper& h) {
    return MakeRAdamSteps(static_cast<int64_t>(h.count), h.lr, h.b1, h.b2);
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
    return MakeRAdamCoeffs<A>(static_cast<int64_t>(h.count), h.lr, h.b1, h.b2,
                              h.eps, h.eps_root, h.weight_decay,
                              h.decoupled != 0.0, h.maximize != 0.0);
  }

  template <typename A, int V>
  static MF_HD void Element(const Coeffs<A>& c, A g, A p, A s0, A s1, A s2,
                             A* u, A* o0, A* o1, A* o2, A* x0, A* x1) {
    RAdamElement<A>(c, g, p, s0, s1, u, o0, o1, x0);
  }

  // Rectified: update = -K mu' / D - dec p, D = r + eps, K = rect_step:
  //   G_mu' = grad_mu' - K gu / D,  G_r = grad_r + K gu mu' / D^2
  // Otherwise: update = -(lr/bc1) mu' - dec p, G_r = grad_r.
  //   G_nu' = grad_nu' + G_r / (2 r)
  static std::vector<at::Tensor> Backward(const Hyper& h, int,
                                          const SavedStep& s) {
    const at::Tensor& r = s.aux[0];
    at::Tensor g_mu, g_r = s.grad_aux[0];
    const RAdamSteps steps = Steps(h);
    if (steps.rectified) {
      const at::Tensor d = r + h.eps;
      const at::Tensor t = s.grad_u * steps.rect_step / d;
      g_mu = s.grad_s[0] - t;
      g_r = AddOpt(t * s.s_out[0] / d, g_r);
    } else {
      g_mu = s.grad_s[0] - s.grad_u * steps.plain_step;
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
