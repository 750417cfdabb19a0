// The per-element math of metafuse's fused optimizer steps, shared by the CPU
// kernels (kernels/*.cc) and the CUDA kernels (kernels/cuda/*.cu). Torch-free
// on purpose: nvcc compiles it without ATen headers.
//
// Conventions, identical for every optimizer:
//   * an op returns the UPDATE and the new state; the caller applies
//     new_param = param + update (Optax/TorchOpt style, sign included);
//   * ge = sign * grad + l2 * param is the effective gradient
//     (sign = -1 when maximizing; l2 = weight_decay for coupled decay);
//   * `aux` outputs are saved intermediates (square roots) that the
//     closed-form backward reuses instead of recomputing them.
// Coefficients are precomputed on the host from the step count (Make*Coeffs,
// shared by the CPU ops and the CUDA callers), so the element functions hold
// no branches and vectorize.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MF_HD __host__ __device__ __forceinline__
#else
#define MF_HD inline __attribute__((always_inline))
#endif

namespace metafuse::kernels {

// 1 / r for a saved square root r >= 0 of a moment, and 0 where r == 0.
// r == 0 only where the moment under the root is 0 (eps_root = 0 and every
// gradient so far exactly 0). Every path from r back to a gradient ge then
// carries d r / d ge = k ge / r, whose one-sided limits at ge = 0 are +-k:
// the closed forms return their midpoint, 0, instead of 0 * inf = NaN, and
// the meta-gradient is the exact one (the paths through the first moment
// carry all of it). The closed forms take it through this struct so that
// each value type supplies its own select: a compare of constants here, a
// masked ATen expression for at::Tensor (kernels/optimizers.h), an IR
// `where` for the compiler's symbolic values (compiler/autodiff/
// rules_optimizer.cc).
template <typename A>
struct RootInverse {
  // The same mask / (r + (1 - mask)) as the other forms: the division runs
  // in every lane (a division under a condition would not vectorize).
  static MF_HD A Of(A r) {
    const A zero = r == A(0) ? A(1) : A(0);
    return (A(1) - zero) / (r + zero);
  }
};

// Adam / AdamW.
//   mu' = b1 mu + (1-b1) ge,  nu' = b2 nu + (1-b2) ge^2
//   r = sqrt(nu' / bc2 + eps_root)
//   update = -(lr / bc1) mu' / (r + eps) - lr * wd_decoupled * param
template <typename A>
struct AdamCoeffs {
  A sign, l2, b1, one_minus_b1, b2, one_minus_b2, inv_bc2, eps_root, eps,
      step, decoupled;  // step = lr / bc1, decoupled = lr * wd
};

// Host side: Adam's coefficients for step `count` (>= 1) of the options.
template <typename A>
inline AdamCoeffs<A> MakeAdamCoeffs(int64_t count, double lr, double b1,
                                    double b2, double eps, double eps_root,
                                    double weight_decay, bool decoupled,
                                    bool maximize) {
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(count));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(count));
  AdamCoeffs<A> c;
  c.sign = static_cast<A>(maximize ? -1.0 : 1.0);
  c.l2 = static_cast<A>(decoupled ? 0.0 : weight_decay);
  c.b1 = static_cast<A>(b1);
  c.one_minus_b1 = static_cast<A>(1.0 - b1);
  c.b2 = static_cast<A>(b2);
  c.one_minus_b2 = static_cast<A>(1.0 - b2);
  c.inv_bc2 = static_cast<A>(1.0 / bc2);
  c.eps_root = static_cast<A>(eps_root);
  c.eps = static_cast<A>(eps);
  c.step = static_cast<A>(lr / bc1);
  c.decoupled = static_cast<A>(decoupled ? lr * weight_decay : 0.0);
  return c;
}

template <typename A>
MF_HD void AdamElement(const AdamCoeffs<A>& c, A g, A p, A mu, A nu, A* update,
                       A* mu_out, A* nu_out, A* root) {
  const A ge = c.sign * g + c.l2 * p;
  const A m = c.b1 * mu + c.one_minus_b1 * ge;
  const A v = c.b2 * nu + c.one_minus_b2 * ge * ge;
  const A r = std::sqrt(v * c.inv_bc2 + c.eps_root);
  *update = -c.step * m / (r + c.eps) - c.decoupled * p;
  *mu_out = m;
  *nu_out = v;
  *root = r;
}

// The moment part of Adam's closed-form backward, given G_mu' and G_nu' (all
// that reaches the new moments); the contract on A and C is
// AdamBackwardElement's, below:
//   ge = sign g + l2 p
//   grad_mu = b1 G_mu',  grad_nu = b2 G_nu'
//   grad_ge = (1-b1) G_mu' + 2 (1-b2) ge G_nu'
//   grad_g = sign grad_ge,  grad_p = l2 grad_ge - lr wd_decoupled gu
// RAdam's unrectified steps (update = -(lr/bc1) mu' - dec p) use it alone.
template <typename A, typename C = A>
MF_HD void AdamMomentBackward(const AdamCoeffs<C>& c, A g, A p, A grad_u,
                              A g_mu, A g_nu, A* grad_g, A* grad_p,
                              A* grad_mu, A* grad_nu) {
  const A ge = c.sign * g + c.l2 * p;
  const A grad_ge = c.one_minus_b1 * g_mu + C(2) * c.one_minus_b2 * ge * g_nu;
  *grad_g = c.sign * grad_ge;
  *grad_p = c.l2 * grad_ge - c.decoupled * grad_u;
  *grad_mu = c.b1 * g_mu;
  *grad_nu = c.b2 * g_nu;
}

// Adam's closed-form backward, written once: the fused first-order backward
// (CPU element loop and CUDA kernel, A = C = float or double), the ATen
// backward that serves every order (A = at::Tensor, C = double; see
// AdamFamily::TensorBackward) and the compiler's derivative rule (A = a
// symbolic IR value, C = double) all instantiate this template.
//
// With incoming gradients gu, gmu', gnu' of (update, mu', nu'),
// K = step = lr / bc1 and D = r + eps:
//   G_mu' = gmu' - K gu / D                    (d update / d mu' = -K / D)
//   G_r   = K gu mu' / D^2                     (d update / d r; D = r + eps exactly)
//   G_nu' = gnu' + G_r inv_bc2 / (2 r)         (d r / d nu' from the saved r)
// then AdamMomentBackward. No square root is recomputed and none is
// differentiated: 1/(2r) uses the saved root r = sqrt(nu' inv_bc2 +
// eps_root), through RootInverse (0 where r = 0, see there). With
// step = lr rect sqrt(bc2) / bc1 and inv_bc2 = 1 it is RAdam's rectified step.
//
// The contract on the two types (keep it when editing; this header stays
// torch-free for nvcc):
//   A, the value type: copy-constructible, assignable through a pointer
//     (*out = a), and closed under + - * / between two A values, and under
//     A + C, A * C and C * A, with RootInverse<A>::Of (above). Nothing
//     else: no A literals (no A(0.5)), no unary minus, no functions (sqrt,
//     fabs), no comparisons.
//   C, the coefficient type: a scalar constructible from a double literal and
//     closed under C * C (C(0.5) * c.inv_bc2 is a C).
// Every constant is therefore written as a C, e.g. C(0.5) * c.inv_bc2.
template <typename A, typename C = A>
MF_HD void AdamBackwardElement(const AdamCoeffs<C>& c, A g, A p, A mu_new,
                               A r, A grad_u, A grad_mu_new, A grad_nu_new,
                               A* grad_g, A* grad_p, A* grad_mu,
                               A* grad_nu) {
  const A d = r + c.eps;
  const A t = grad_u * c.step / d;
  const A g_mu = grad_mu_new - t;
  const A g_nu = grad_nu_new + (t * mu_new / d) * (C(0.5) * c.inv_bc2) *
                                    RootInverse<A>::Of(r);
  AdamMomentBackward<A, C>(c, g, p, grad_u, g_mu, g_nu, grad_g, grad_p,
                           grad_mu, grad_nu);
}

// SGD with momentum (torch.optim numbers: the first step stores ge itself).
//   buf' = keep * buf + take * ge
//   update = -lr * (nest_g * ge + nest_b * buf')
// (nest_g, nest_b) = (1, momentum) with Nesterov, (0, 1) without; without
// momentum buf' is not formed and update = -lr * ge.
template <typename A>
struct SgdCoeffs {
  A sign, l2, keep, take, nest_g, nest_b, lr;
};

template <typename A>
inline SgdCoeffs<A> MakeSgdCoeffs(int64_t count, double lr, double momentum,
                                  double dampening, bool nesterov,
                                  double weight_decay, bool maximize) {
  const bool first = count == 1;
  SgdCoeffs<A> c;
  c.sign = static_cast<A>(maximize ? -1.0 : 1.0);
  c.l2 = static_cast<A>(weight_decay);
  c.keep = static_cast<A>(first ? 0.0 : momentum);
  c.take = static_cast<A>(first ? 1.0 : 1.0 - dampening);
  if (momentum == 0.0) {  // update = -lr ge, no buffer
    c.nest_g = A(1);
    c.nest_b = A(0);
  } else {
    c.nest_g = static_cast<A>(nesterov ? 1.0 : 0.0);
    c.nest_b = static_cast<A>(nesterov ? momentum : 1.0);
  }
  c.lr = static_cast<A>(lr);
  return c;
}

template <typename A>
MF_HD void SgdElement(const SgdCoeffs<A>& c, A g, A p, A buf, A* update,
                      A* buf_out) {
  const A ge = c.sign * g + c.l2 * p;
  const A b = c.keep * buf + c.take * ge;
  *update = -c.lr * (c.nest_g * ge + c.nest_b * b);
  *buf_out = b;
}

// SGD's closed-form backward: the fused first-order loop and Sgd::Backward
// (A = at::Tensor, C = double) instantiate it; A and C as for
// AdamBackwardElement. Without momentum grad_buf_new is 0 and nest_b is 0, so
// one formula serves both.
//   G_buf' = grad_buf' - lr nest_b gu
//   grad_buf = keep G_buf',  grad_ge = take G_buf' - lr nest_g gu
template <typename A, typename C = A>
MF_HD void SgdBackwardElement(const SgdCoeffs<C>& c, A grad_u, A grad_buf_new,
                              A* grad_g, A* grad_p, A* grad_buf) {
  const A g_buf = grad_buf_new - c.lr * c.nest_b * grad_u;
  const A grad_ge = c.take * g_buf - c.lr * c.nest_g * grad_u;
  *grad_buf = c.keep * g_buf;
  *grad_g = c.sign * grad_ge;
  *grad_p = c.l2 * grad_ge;
}

// RMSProp (torch.optim; eps_root inside the root as in Optax, default 0).
//   sq' = a sq + (1-a) ge^2,  ga' = a ga + (1-a) ge   (centered only)
//   r = sqrt(sq' - centered * ga'^2 + eps_root),  q = ge / (r + eps)
//   buf' = momentum * buf + q,  update = -lr * buf'   (q itself without momentum)
template <typename A>
struct RmsPropCoeffs {
  A sign, l2, alpha, one_minus_alpha, centered, eps_root, eps, momentum, lr;
};

template <typename A>
inline RmsPropCoeffs<A> MakeRmsPropCoeffs(double lr, double alpha, double eps,
                                          double eps_root, double weight_decay,
                                          double momentum, bool centered,
                                          bool maximize) {
  RmsPropCoeffs<A> c;
  c.sign = static_cast<A>(maximize ? -1.0 : 1.0);
  c.l2 = static_cast<A>(weight_decay);
  c.alpha = static_cast<A>(alpha);
  c.one_minus_alpha = static_cast<A>(1.0 - alpha);
  c.centered = static_cast<A>(centered ? 1.0 : 0.0);
  c.eps_root = static_cast<A>(eps_root);
  c.eps = static_cast<A>(eps);
  c.momentum = static_cast<A>(momentum);
  c.lr = static_cast<A>(lr);
  return c;
}

template <typename A>
MF_HD void RmsPropElement(const RmsPropCoeffs<A>& c, A g, A p, A sq, A ga,
                          A buf, A* update, A* sq_out, A* ga_out, A* buf_out,
                          A* root) {
  const A ge = c.sign * g + c.l2 * p;
  const A s = c.alpha * sq + c.one_minus_alpha * ge * ge;
  const A a = c.alpha * ga + c.one_minus_alpha * ge;
  const A r = std::sqrt(s - c.centered * a * a + c.eps_root);
  const A b = c.momentum * buf + ge / (r + c.eps);
  *update = -c.lr * b;
  *sq_out = s;
  *ga_out = a;
  *buf_out = b;
  *root = r;
}

// RMSProp's closed-form backward: the fused first-order loop and
// RmsProp::Backward (A = at::Tensor, C = double) instantiate it; A and C as
// for AdamBackwardElement. Absent states (not centered / no momentum) enter
// as 0 and their coefficients vanish, so one formula serves every variant;
// grad_r is the gradient reaching the saved root itself (0 at first order).
// q = ge / D, D = r + eps, r^2 = sq' - c ga'^2 + eps_root:
//   G_q   = grad_buf' - lr gu;  grad_buf = m G_q
//   G_r   = grad_r - G_q ge / D^2,  G_v = G_r / (2 r)
//   G_sq' = grad_sq' + G_v,  G_ga' = grad_ga' - 2 c ga' G_v
//   grad_ge = G_q / D + 2 (1-a) ge G_sq' + (1-a) G_ga'
template <typename A, typename C = A>
MF_HD void RmsPropBackwardElement(const RmsPropCoeffs<C>& c, A g, A p,
                                  A ga_new, A r, A grad_u, A grad_sq_new,
                                  A grad_ga_new, A grad_buf_new, A grad_r,
                                  A* grad_g, A* grad_p, A* grad_sq,
                                  A* grad_ga, A* grad_buf) {
  const A ge = c.sign * g + c.l2 * p;
  const A d = r + c.eps;
  const A g_q = grad_buf_new - c.lr * grad_u;
  const A g_q_over_d = g_q / d;
  const A g_v =
      (grad_r - g_q_over_d * ge / d) * RootInverse<A>::Of(r) * C(0.5);
  const A g_sq = grad_sq_new + g_v;
  const A g_ga = grad_ga_new - C(2) * c.centered * ga_new * g_v;
  const A grad_ge = g_q_over_d + C(2) * c.one_minus_alpha * ge * g_sq +
                    c.one_minus_alpha * g_ga;
  *grad_g = c.sign * grad_ge;
  *grad_p = c.l2 * grad_ge;
  *grad_sq = c.alpha * g_sq;
  *grad_ga = c.alpha * g_ga;
  *grad_buf = c.momentum * g_q;
}

// Adagrad (torch.optim; clr = lr / (1 + (count-1) lr_decay)).
//   ss' = ss + ge^2,  r = sqrt(ss' + eps_root),  update = -clr ge / (r + eps)
template <typename A>
struct AdagradCoeffs {
  A sign, l2, eps_root, eps, clr;
};

template <typename A>
inline AdagradCoeffs<A> MakeAdagradCoeffs(int64_t count, double lr,
                                          double lr_decay, double weight_decay,
                                          double eps, double eps_root,
                                          bool maximize) {
  AdagradCoeffs<A> c;
  c.sign = static_cast<A>(maximize ? -1.0 : 1.0);
  c.l2 = static_cast<A>(weight_decay);
  c.eps_root = static_cast<A>(eps_root);
  c.eps = static_cast<A>(eps);
  c.clr = static_cast<A>(lr / (1.0 + static_cast<double>(count - 1) * lr_decay));
  return c;
}

template <typename A>
MF_HD void AdagradElement(const AdagradCoeffs<A>& c, A g, A p, A ss,
                          A* update, A* ss_out, A* root) {
  const A ge = c.sign * g + c.l2 * p;
  const A s = ss + ge * ge;
  const A r = std::sqrt(s + c.eps_root);
  *update = -c.clr * ge / (r + c.eps);
  *ss_out = s;
  *root = r;
}

// Adagrad's closed-form backward: the fused first-order loop and
// Adagrad::Backward (A = at::Tensor, C = double) instantiate it; A and C as
// for AdamBackwardElement.
// update = -clr ge / D, D = r + eps, r = sqrt(sum' + eps_root):
//   G_r = clr gu ge / D^2,  G_sum' = grad_sum' + G_r / (2 r)
//   grad_sum = G_sum',  grad_ge = -clr gu / D + 2 ge G_sum'
template <typename A, typename C = A>
MF_HD void AdagradBackwardElement(const AdagradCoeffs<C>& c, A g, A p, A r,
                                  A grad_u, A grad_sum_new, A* grad_g,
                                  A* grad_p, A* grad_sum) {
  const A ge = c.sign * g + c.l2 * p;
  const A d = r + c.eps;
  const A t = grad_u * c.clr / d;
  const A g_sum =
      grad_sum_new + (t * ge / d) * RootInverse<A>::Of(r) * C(0.5);
  const A grad_ge = C(2) * ge * g_sum - t;
  *grad_g = c.sign * grad_ge;
  *grad_p = c.l2 * grad_ge;
  *grad_sum = g_sum;
}

// Adamax (torch.optim).
//   mu' = b1 mu + (1-b1) ge,  u' = max(b2 u, |ge| + eps)
//   update = -(lr / bc1) mu' / u'
template <typename A>
struct AdamaxCoeffs {
  A sign, l2, b1, one_minus_b1, b2, eps, step;
};

template <typename A>
inline AdamaxCoeffs<A> MakeAdamaxCoeffs(int64_t count, double lr, double b1,
                                        double b2, double eps,
                                        double weight_decay, bool maximize) {
  AdamaxCoeffs<A> c;
  c.sign = static_cast<A>(maximize ? -1.0 : 1.0);
  c.l2 = static_cast<A>(weight_decay);
  c.b1 = static_cast<A>(b1);
  c.one_minus_b1 = static_cast<A>(1.0 - b1);
  c.b2 = static_cast<A>(b2);
  c.eps = static_cast<A>(eps);
  c.step = static_cast<A>(lr / (1.0 - std::pow(b1, static_cast<double>(count))));
  return c;
}

template <typename A>
MF_HD void AdamaxElement(const AdamaxCoeffs<A>& c, A g, A p, A mu, A inf,
                         A* update, A* mu_out, A* inf_out) {
  const A ge = c.sign * g + c.l2 * p;
  const A m = c.b1 * mu + c.one_minus_b1 * ge;
  // A compare-select, not std::fmax: fmax's NaN rules keep GCC from
  // vectorizing it. Ties go to the decayed norm, as in the backward.
  const A decayed = c.b2 * inf;
  const A fresh = std::fabs(ge) + c.eps;
  const A u = decayed >= fresh ? decayed : fresh;
  *update = -c.step * m / u;
  *mu_out = m;
  *inf_out = u;
}

// Adadelta (torch.optim).
//   sq' = rho sq + (1-rho) ge^2,  r1 = sqrt(sq' + eps),  r2 = sqrt(acc + eps)
//   delta = r2 / r1 * ge,  acc' = rho acc + (1-rho) delta^2,  update = -lr delta
template <typename A>
struct AdadeltaCoeffs {
  A sign, l2, rho, one_minus_rho, eps, lr;
};

template <typename A>
inline AdadeltaCoeffs<A> MakeAdadeltaCoeffs(double lr, double rho, double eps,
                                            double weight_decay,
                                            bool maximize) {
  AdadeltaCoeffs<A> c;
  c.sign = static_cast<A>(maximize ? -1.0 : 1.0);
  c.l2 = static_cast<A>(weight_decay);
  c.rho = static_cast<A>(rho);
  c.one_minus_rho = static_cast<A>(1.0 - rho);
  c.eps = static_cast<A>(eps);
  c.lr = static_cast<A>(lr);
  return c;
}

template <typename A>
MF_HD void AdadeltaElement(const AdadeltaCoeffs<A>& c, A g, A p, A sq, A acc,
                           A* update, A* sq_out, A* acc_out, A* root_sq,
                           A* root_acc) {
  const A ge = c.sign * g + c.l2 * p;
  const A s = c.rho * sq + c.one_minus_rho * ge * ge;
  const A r1 = std::sqrt(s + c.eps);
  const A r2 = std::sqrt(acc + c.eps);
  const A delta = r2 / r1 * ge;
  *update = -c.lr * delta;
  *sq_out = s;
  *acc_out = c.rho * acc + c.one_minus_rho * delta * delta;
  *root_sq = r1;
  *root_acc = r2;
}

// Adadelta's closed-form backward: the fused first-order loop and
// Adadelta::Backward (A = at::Tensor, C = double) instantiate it; A and C as
// for AdamBackwardElement. grad_r1 and grad_r2 are the gradients reaching the
// saved roots themselves (0 at first order).
// delta = r2 ge / r1, update = -lr delta, acc' = rho acc + (1-rho) delta^2:
//   G_delta = -lr gu + 2 (1-rho) delta grad_acc'
//   G_r1 = grad_r1 - G_delta delta / r1,  G_r2 = grad_r2 + G_delta ge / r1
//   G_sq' = grad_sq' + G_r1 / (2 r1)
//   grad_sq = rho G_sq',  grad_acc = rho grad_acc' + G_r2 / (2 r2)
//   grad_ge = G_delta r2 / r1 + 2 (1-rho) ge G_sq'
template <typename A, typename C = A>
MF_HD void AdadeltaBackwardElement(const AdadeltaCoeffs<C>& c, A g, A p,
                                   A root_sq, A root_acc, A grad_u,
                                   A grad_sq_new, A grad_acc_new, A grad_r1,
                                   A grad_r2, A* grad_g, A* grad_p,
                                   A* grad_sq, A* grad_acc) {
  const A ge = c.sign * g + c.l2 * p;
  const A ratio = root_acc / root_sq;
  const A delta = ratio * ge;
  const A g_delta = C(2) * c.one_minus_rho * delta * grad_acc_new - c.lr * grad_u;
  const A g_r1 = grad_r1 - g_delta * delta / root_sq;
  const A g_r2 = grad_r2 + g_delta * ge / root_sq;
  const A g_sq = grad_sq_new + g_r1 / root_sq * C(0.5);
  const A grad_ge = g_delta * ratio + C(2) * c.one_minus_rho * ge * g_sq;
  *grad_g = c.sign * grad_ge;
  *grad_p = c.l2 * grad_ge;
  *grad_sq = c.rho * g_sq;
  *grad_acc = c.rho * grad_acc_new + g_r2 / root_acc * C(0.5);
}

// RAdam (torch.optim). With rho_t > 5 the step is rectified:
//   update = -K mu' / (r + eps) - lr wd_decoupled param,  r = sqrt(nu' + eps_root),
//   K = lr * rect * sqrt(bc2) / bc1;  otherwise update = -(lr / bc1) mu' - ...
// `rectified` (0 or 1) blends the two without a branch.
template <typename A>
struct RAdamCoeffs {
  A sign, l2, b1, one_minus_b1, b2, one_minus_b2, eps_root, eps, rect_step,
      plain_step, rectified, decoupled;
};

// RAdam's host-side step sizes for step `count`: whether the step is
// rectified (rho_t > 5) and K = lr * rect * sqrt(bc2) / bc1 when it is.
struct RAdamSteps {
  bool rectified;
  double rect_step, plain_step;
};

inline RAdamSteps MakeRAdamSteps(int64_t count, double lr, double b1,
                                 double b2) {
  const double t = static_cast<double>(count);
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
  const double rho_inf = 2.0 / (1.0 - b2) - 1.0;
  const double rho_t = rho_inf - 2.0 * t * std::pow(b2, t) / bc2;
  RAdamSteps s{rho_t > 5.0, 0.0, lr / bc1};
  if (s.rectified) {
    const double rect = std::sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf /
                                  ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t));
    s.rect_step = lr * rect * std::sqrt(bc2) / bc1;
  }
  return s;
}

template <typename A>
inline RAdamCoeffs<A> MakeRAdamCoeffs(int64_t count, double lr, double b1,
                                      double b2, double eps, double eps_root,
                                      double weight_decay, bool decoupled,
                                      bool maximize) {
  const RAdamSteps steps = MakeRAdamSteps(count, lr, b1, b2);
  RAdamCoeffs<A> c;
  c.sign = static_cast<A>(maximize ? -1.0 : 1.0);
  c.l2 = static_cast<A>(decoupled ? 0.0 : weight_decay);
  c.b1 = static_cast<A>(b1);
  c.one_minus_b1 = static_cast<A>(1.0 - b1);
  c.b2 = static_cast<A>(b2);
  c.one_minus_b2 = static_cast<A>(1.0 - b2);
  c.eps_root = static_cast<A>(eps_root);
  c.eps = static_cast<A>(eps);
  c.rect_step = static_cast<A>(steps.rect_step);
  c.plain_step = static_cast<A>(steps.plain_step);
  c.rectified = static_cast<A>(steps.rectified ? 1.0 : 0.0);
  c.decoupled = static_cast<A>(decoupled ? lr * weight_decay : 0.0);
  return c;
}

template <typename A>
MF_HD void RAdamElement(const RAdamCoeffs<A>& c, A g, A p, A mu, A nu,
                        A* update, A* mu_out, A* nu_out, A* root) {
  const A ge = c.sign * g + c.l2 * p;
  const A m = c.b1 * mu + c.one_minus_b1 * ge;
  const A v = c.b2 * nu + c.one_minus_b2 * ge * ge;
  const A r = std::sqrt(v + c.eps_root);
  const A scale = c.rectified * c.rect_step / (r + c.eps) +
                  (A(1) - c.rectified) * c.plain_step;
  *update = -scale * m - c.decoupled * p;
  *mu_out = m;
  *nu_out = v;
  *root = r;
}

}  // namespace metafuse::kernels
