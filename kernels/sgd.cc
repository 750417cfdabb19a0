// metafuse::sgd / sgd_multi: SGD with momentum, dampening, Nesterov and
// weight decay, fused, with the exact closed-form backward.
#include <torch/library.h>

#include "kernels/fused_step.h"
#include "kernels/optimizers.h"

namespace metafuse {
namespace kernels {
namespace {

struct Sgd {
  static constexpr const char* kName = "sgd";
  static constexpr int kNumAux = 0;
  static constexpr int kNumVariants = 2;  // 0: no momentum, 1: momentum
  struct Hyper {
    double count, lr, momentum, dampening, nesterov, weight_decay, maximize;
  };
  template <typename A>
  using Coeffs = SgdCoeffs<A>;

  static constexpr int NumStates(int variant) { return variant; }
  static const char* StateName(int) { return "momentum_buffers"; }
  static int Variant(const Hyper& h) { return h.momentum != 0.0 ? 1 : 0; }
  static bool UsesParam(const Hyper& h) { return h.weight_decay != 0.0; }
  static void Check(const Hyper& h) {
    CheckCount(kName, static_cast<int64_t>(h.count));
    TORCH_CHECK(h.momentum >= 0.0,
                "metafuse::sgd: `momentum` must be >= 0, got ", h.momentum);
    TORCH_CHECK(!h.nesterov || (h.momentum > 0.0 && h.dampening == 0.0),
                "metafuse::sgd: `nesterov` needs momentum > 0 and "
                "dampening = 0, got momentum ", h.momentum, " and dampening ",
                h.dampening);
  }

  template <typename A>
  static Coeffs<A> MakeCoeffs(const Hyper& h) {
    return MakeSgdCoeffs<A>(static_cast<int64_t>(h.count), h.lr, h.momentum,
                            h.dampening, h.nesterov != 0.0, h.weight_decay,
                            h.maximize != 0.0);
  }

  template <typename A, int V>
  static MF_HD void Element(const Coeffs<A>& c, A g, A p, A s0, A, A, A* u,
                             A* o0, A*, A*, A*, A*) {
    // Without momentum s0 is 0 and o0 is not stored.
    SgdElement<A>(c, g, p, s0, u, o0);
  }

  // update = -lr (nest_g ge + nest_b buf'), buf' = keep buf + take ge:
  //   G_buf' = grad_buf' - lr nest_b gu
  //   grad_buf = keep G_buf',  grad_ge = take G_buf' - lr nest_g gu
  static std::vector<at::Tensor> Backward(const Hyper& h, int variant,
                                          const SavedStep& s) {
    at::Tensor grad_ge;
    at::Tensor grad_buf;
    if (variant == 0) {
      grad_ge = s.grad_u * -h.lr;
    } else {
      // The forward's own coefficients (torch.optim's first step included).
      const SgdCoeffs<double> c = MakeCoeffs<double>(h);
      const at::Tensor g_buf = s.grad_s[0] - s.grad_u * (h.lr * c.nest_b);
      grad_buf = g_buf * c.keep;
      grad_ge = g_buf * c.take;
      if (h.nesterov) grad_ge = grad_ge - s.grad_u * h.lr;
    }
    std::vector<at::Tensor> out = GradsFromEffective(
        s, grad_ge, SignOf(h.maximize), h.weight_decay, 0.0);
    if (variant == 1) out.push_back(grad_buf);
    return out;
  }

  // The same closed form, one element at a time (fused_backward.h).
  static constexpr bool kFusedBackward = true;
  template <typename A, int V>
  static MF_HD void BackwardElement(const Coeffs<A>& c, A, A, A, A, A, A, A,
                                     A, A, A, A gu, A gbuf, A, A, A* grad_g,
                                     A* grad_p, A* grad_buf, A*, A*) {
    SgdBackwardElement<A>(c, gu, gbuf, grad_g, grad_p, grad_buf);
  }
};

Sgd::Hyper MakeHyper(int64_t count, double lr, double momentum,
                     double dampening, bool nesterov, double weight_decay,
                     bool maximize) {
  return {static_cast<double>(count), lr, momentum, dampening,
          nesterov ? 1.0 : 0.0, weight_decay, maximize ? 1.0 : 0.0};
}

std::vector<at::TensorList> SgdStates(const Sgd::Hyper& h,
                                      at::TensorList momentum_buffers) {
  std::vector<at::TensorList> states;
  if (Sgd::Variant(h) == 1) {
    states.push_back(momentum_buffers);
  } else {
    TORCH_CHECK(momentum_buffers.empty(),
                "metafuse::sgd: without momentum there is no momentum buffer; "
                "pass an empty `momentum_buffers` (None), got ",
                momentum_buffers.size(), " tensor(s)");
  }
  return states;
}

std::tuple<TensorVec, TensorVec> sgd_multi_impl(
    at::TensorList grads, at::TensorList momentum_buffers,
    at::TensorList params, int64_t count, double lr, double momentum,
    double dampening, bool nesterov, double weight_decay, bool maximize) {
  const Sgd::Hyper h = MakeHyper(count, lr, momentum, dampening, nesterov,
                                 weight_decay, maximize);
  const std::vector<at::TensorList> states = SgdStates(h, momentum_buffers);
  StepOutputs out = FusedStep<Sgd>(h, grads, params, states);
  return {out.updates, out.states.empty() ? TensorVec() : out.states[0]};
}

void sgd_multi_inplace_impl(
    at::TensorList grads, at::TensorList momentum_buffers,
    at::TensorList params, int64_t count, double lr, double momentum,
    double dampening, bool nesterov, double weight_decay, bool maximize) {
  const Sgd::Hyper h = MakeHyper(count, lr, momentum, dampening, nesterov,
                                 weight_decay, maximize);
  FusedStepInPlace<Sgd>(h, params, grads, SgdStates(h, momentum_buffers));
}

std::tuple<at::Tensor, at::Tensor> sgd_impl(
    const at::Tensor& grad, const c10::optional<at::Tensor>& momentum_buffer,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double momentum, double dampening, bool nesterov, double weight_decay,
    bool maximize) {
  auto [u, b] = sgd_multi_impl({grad}, ListOf(momentum_buffer), ListOf(param),
                               count, lr, momentum, dampening, nesterov,
                               weight_decay, maximize);
  return {u[0], FirstOrUndefined(b)};
}

}  // namespace
}  // namespace kernels

std::tuple<at::Tensor, at::Tensor> sgd(
    const at::Tensor& grad, const c10::optional<at::Tensor>& momentum_buffer,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double momentum, double dampening, bool nesterov, double weight_decay,
    bool maximize) {
  METAFUSE_CALL_OP("sgd", sgd, grad, momentum_buffer, param, count, lr,
                   momentum, dampening, nesterov, weight_decay, maximize);
}

std::tuple<TensorVec, TensorVec> sgd_multi(
    at::TensorList grads, at::TensorList momentum_buffers,
    at::TensorList params, int64_t count, double lr, double momentum,
    double dampening, bool nesterov, double weight_decay, bool maximize) {
  METAFUSE_CALL_OP("sgd_multi", sgd_multi, grads, momentum_buffers, params,
                   count, lr, momentum, dampening, nesterov, weight_decay,
                   maximize);
}

TORCH_LIBRARY_FRAGMENT(metafuse, m) {
  m.def("sgd(Tensor grad, Tensor? momentum_buffer=None, Tensor? param=None, "
        "*, int count, float lr, float momentum=0.0, float dampening=0.0, "
        "bool nesterov=False, float weight_decay=0.0, bool maximize=False) "
        "-> (Tensor update, Tensor momentum_buffer)",
        TORCH_FN(kernels::sgd_impl));
  m.def("sgd_multi(Tensor[] grads, Tensor[] momentum_buffers, "
        "Tensor[] params, *, int count, float lr, float momentum=0.0, "
        "float dampening=0.0, bool nesterov=False, float weight_decay=0.0, "
        "bool maximize=False) -> (Tensor[] updates, Tensor[] momentum_buffers)",
        TORCH_FN(kernels::sgd_multi_impl));
  m.def("sgd_multi_(Tensor[] grads, Tensor(a!)[] momentum_buffers, "
        "Tensor(b!)[] params, *, int count, float lr, float momentum=0.0, "
        "float dampening=0.0, bool nesterov=False, float weight_decay=0.0, "
        "bool maximize=False) -> ()",
        TORCH_FN(kernels::sgd_multi_inplace_impl));
}

}  // namespace metafuse
