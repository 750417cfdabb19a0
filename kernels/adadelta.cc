// metafuse::adadelta / adadelta_multi / adadelta_multi_: Adadelta, fused,
// with the exact closed-form backward.
#include "kernels/fused_op.h"

namespace metafuse {
namespace kernels {
namespace {

struct Adadelta : FusedOptimizer {
  static constexpr const char* kName = "adadelta";
  static constexpr StateArg kStates[] = {{"square_avg", "square_avgs"},
                                         {"acc_delta", "acc_deltas"}};
  static constexpr const char* kOptions =
      "float lr=1.0, float rho=0.9, float eps=1e-6, float weight_decay=0.0, "
      "bool maximize=False";
  // r1 = sqrt(square_avg' + eps), r2 = sqrt(acc_delta + eps)
  static constexpr int kNumAux = 2;
  struct Hyper {
    double lr, rho, eps, weight_decay, maximize;
  };
  template <typename A>
  using Coeffs = AdadeltaCoeffs<A>;

  static void Check(const Hyper& h) {
    TORCH_CHECK(h.rho >= 0.0 && h.rho <= 1.0,
                "metafuse::adadelta: `rho` must lie in [0, 1], got ", h.rho);
    TORCH_CHECK(h.eps > 0.0, "metafuse::adadelta: `eps` must be > 0, got ",
                h.eps);
  }

  template <typename A>
  static Coeffs<A> MakeCoeffs(const Hyper& h) {
    return MakeAdadeltaCoeffs<A>(h.lr, h.rho, h.eps, h.weight_decay,
                                 h.maximize != 0.0);
  }

  template <typename A, int V>
  static MF_HD void Element(const Coeffs<A>& c, A g, A p, A s0, A s1, A s2,
                             A* u, A* o0, A* o1, A* o2, A* x0, A* x1) {
    AdadeltaElement<A>(c, g, p, s0, s1, u, o0, o1, x0, x1);
  }

  // delta = r2 ge / r1, update = -lr delta, acc' = rho acc + (1-rho) delta^2:
  //   G_delta = -lr gu + 2 (1-rho) delta grad_acc'
  //   G_r1 = grad_r1 - G_delta delta / r1,  G_r2 = grad_r2 + G_delta ge / r1
  //   G_sq' = grad_sq' + G_r1 / (2 r1)
  //   grad_sq = rho G_sq',  grad_acc = rho grad_acc' + G_r2 / (2 r2)
  //   grad_ge = G_delta r2 / r1 + 2 (1-rho) ge G_sq'
  static std::vector<at::Tensor> Backward(const Hyper& h, int,
                                          const SavedStep& s) {
    const at::Tensor& r1 = s.aux[0];
    const at::Tensor& r2 = s.aux[1];
    const at::Tensor ge = EffectiveGrad(s, SignOf(h.maximize), h.weight_decay);
    const at::Tensor ratio = r2 / r1;
    const at::Tensor delta = ratio * ge;
    const at::Tensor g_delta =
        delta * s.grad_s[1] * (2.0 * (1.0 - h.rho)) - s.grad_u * h.lr;
    const at::Tensor g_r1 = AddOpt(-(g_delta * delta / r1), s.grad_aux[0]);
    const at::Tensor g_r2 = AddOpt(g_delta * ge / r1, s.grad_aux[1]);
    const at::Tensor g_sq = s.grad_s[0] + g_r1 / r1 * 0.5;
    const at::Tensor grad_ge =
        g_delta * ratio + ge * g_sq * (2.0 * (1.0 - h.rho));
    std::vector<at::Tensor> out = GradsFromEffective(
        s, grad_ge, SignOf(h.maximize), h.weight_decay, 0.0);
    out.push_back(g_sq * h.rho);
    out.push_back(s.grad_s[1] * h.rho + g_r2 / r2 * 0.5);
    return out;
  }

  // The same closed form, one element at a time (fused_backward.h).
  static constexpr bool kFusedBackward = true;
  template <typename A, int V>
  static MF_HD void BackwardElement(const Coeffs<A>& c, A g, A p, A, A, A,
                                     A, A, A, A r1, A r2, A gu, A gsq, A gacc,
                                     A, A* grad_g, A* grad_p, A* grad_sq,
                                     A* grad_acc, A*) {
    AdadeltaBackwardElement<A>(c, g, p, r1, r2, gu, gsq, gacc, grad_g, grad_p,
                               grad_sq, grad_acc);
  }
};

}  // namespace
}  // namespace kernels

TORCH_LIBRARY_FRAGMENT(metafuse, m) {
  kernels::RegisterFusedOp<kernels::Adadelta>(m);
}

}  // namespace metafuse
