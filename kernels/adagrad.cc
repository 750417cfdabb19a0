// metafuse::adagrad / adagrad_multi / adagrad_multi_: Adagrad with
// learning-rate decay, fused, with the exact closed-form backward.
#include "kernels/fused_op.h"

namespace metafuse {
namespace kernels {
namespace {

struct Adagrad : FusedOptimizer {
  static constexpr const char* kName = "adagrad";
  static constexpr StateArg kStates[] = {{"sum", "sums"}};
  static constexpr const char* kOptions =
      "int count, float lr=0.01, float lr_decay=0.0, float weight_decay=0.0, "
      "float eps=1e-10, float eps_root=0.0, bool maximize=False";
  static constexpr int kNumAux = 1;  // r = sqrt(sum' + eps_root)
  struct Hyper {
    double count, lr, lr_decay, weight_decay, eps, eps_root, maximize;
  };
  template <typename A>
  using Coeffs = AdagradCoeffs<A>;

  static void Check(const Hyper& h) {
    CheckCount(kName, static_cast<int64_t>(h.count));
    TORCH_CHECK(h.lr_decay >= 0.0,
                "metafuse::adagrad: `lr_decay` must be >= 0, got ", h.lr_decay);
    TORCH_CHECK(h.eps >= 0.0 && h.eps_root >= 0.0,
                "metafuse::adagrad: `eps` and `eps_root` must be >= 0, got ",
                h.eps, " and ", h.eps_root);
  }

  template <typename A>
  static Coeffs<A> MakeCoeffs(const Hyper& h) {
    return MakeAdagradCoeffs<A>(static_cast<int64_t>(h.count), h.lr,
                                h.lr_decay, h.weight_decay, h.eps, h.eps_root,
                                h.maximize != 0.0);
  }

  template <typename A, int V>
  static MF_HD void Element(const Coeffs<A>& c, A g, A p, A s0, A s1, A s2,
                             A* u, A* o0, A* o1, A* o2, A* x0, A* x1) {
    AdagradElement<A>(c, g, p, s0, u, o0, x0);
  }

  // Every order: AdagradBackwardElement (kernels/optim_math.h) on tensors. A
  // gradient reaching the saved root r itself enters like one reaching sum':
  // grad_sum' += grad_r / (2 r) (0 where r = 0: RootInverse).
  static std::vector<at::Tensor> Backward(const Hyper& h, int,
                                          const SavedStep& s) {
    const at::Tensor& r = s.aux[0];
    const at::Tensor g_sum = AddOpt(s.grad_s[0], s.grad_aux[0].defined()
                                                     ? s.grad_aux[0] * RootInverse<at::Tensor>::Of(r) * 0.5
                                                     : at::Tensor());
    at::Tensor grad_g, grad_p, grad_sum;
    AdagradBackwardElement<at::Tensor, double>(
        MakeCoeffs<double>(h), s.g, OrZero(s, s.p), r, s.grad_u, g_sum,
        &grad_g, &grad_p, &grad_sum);
    return {grad_g, ParamGrad(s, grad_p), grad_sum};
  }

  // The same closed form, one element at a time (fused_backward.h).
  static constexpr bool kFusedBackward = true;
  template <typename A, int V>
  static MF_HD void BackwardElement(const Coeffs<A>& c, A g, A p, A, A, A,
                                     A, A, A, A r, A, A gu, A gsum, A, A,
                                     A* grad_g, A* grad_p, A* grad_sum, A*,
                                     A*) {
    AdagradBackwardElement<A>(c, g, p, r, gu, gsum, grad_g, grad_p, grad_sum);
  }
};

}  // namespace
}  // namespace kernels

METAFUSE_REGISTER_FUSED_OP(kernels::Adagrad)

}  // namespace metafuse
