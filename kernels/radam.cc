// metafuse::radam / radam_multi / radam_multi_: RAdam (rectified Adam), fused,
// with the exact closed-form backward. Whether the step is rectified depends
// only on the host-side count, so it is a host scalar, not a per-element
// branch.
#include <cmath>

#include "kernels/adam_family.h"

namespace metafuse {
namespace kernels {
namespace {

struct RAdam : AdamFamily {
  static constexpr const char* kName = "radam";
  template <typename A>
  using Coeffs = RAdamCoeffs<A>;

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
  static MF_HD void Element(const Coeffs<A>& c, A g, A p, A s0, A s1, A,
                             A* u, A* o0, A* o1, A*, A* x0, A*) {
    RAdamElement<A>(c, g, p, s0, s1, u, o0, o1, x0);
  }

  // Rectified: update = -K mu' / (r + eps) - dec p with K = rect_step and
  // r = sqrt(nu' + eps_root), which is Adam's closed form with step = K and
  // inv_bc2 = 1. Otherwise update = -(lr/bc1) mu' - dec p.
  static std::vector<at::Tensor> Backward(const Hyper& h, int,
                                          const SavedStep& s) {
    const RAdamSteps steps = MakeRAdamSteps(static_cast<int64_t>(h.count),
                                            h.lr, h.b1, h.b2);
    AdamCoeffs<double> c = MakeAdamCoeffsOf<double>(h);
    c.step = steps.rect_step;
    c.inv_bc2 = 1.0;
    if (steps.rectified) return TensorBackward(c, s);
    return TensorBackward(c, s, steps.plain_step);
  }
};

}  // namespace
}  // namespace kernels

METAFUSE_REGISTER_FUSED_OP(kernels::RAdam)

}  // namespace metafuse
