// metafuse::rmsprop / rmsprop_multi: RMSProp (plain or centered, with or
// without momentum), fused, with the exact closed-form backward.
#include <torch/library.h>

#include "kernels/fused_step.h"
#include "kernels/optimizers.h"

namespace metafuse {
namespace kernels {
namespace {

struct RmsProp {
  static constexpr const char* kName = "rmsprop";
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
  static constexpr int NumStates(int v) {
    return 1 + (Centered(v) ? 1 : 0) + (HasMomentum(v) ? 1 : 0);
  }
  // State order: square_avgs, [grad_avgs], [momentum_buffers].
  static const char* StateName(int j) {
    return j == 0 ? "square_avgs" : "grad_avgs or momentum_buffers";
  }
  static int Variant(const Hyper& h) {
    return (h.centered ? 1 : 0) | (h.momentum != 0.0 ? 2 : 0);
  }
  static bool UsesParam(const Hyper& h) { return h.weight_decay != 0.0; }

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

// State lists in the kernel's order: square_avgs, [grad_avgs], [buffers].
std::vector<at::TensorList> RmsPropStates(bool centered, double momentum,
                                          at::TensorList square_avgs,
                                          at::TensorList grad_avgs,
                                          at::TensorList momentum_buffers) {
  TORCH_CHECK(centered || grad_avgs.empty(),
              "metafuse::rmsprop: `grad_avgs` is only used when centered=True; "
              "pass an empty list (None)");
  TORCH_CHECK(momentum != 0.0 || momentum_buffers.empty(),
              "metafuse::rmsprop: `momentum_buffers` is only used when "
              "momentum != 0; pass an empty list (None)");
  std::vector<at::TensorList> states{square_avgs};
  if (centered) states.push_back(grad_avgs);
  if (momentum != 0.0) states.push_back(momentum_buffers);
  return states;
}

std::tuple<TensorVec, TensorVec, TensorVec, TensorVec> rmsprop_multi_impl(
    at::TensorList grads, at::TensorList square_avgs, at::TensorList grad_avgs,
    at::TensorList momentum_buffers, at::TensorList params, double lr,
    double alpha, double eps, double eps_root, double weight_decay,
    double momentum, bool centered, bool maximize) {
  const RmsProp::Hyper h{lr, alpha, eps, eps_root, weight_decay, momentum,
                         centered ? 1.0 : 0.0, maximize ? 1.0 : 0.0};
  StepOutputs out = FusedStep<RmsProp>(
      h, grads, params,
      RmsPropStates(centered, momentum, square_avgs, grad_avgs,
                    momentum_buffers));
  TensorVec ga, buf;
  if (centered) ga = out.states[1];
  if (momentum != 0.0) buf = out.states[centered ? 2 : 1];
  return {out.updates, out.states[0], ga, buf};
}

void rmsprop_multi_inplace_impl(
    at::TensorList grads, at::TensorList square_avgs, at::TensorList grad_avgs,
    at::TensorList momentum_buffers, at::TensorList params, double lr,
    double alpha, double eps, double eps_root, double weight_decay,
    double momentum, bool centered, bool maximize) {
  const RmsProp::Hyper h{lr, alpha, eps, eps_root, weight_decay, momentum,
                         centered ? 1.0 : 0.0, maximize ? 1.0 : 0.0};
  FusedStepInPlace<RmsProp>(
      h, params, grads,
      RmsPropStates(centered, momentum, square_avgs, grad_avgs,
                    momentum_buffers));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> rmsprop_impl(
    const at::Tensor& grad, const at::Tensor& square_avg,
    const c10::optional<at::Tensor>& grad_avg,
    const c10::optional<at::Tensor>& momentum_buffer,
    const c10::optional<at::Tensor>& param, double lr, double alpha,
    double eps, double eps_root, double weight_decay, double momentum,
    bool centered, bool maximize) {
  auto [u, sq, ga, buf] = rmsprop_multi_impl(
      {grad}, {square_avg}, ListOf(grad_avg), ListOf(momentum_buffer),
      ListOf(param), lr, alpha, eps, eps_root, weight_decay, momentum,
      centered, maximize);
  return {u[0], sq[0], FirstOrUndefined(ga), FirstOrUndefined(buf)};
}

}  // namespace
}  // namespace kernels

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> rmsprop(
    const at::Tensor& grad, const at::Tensor& square_avg,
    const c10::optional<at::Tensor>& grad_avg,
    const c10::optional<at::Tensor>& momentum_buffer,
    const c10::optional<at::Tensor>& param, double lr, double alpha,
    double eps, double eps_root, double weight_decay, double momentum,
    bool centered, bool maximize) {
  METAFUSE_CALL_OP("rmsprop", rmsprop, grad, square_avg, grad_avg,
                   momentum_buffer, param, lr, alpha, eps, eps_root,
                   weight_decay, momentum, centered, maximize);
}

std::tuple<TensorVec, TensorVec, TensorVec, TensorVec> rmsprop_multi(
    at::TensorList grads, at::TensorList square_avgs, at::TensorList grad_avgs,
    at::TensorList momentum_buffers, at::TensorList params, double lr,
    double alpha, double eps, double eps_root, double weight_decay,
    double momentum, bool centered, bool maximize) {
  METAFUSE_CALL_OP("rmsprop_multi", rmsprop_multi, grads, square_avgs,
                   grad_avgs, momentum_buffers, params, lr, alpha, eps,
                   eps_root, weight_decay, momentum, centered, maximize);
}

TORCH_LIBRARY_FRAGMENT(metafuse, m) {
  m.def("rmsprop(Tensor grad, Tensor square_avg, Tensor? grad_avg=None, "
        "Tensor? momentum_buffer=None, Tensor? param=None, *, "
        "float lr=0.01, float alpha=0.99, float eps=1e-8, float eps_root=0.0, "
        "float weight_decay=0.0, float momentum=0.0, bool centered=False, "
        "bool maximize=False) -> (Tensor update, Tensor square_avg, "
        "Tensor grad_avg, Tensor momentum_buffer)",
        TORCH_FN(kernels::rmsprop_impl));
  m.def("rmsprop_multi(Tensor[] grads, Tensor[] square_avgs, "
        "Tensor[] grad_avgs, Tensor[] momentum_buffers, Tensor[] params, *, "
        "float lr=0.01, float alpha=0.99, float eps=1e-8, float eps_root=0.0, "
        "float weight_decay=0.0, float momentum=0.0, bool centered=False, "
        "bool maximize=False) -> (Tensor[] updates, Tensor[] square_avgs, "
        "Tensor[] grad_avgs, Tensor[] momentum_buffers)",
        TORCH_FN(kernels::rmsprop_multi_impl));
  m.def("rmsprop_multi_(Tensor[] grads, Tensor(a!)[] square_avgs, "
        "Tensor(b!)[] grad_avgs, Tensor(c!)[] momentum_buffers, "
        "Tensor(d!)[] params, *, float lr=0.01, float alpha=0.99, "
        "float eps=1e-8, float eps_root=0.0, float weight_decay=0.0, "
        "float momentum=0.0, bool centered=False, bool maximize=False) -> ()",
        TORCH_FN(kernels::rmsprop_multi_inplace_impl));
}

}  // namespace metafuse
