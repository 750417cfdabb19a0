// metafuse::adagrad / adagrad_multi: Adagrad with learning-rate decay, fused,
// with the exact closed-form backward.
#include <torch/library.h>

#include "kernels/fused_step.h"
#include "kernels/optimizers.h"

namespace metafuse {
namespace kernels {
namespace {

struct Adagrad {
  static constexpr const char* kName = "adagrad";
  static constexpr int kNumAux = 1;  // r = sqrt(sum' + eps_root)
  static constexpr int kNumVariants = 1;
  struct Hyper {
    double count, lr, lr_decay, weight_decay, eps, eps_root, maximize;
  };
  template <typename A>
  using Coeffs = AdagradCoeffs<A>;

  static constexpr int NumStates(int) { return 1; }
  static const char* StateName(int) { return "sums"; }
  static int Variant(const Hyper&) { return 0; }
  static bool UsesParam(const Hyper& h) { return h.weight_decay != 0.0; }
  static double Clr(const Hyper& h) {
    return h.lr / (1.0 + (h.count - 1.0) * h.lr_decay);
  }

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

  // update = -clr ge / D, D = r + eps, r = sqrt(sum' + eps_root):
  //   G_r = grad_r + clr gu ge / D^2,  G_sum' = grad_sum' + G_r / (2 r)
  //   grad_sum = G_sum',  grad_ge = -clr gu / D + 2 ge G_sum'
  static std::vector<at::Tensor> Backward(const Hyper& h, int,
                                          const SavedStep& s) {
    const at::Tensor& r = s.aux[0];
    const at::Tensor d = r + h.eps;
    const at::Tensor ge = EffectiveGrad(s, SignOf(h.maximize), h.weight_decay);
    const at::Tensor t = s.grad_u * Clr(h) / d;
    const at::Tensor g_r = AddOpt(t * ge / d, s.grad_aux[0]);
    const at::Tensor g_sum = s.grad_s[0] + g_r / r * 0.5;
    const at::Tensor grad_ge = ge * g_sum * 2.0 - t;
    std::vector<at::Tensor> out = GradsFromEffective(
        s, grad_ge, SignOf(h.maximize), h.weight_decay, 0.0);
    out.push_back(g_sum);
    return out;
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

std::tuple<TensorVec, TensorVec> adagrad_multi_impl(
    at::TensorList grads, at::TensorList sums, at::TensorList params,
    int64_t count, double lr, double lr_decay, double weight_decay, double eps,
    double eps_root, bool maximize) {
  const Adagrad::Hyper h{static_cast<double>(count), lr, lr_decay,
                         weight_decay, eps, eps_root, maximize ? 1.0 : 0.0};
  StepOutputs out = FusedStep<Adagrad>(h, grads, params, {sums});
  return {out.updates, out.states[0]};
}

void adagrad_multi_inplace_impl(
    at::TensorList grads, at::TensorList sums, at::TensorList params,
    int64_t count, double lr, double lr_decay, double weight_decay, double eps,
    double eps_root, bool maximize) {
  const Adagrad::Hyper h{static_cast<double>(count), lr, lr_decay,
                         weight_decay, eps, eps_root, maximize ? 1.0 : 0.0};
  FusedStepInPlace<Adagrad>(h, params, grads, {sums});
}

std::tuple<at::Tensor, at::Tensor> adagrad_impl(
    const at::Tensor& grad, const at::Tensor& sum,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double lr_decay, double weight_decay, double eps, double eps_root,
    bool maximize) {
  auto [u, s] = adagrad_multi_impl({grad}, {sum}, ListOf(param), count, lr,
                                   lr_decay, weight_decay, eps, eps_root,
                                   maximize);
  return {u[0], s[0]};
}

}  // namespace
}  // namespace kernels

std::tuple<at::Tensor, at::Tensor> adagrad(
    const at::Tensor& grad, const at::Tensor& sum,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double lr_decay, double weight_decay, double eps, double eps_root,
    bool maximize) {
  METAFUSE_CALL_OP("adagrad", adagrad, grad, sum, param, count, lr, lr_decay,
                   weight_decay, eps, eps_root, maximize);
}

std::tuple<TensorVec, TensorVec> adagrad_multi(
    at::TensorList grads, at::TensorList sums, at::TensorList params,
    int64_t count, double lr, double lr_decay, double weight_decay, double eps,
    double eps_root, bool maximize) {
  METAFUSE_CALL_OP("adagrad_multi", adagrad_multi, grads, sums, params, count,
                   lr, lr_decay, weight_decay, eps, eps_root, maximize);
}

TORCH_LIBRARY_FRAGMENT(metafuse, m) {
  m.def("adagrad(Tensor grad, Tensor sum, Tensor? param=None, *, int count, "
        "float lr=0.01, float lr_decay=0.0, float weight_decay=0.0, "
        "float eps=1e-10, float eps_root=0.0, bool maximize=False) "
        "-> (Tensor update, Tensor sum)",
        TORCH_FN(kernels::adagrad_impl));
  m.def("adagrad_multi(Tensor[] grads, Tensor[] sums, Tensor[] params, *, "
        "int count, float lr=0.01, float lr_decay=0.0, float weight_decay=0.0, "
        "float eps=1e-10, float eps_root=0.0, bool maximize=False) "
        "-> (Tensor[] updates, Tensor[] sums)",
        TORCH_FN(kernels::adagrad_multi_impl));
  m.def("adagrad_multi_(Tensor[] grads, Tensor(a!)[] sums, "
        "Tensor(b!)[] params, *, int count, float lr=0.01, "
        "float lr_decay=0.0, float weight_decay=0.0, float eps=1e-10, "
        "float eps_root=0.0, bool maximize=False) -> ()",
        TORCH_FN(kernels::adagrad_multi_inplace_impl));
}

}  // namespace metafuse
