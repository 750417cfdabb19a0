// metafuse::rmsprop / rmsprop_multi / rmsprop_multi_: RMSProp (plain or
// centered, with or without momentum), fused, with the exact closed-form
// backward.
#include "kernels/fused_op.h"

namespace metafuse {
namespace kernels {
namespace {

struct RmsProp : FusedOptimizer {
  static constexpr const char* kName = "rmsprop";
  // The used states are packed in argument order: square_avg, [grad_avg],
  // [momentum_buffer].
  static constexpr StateArg kStates[] = {
      {"square_avg", "square_avgs"},
      {"grad_avg", "grad_avgs", "`grad_avgs` is only used when centered=True"},
      {"momentum_buffer", "momentum_buffers",
       "`momentum_buffers` is only used when momentum != 0"}};
  static constexpr const char* kOptions =
      "float lr=0.01, float alpha=0.99, float eps=1e-8, float eps_root=0.0, "
      "float weight_decay=0.0, float momentum=0.0, bool centered=False, "
      "bool maximize=False";
  static constexpr int kNumAux = 1;  // r = sqrt(sq' - ga'^2 + eps_root)
  // Bit 0: centered (state grad_avg), bit 1: momentum (state buffer).
  static constexpr int kNumVariants = 4;
  struct Hyper {
    double lr, alpha, eps, eps_root, weight_decay, momentum, centered,
        maximize;
  };
  template <typename A>
  using Coeffs = RmsPropCoeffs<A>;

  static constexpr bool Centered(int v) { return v & 1; }
  static constexpr bool HasMomentum(int v) { return v & 2; }
  static constexpr bool UsesState(int v, int slot) {
    return slot == 0 || (slot == 1 ? Centered(v) : HasMomentum(v));
  }
  static int Variant(const Hyper& h) {
    return (h.centered ? 1 : 0) | (h.momentum != 0.0 ? 2 : 0);
  }

  static void Check(const Hyper& h) {
    TORCH_CHECK(h.alpha >= 0.0 && h.alpha <= 1.0,
                "metafuse::rmsprop: `alpha` must lie in [0, 1], got ", h.alpha);
    TORCH_CHECK(h.eps >= 0.0 && h.eps_root >= 0.0,
                "metafuse::rmsprop: `eps` and `eps_root` must be >= 0, got ",
                h.eps, " and ", h.eps_root);
    TORCH_CHECK(h.momentum >= 0.0,
                "metafuse::rmsprop: `momentum` must be >= 0, got ", h.momentum);
  }

  template <typename A>
  static Coeffs<A> MakeCoeffs(const Hyper& h) {
    return MakeRmsPropCoeffs<A>(h.lr, h.alpha, h.eps, h.eps_root,
                                h.weight_decay, h.momentum, h.centered != 0.0,
                                h.maximize != 0.0);
  }

  template <typename A, int V>
  static MF_HD void Element(const Coeffs<A>& c, A g, A p, A s0, A s1, A s2,
                             A* u, A* o0, A* o1, A* o2, A* x0, A*) {
    // States are packed in order: square_avg, [grad_avg], [momentum_buffer].
    A ga_out, buf_out;
    RmsPropElement<A>(c, g, p, s0, Centered(V) ? s1 : A(0),
                      HasMomentum(V) ? (Centered(V) ? s2 : s1) : A(0), u, o0,
                      &ga_out, &buf_out, x0);
    if (Centered(V)) *o1 = ga_out;
    if (HasMomentum(V)) *(Centered(V) ? o2 : o1) = buf_out;
  }

  // q = ge / D, D = r + eps, r^2 = sq' - c ga'^2 + eps_root:
  //   G_q   = grad_buf' - lr gu (momentum), -lr gu (none); grad_buf = m G_q
  //   G_r   = grad_r - G_q ge / D^2,  G_v = G_r / (2 r)
  //   G_sq' = grad_sq' + G_v,  G_ga' = grad_ga' - 2 ga' G_v  (centered)
  //   grad_ge = G_q / D + 2 (1-a) ge G_sq' + (1-a) G_ga'
  static std::vector<at::Tensor> Backward(const Hyper& h, int variant,
                                          const SavedStep& s) {
    const bool centered = Centered(variant);
    const bool momentum = HasMomentum(variant);
    const int buf = centered ? 2 : 1;
    const at::Tensor& r = s.aux[0];
    const at::Tensor d = r + h.eps;
    const at::Tensor ge = EffectiveGrad(s, SignOf(h.maximize), h.weight_decay);
    const at::Tensor g_q =
        momentum ? s.grad_s[buf] - s.grad_u * h.lr : s.grad_u * -h.lr;
    const at::Tensor g_q_over_d = g_q / d;
    const at::Tensor g_r = AddOpt(-(g_q_over_d * ge / d), s.grad_aux[0]);
    const at::Tensor g_v = g_r / r * 0.5;
    const at::Tensor g_sq = s.grad_s[0] + g_v;
    at::Tensor grad_ge = g_q_over_d + ge * g_sq * (2.0 * (1.0 - h.alpha));
    at::Tensor g_ga;
    if (centered) {
      g_ga = s.grad_s[1] - s.s_out[1] * g_v * 2.0;
      grad_ge = grad_ge + g_ga * (1.0 - h.alpha);
    }
    std::vector<at::Tensor> out = GradsFromEffective(
        s, grad_ge, SignOf(h.maximize), h.weight_decay, 0.0);
    out.push_back(g_sq * h.alpha);
    if (centered) out.push_back(g_ga * h.alpha);
    if (momentum) out.push_back(g_q * h.momentum);
    return out;
  }

  // The same closed form, one element at a time (fused_backward.h).
  static constexpr bool kFusedBackward = true;
  template <typename A, int V>
  static MF_HD void BackwardElement(const Coeffs<A>& c, A g, A p, A, A, A,
                                     A, A o1, A, A r, A, A gu, A go0, A go1,
                                     A go2, A* grad_g, A* grad_p, A* gs0,
                                     A* gs1, A* gs2) {
    // States are packed in order: square_avg, [grad_avg], [momentum_buffer].
    const A ga_new = Centered(V) ? o1 : A(0);
    const A g_ga = Centered(V) ? go1 : A(0);
    const A g_buf = HasMomentum(V) ? (Centered(V) ? go2 : go1) : A(0);
    A grad_ga, grad_buf;
    RmsPropBackwardElement<A>(c, g, p, ga_new, r, gu, go0, g_ga, g_buf, grad_g,
                              grad_p, gs0, &grad_ga, &grad_buf);
    if (Centered(V)) *gs1 = grad_ga;
    if (HasMomentum(V)) *(Centered(V) ? gs2 : gs1) = grad_buf;
  }
};

}  // namespace
}  // namespace kernels

TORCH_LIBRARY_FRAGMENT(metafuse, m) {
  kernels::RegisterFusedOp<kernels::RmsProp>(m);
}

}  // namespace metafuse
