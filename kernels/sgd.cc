// metafuse::sgd / sgd_multi / sgd_multi_: SGD with momentum, dampening,
// Nesterov and weight decay, fused, with the exact closed-form backward.
#include "kernels/fused_op.h"

namespace metafuse {
namespace kernels {
namespace {

struct Sgd : FusedOptimizer {
  static constexpr const char* kName = "sgd";
  static constexpr StateArg kStates[] = {
      {"momentum_buffer", "momentum_buffers",
       "without momentum there is no momentum buffer"}};
  static constexpr const char* kOptions =
      "int count, float lr, float momentum=0.0, float dampening=0.0, "
      "bool nesterov=False, float weight_decay=0.0, bool maximize=False";
  static constexpr int kNumVariants = 2;  // 0: no momentum, 1: momentum
  struct Hyper {
    double count, lr, momentum, dampening, nesterov, weight_decay, maximize;
  };
  template <typename A>
  using Coeffs = SgdCoeffs<A>;

  static constexpr bool UsesState(int variant, int) { return variant == 1; }
  static int Variant(const Hyper& h) { return h.momentum != 0.0 ? 1 : 0; }
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

  // Every order: SgdBackwardElement (kernels/optim_math.h) on tensors, with
  // the forward's own coefficients (torch.optim's first step included).
  static std::vector<at::Tensor> Backward(const Hyper& h, int variant,
                                          const SavedStep& s) {
    at::Tensor grad_g, grad_p, grad_buf;
    SgdBackwardElement<at::Tensor, double>(
        MakeCoeffs<double>(h), s.grad_u,
        variant == 1 ? s.grad_s[0] : ZeroOf(s), &grad_g, &grad_p, &grad_buf);
    std::vector<at::Tensor> out{grad_g, ParamGrad(s, grad_p)};
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

}  // namespace
}  // namespace kernels

METAFUSE_REGISTER_FUSED_OP(kernels::Sgd)

}  // namespace metafuse
