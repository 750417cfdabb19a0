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

  // Every order: RmsPropBackwardElement (kernels/optim_math.h) on tensors;
  // the states a variant does not use enter as zeros.
  static std::vector<at::Tensor> Backward(const Hyper& h, int variant,
                                          const SavedStep& s) {
    const bool centered = Centered(variant);
    const bool momentum = HasMomentum(variant);
    const int buf = centered ? 2 : 1;
    at::Tensor grad_g, grad_p, grad_sq, grad_ga, grad_buf;
    RmsPropBackwardElement<at::Tensor, double>(
        MakeCoeffs<double>(h), s.g, OrZero(s, s.p),
        centered ? s.s_out[1] : ZeroOf(s), s.aux[0], s.grad_u, s.grad_s[0],
        centered ? s.grad_s[1] : ZeroOf(s),
        momentum ? s.grad_s[buf] : ZeroOf(s), OrZero(s, s.grad_aux[0]),
        &grad_g, &grad_p, &grad_sq, &grad_ga, &grad_buf);
    std::vector<at::Tensor> out{grad_g, ParamGrad(s, grad_p), grad_sq};
    if (centered) out.push_back(grad_ga);
    if (momentum) out.push_back(grad_buf);
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
    RmsPropBackwardElement<A>(c, g, p, ga_new, r, gu, go0, g_ga, g_buf, A(0),
                              grad_g, grad_p, gs0, &grad_ga, &grad_buf);
    if (Centered(V)) *gs1 = grad_ga;
    if (HasMomentum(V)) *(Centered(V) ? gs2 : gs1) = grad_buf;
  }
};

}  // namespace
}  // namespace kernels

METAFUSE_REGISTER_FUSED_OP(kernels::RmsProp)

}  // namespace metafuse
