// metafuse::adam / adam_multi: Adam and AdamW, fused, with the exact
// closed-form backward.
#include <torch/library.h>

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
    return MakeAdamCoeffs<A>(static_cast<int64_t>(h.count), h.lr, h.b1,
                             h.b2, h.eps, h.eps_root, h.weight_decay,
                             h.decoupled != 0.0, h.maximize != 0.0);
  }

  template <typename A, int V>
  static inline void Element(const Coeffs<A>& c, A g, A p, A s0, A s1, A s2,
                             A* u, A* o0, A* o1, A* o2, A* x0, A* x1) {
    AdamElement<A>(c, g, p, s0, s1, u, o0, o1, x0);
  }

  // With K = lr/bc1, D = r + eps, update = -K mu'/D - dec p:
  //   G_mu' = grad_mu' - K gu / D
  //   G_r   = K gu mu' / D^2 + grad_r            (du/dr; D = r + eps exactly)
  //   G_nu' = grad_nu' + G_r / (2 r bc2)          (dr/dnu' from the saved r)
  // No square root is recomputed and none is differentiated: 1/(2r) uses the
  // saved r, which is >= sqrt(eps_root) > 0 when eps_root > 0.
  static std::vector<at::Tensor> Backward(const Hyper& h, int,
                                          const SavedStep& s) {
    const at::Tensor& r = s.aux[0];
    const at::Tensor d = r + h.eps;
    const at::Tensor t = s.grad_u * (h.lr / Bc1(h)) / d;
    const at::Tensor g_mu = s.grad_s[0] - t;
    const at::Tensor g_r = AddOpt(t * s.s_out[0] / d, s.grad_aux[0]);
    const at::Tensor g_nu = s.grad_s[1] + g_r / r * (0.5 / Bc2(h));
    return MomentGrads(h, s, g_mu, g_nu);
  }

  static torch::autograd::variable_list FusedBackward(
      const Hyper& h, size_t K, size_t P,
      const torch::autograd::variable_list& saved,
      const torch::autograd::variable_list& grads);
};

// Pointers of one tensor for the fused first-order backward.
// (Adam::FusedBackward is defined below, after its loop.)
template <typename T>
struct AdamBackwardPtrs {
  const T *g, *p, *mu_new, *r, *grad_u, *grad_mu_new, *grad_nu_new;
  T *grad_g, *grad_p, *grad_mu, *grad_nu;
};

template <typename T, bool kParam>
MF_VECTORIZED_LOOP void AdamBackwardLoop(
    const AdamCoeffs<at::opmath_type<T>> c, const AdamBackwardPtrs<T> q,
    int64_t lo, int64_t hi) {
  using A = at::opmath_type<T>;
  const T* __restrict__ g = q.g;
  const T* __restrict__ p = q.p;
  const T* __restrict__ m = q.mu_new;
  const T* __restrict__ r = q.r;
  const T* __restrict__ gu = q.grad_u;
  const T* __restrict__ gm = q.grad_mu_new;
  const T* __restrict__ gn = q.grad_nu_new;
  T* __restrict__ out_g = q.grad_g;
  T* __restrict__ out_p = q.grad_p;
  T* __restrict__ out_m = q.grad_mu;
  T* __restrict__ out_n = q.grad_nu;
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    A a_g, a_p, a_m, a_n;
    AdamBackwardElement<A>(c, static_cast<A>(g[i]),
                           kParam ? static_cast<A>(p[i]) : A(0),
                           static_cast<A>(m[i]), static_cast<A>(r[i]),
                           static_cast<A>(gu[i]), static_cast<A>(gm[i]),
                           static_cast<A>(gn[i]), &a_g, &a_p, &a_m, &a_n);
    out_g[i] = static_cast<T>(a_g);
    if (kParam) out_p[i] = static_cast<T>(a_p);
    out_m[i] = static_cast<T>(a_m);
    out_n[i] = static_cast<T>(a_n);
  }
}

// Adam::FusedBackward: saved = {g[K], p[P], mu[K], nu[K], mu'[K], nu'[K],
// r[K]}, grads = {u[K], mu'[K], nu'[K], r[K] (unused)}.
torch::autograd::variable_list Adam::FusedBackward(
    const Hyper& h, size_t K, size_t P,
    const torch::autograd::variable_list& saved,
    const torch::autograd::variable_list& grads) {
  auto dense = [](const at::Tensor& t, const at::Tensor& like) {
    return t.defined() ? t.contiguous() : at::zeros_like(like);
  };
  std::vector<at::Tensor> in(7 * K);  // g p mu' r gu gm gn, per tensor
  torch::autograd::variable_list out_g(K), out_p(P), out_m(K), out_n(K);
  std::vector<int64_t> sizes(K);
  for (size_t k = 0; k < K; ++k) {
    const at::Tensor g = saved[k].contiguous();
    in[7 * k] = g;
    if (P) in[7 * k + 1] = saved[K + k].contiguous();
    in[7 * k + 2] = saved[K + P + 2 * K + k].contiguous();
    in[7 * k + 3] = saved[K + P + 4 * K + k].contiguous();
    for (int j = 0; j < 3; ++j) in[7 * k + 4 + j] = dense(grads[j * K + k], g);
    out_g[k] = at::empty_like(g);
    if (P) out_p[k] = at::empty_like(g);
    out_m[k] = at::empty_like(g);
    out_n[k] = at::empty_like(g);
    sizes[k] = g.numel();
  }
  const std::vector<int64_t> offsets = SegmentOffsets(sizes);
  if (K > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, in[0].scalar_type(), "adam_backward", [&] {
          using A = at::opmath_type<scalar_t>;
          const auto c = MakeAdamCoeffs<A>(
              static_cast<int64_t>(h.count), h.lr, h.b1, h.b2, h.eps,
              h.eps_root, h.weight_decay, h.decoupled != 0.0,
              h.maximize != 0.0);
          std::vector<AdamBackwardPtrs<scalar_t>> ptrs(K);
          for (size_t k = 0; k < K; ++k) {
            auto ptr = [&](int j) {
              return in[7 * k + j].defined()
                         ? in[7 * k + j].data_ptr<scalar_t>()
                         : nullptr;
            };
            ptrs[k] = {ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), ptr(5), ptr(6),
                       out_g[k].data_ptr<scalar_t>(),
                       P ? out_p[k].data_ptr<scalar_t>() : nullptr,
                       out_m[k].data_ptr<scalar_t>(),
                       out_n[k].data_ptr<scalar_t>()};
          }
          at::parallel_for(
              0, offsets.back(), at::internal::GRAIN_SIZE,
              [&](int64_t begin, int64_t end) {
                ForEachSegment(offsets, begin, end,
                               [&](int64_t k, int64_t lo, int64_t hi) {
                  if (P) {
                    AdamBackwardLoop<scalar_t, true>(c, ptrs[k], lo, hi);
                  } else {
                    AdamBackwardLoop<scalar_t, false>(c, ptrs[k], lo, hi);
                  }
                });
              });
        });
  }
  torch::autograd::variable_list result(out_g);
  result.insert(result.end(), out_p.begin(), out_p.end());
  result.insert(result.end(), out_m.begin(), out_m.end());
  result.insert(result.end(), out_n.begin(), out_n.end());
  return result;
}

}  // namespace
}  // namespace kernels

std::tuple<at::Tensor, at::Tensor, at::Tensor> adam(
    const at::Tensor& grad, const at::Tensor& mu, const at::Tensor& nu,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double b1, double b2, double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize) {
  METAFUSE_CALL_OP("adam", adam, grad, mu, nu, param, count, lr, b1, b2, eps,
                   eps_root, weight_decay, decoupled_weight_decay, maximize);
}

std::tuple<TensorVec, TensorVec, TensorVec> adam_multi(
    at::TensorList grads, at::TensorList mus, at::TensorList nus,
    at::TensorList params, int64_t count, double lr, double b1, double b2,
    double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize) {
  METAFUSE_CALL_OP("adam_multi", adam_multi, grads, mus, nus, params, count,
                   lr, b1, b2, eps, eps_root, weight_decay,
                   decoupled_weight_decay, maximize);
}

// Catch-all kernels: the autograd node is made inside (FusedStep), so the
// ops work under every dispatch key the CPU build has.
TORCH_LIBRARY_FRAGMENT(metafuse, m) {
  using kernels::Adam;
  m.def("adam(Tensor grad, Tensor mu, Tensor nu, Tensor? param=None, *, "
        METAFUSE_ADAM_FAMILY_OPTIONS("0.001")
        ") -> (Tensor update, Tensor mu, Tensor nu)",
        TORCH_FN(kernels::AdamFamily::Single<Adam>));
  m.def("adam_multi(Tensor[] grads, Tensor[] mus, Tensor[] nus, "
        "Tensor[] params, *, " METAFUSE_ADAM_FAMILY_OPTIONS("0.001")
        ") -> (Tensor[] updates, Tensor[] mus, Tensor[] nus)",
        TORCH_FN(kernels::AdamFamily::Multi<Adam>));
  m.def("adam_multi_(Tensor[] grads, Tensor(a!)[] mus, Tensor(b!)[] nus, "
        "Tensor(c!)[] params, *, " METAFUSE_ADAM_FAMILY_OPTIONS("0.001")
        ") -> ()",
        TORCH_FN(kernels::AdamFamily::MultiInPlace<Adam>));
}

}  // namespace metafuse
