// metafuse::adamax / adamax_multi / adamax_multi_: Adamax (infinity-norm
// Adam), fused, with the exact closed-form backward (almost everywhere: at a
// tie of the max the gradient goes to the decayed norm).
#include <cmath>

#include "kernels/fused_op.h"

namespace metafuse {
namespace kernels {
namespace {

struct Adamax : FusedOptimizer {
  static constexpr const char* kName = "adamax";
  static constexpr StateArg kStates[] = {{"mu", "mus"},
                                         {"inf_norm", "inf_norms"}};
  static constexpr const char* kOptions =
      "int count, float lr=0.002, float b1=0.9, float b2=0.999, "
      "float eps=1e-8, float weight_decay=0.0, bool maximize=False";
  struct Hyper {
    double count, lr, b1, b2, eps, weight_decay, maximize;
  };
  template <typename A>
  using Coeffs = AdamaxCoeffs<A>;

  static double Step(const Hyper& h) {
    return h.lr / (1.0 - std::pow(h.b1, h.count));
  }

  static void Check(const Hyper& h) {
    CheckCount(kName, static_cast<int64_t>(h.count));
    TORCH_CHECK(h.b1 >= 0.0 && h.b1 < 1.0 && h.b2 >= 0.0 && h.b2 < 1.0,
                "metafuse::adamax: `b1` and `b2` must lie in [0, 1), got ",
                h.b1, " and ", h.b2);
    TORCH_CHECK(h.eps > 0.0, "metafuse::adamax: `eps` must be > 0, got ",
                h.eps);
  }

  template <typename A>
  static Coeffs<A> MakeCoeffs(const Hyper& h) {
    return MakeAdamaxCoeffs<A>(static_cast<int64_t>(h.count), h.lr, h.b1, h.b2,
                               h.eps, h.weight_decay, h.maximize != 0.0);
  }

  template <typename A, int V>
  static MF_HD void Element(const Coeffs<A>& c, A g, A p, A s0, A s1, A,
                             A* u, A* o0, A* o1, A*, A*, A*) {
    AdamaxElement<A>(c, g, p, s0, s1, u, o0, o1);
  }

  // update = -K mu' / n', n' = max(b2 n, |ge| + eps):
  //   G_mu' = grad_mu' - K gu / n',  G_n' = grad_n' + K gu mu' / n'^2
  //   grad_mu = b1 G_mu',  grad_n = [b2 n wins] b2 G_n'
  //   grad_ge = (1-b1) G_mu' + [|ge| + eps wins] sign(ge) G_n'
  static std::vector<at::Tensor> Backward(const Hyper& h, int,
                                          const SavedStep& s) {
    const double k = Step(h);
    const at::Tensor& mu_new = s.s_out[0];
    const at::Tensor& n_new = s.s_out[1];
    const at::Tensor ge = EffectiveGrad(s, SignOf(h.maximize), h.weight_decay);
    const at::Tensor t = s.grad_u * k / n_new;
    const at::Tensor g_mu = s.grad_s[0] - t;
    const at::Tensor g_n = s.grad_s[1] + t * mu_new / n_new;
    // Same comparison as the forward's fmax, on the saved inputs.
    const at::Tensor decayed_wins = (s.s_in[1] * h.b2) >= (ge.abs() + h.eps);
    const at::Tensor zero = at::zeros_like(g_n);
    const at::Tensor grad_ge =
        g_mu * (1.0 - h.b1) + at::where(decayed_wins, zero, g_n * ge.sign());
    std::vector<at::Tensor> out = GradsFromEffective(
        s, grad_ge, SignOf(h.maximize), h.weight_decay, 0.0);
    out.push_back(g_mu * h.b1);
    out.push_back(at::where(decayed_wins, g_n * h.b2, zero));
    return out;
  }

  // No fused first-order backward: GCC 12 does not vectorize its
  // compare-selects; the ATen closed form serves every order.
};

}  // namespace
}  // namespace kernels

METAFUSE_REGISTER_FUSED_OP(kernels::Adamax)

}  // namespace metafuse
