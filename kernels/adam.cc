// metafuse::adam / adam_multi / adam_multi_: Adam and AdamW, fused, with the
// exact closed-form backward (AdamBackwardElement in kernels/optim_math.h).
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
    return MakeAdamCoeffsOf<A>(h);
  }

  template <typename A, int V>
  static MF_HD void Element(const Coeffs<A>& c, A g, A p, A s0, A s1, A,
                             A* u, A* o0, A* o1, A*, A* x0, A*) {
    AdamElement<A>(c, g, p, s0, s1, u, o0, o1, x0);
  }

  // Every order: the closed form on tensors.
  static std::vector<at::Tensor> Backward(const Hyper& h, int,
                                          const SavedStep& s) {
    return TensorBackward(MakeCoeffs<double>(h), s);
  }

  // First order: the same closed form, one element at a time
  // (fused_backward.h).
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

METAFUSE_REGISTER_FUSED_OP(kernels::Adam)

}  // namespace metafuse
