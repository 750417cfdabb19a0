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

  // Every order: AdadeltaBackwardElement (kernels/optim_math.h) on tensors.
  static std::vector<at::Tensor> Backward(const Hyper& h, int,
                                          const SavedStep& s) {
    at::Tensor grad_g, grad_p, grad_sq, grad_acc;
    AdadeltaBackwardElement<at::Tensor, double>(
        MakeCoeffs<double>(h), s.g, OrZero(s, s.p), s.aux[0], s.aux[1],
        s.grad_u, s.grad_s[0], s.grad_s[1], OrZero(s, s.grad_aux[0]),
        OrZero(s, s.grad_aux[1]), &grad_g, &grad_p, &grad_sq, &grad_acc);
    return {grad_g, ParamGrad(s, grad_p), grad_sq, grad_acc};
  }

  // The same closed form, one element at a time (fused_backward.h).
  static constexpr bool kFusedBackward = true;
  template <typename A, int V>
  static MF_HD void BackwardElement(const Coeffs<A>& c, A g, A p, A, A, A,
                                     A, A, A, A r1, A r2, A gu, A gsq, A gacc,
                                     A, A* grad_g, A* grad_p, A* grad_sq,
                                     A* grad_acc, A*) {
    AdadeltaBackwardElement<A>(c, g, p, r1, r2, gu, gsq, gacc, A(0), A(0),
                               grad_g, grad_p, grad_sq, grad_acc);
  }
};

}  // namespace
}  // namespace kernels

METAFUSE_REGISTER_FUSED_OP(kernels::Adadelta)

}  // namespace metafuse
