// The fused first-order backward shared by the optimizers that have one
// (included by kernels/fused_step.h). When no graph of the backward is wanted
// (create_graph=False) and nothing reaches the aux outputs, the closed form
// runs as one vectorized multi-tensor pass instead of a dozen ATen ops; with
// create_graph=True the same closed form runs in ATen ops (Opt::Backward), so
// both orders agree.
//
// An optimizer opts in with `static constexpr bool kFusedBackward = true` and
//   template <A, V> BackwardElement(c, g, p, s0, s1, s2, o0, o1, o2, x0, x1,
//                                   gu, go0, go1, go2,
//                                   &grad_g, &grad_p, &gs0, &gs1, &gs2)
// (inputs, new states, aux, the incoming gradients of update and new states;
// out: gradients of grad, param and the state inputs).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <type_traits>
#include <vector>

#include "kernels/multi_tensor.h"

// Needs MF_VECTORIZED_LOOP and DispatchVariant from kernels/fused_step.h,
// which includes this file.

namespace metafuse::kernels {

template <class Opt, class = void>
struct HasFusedBackward : std::false_type {};
template <class Opt>
struct HasFusedBackward<Opt, std::enable_if_t<Opt::kFusedBackward>>
    : std::true_type {};

template <typename T>
struct BackwardPtrs {
  const T* in[15] = {};  // g p s0 s1 s2 o0 o1 o2 x0 x1 gu go0 go1 go2 (14)
  T* out[5] = {};        // grad_g grad_p gs0 gs1 gs2
};

// ptr[i] where the slot exists, 0 otherwise; decided at compile time so no
// conditional load is left in the loop.
template <bool kPresent, typename A, typename T>
inline __attribute__((always_inline)) A LoadIf(const T* ptr, int64_t i) {
  if constexpr (kPresent) {
    return static_cast<A>(ptr[i]);
  } else {
    return A(0);
  }
}

// kStateGrads: whether gradients reach the new states. Usually none do (a
// meta-loss of the parameters reaches the states only through later steps'
// updates, and the last step's states are not used); the loop then reads no
// go* array instead of zeros materialized for it.
template <class Opt, typename T, bool kParam, bool kStateGrads, int kVariant>
MF_VECTORIZED_LOOP void BackwardLoop(
    const typename Opt::template Coeffs<at::opmath_type<T>> c,
    const BackwardPtrs<T> q, int64_t lo, int64_t hi) {
  using A = at::opmath_type<T>;
  constexpr int S = NumStates<Opt>(kVariant);
  constexpr int X = Opt::kNumAux;
  // Local restrict scalars: see ElementLoop.
  const T* __restrict__ g = q.in[0];
  const T* __restrict__ p = q.in[1];
  const T* __restrict__ s0 = q.in[2];
  const T* __restrict__ s1 = q.in[3];
  const T* __restrict__ s2 = q.in[4];
  const T* __restrict__ o0 = q.in[5];
  const T* __restrict__ o1 = q.in[6];
  const T* __restrict__ o2 = q.in[7];
  const T* __restrict__ x0 = q.in[8];
  const T* __restrict__ x1 = q.in[9];
  const T* __restrict__ gu = q.in[10];
  const T* __restrict__ go0 = q.in[11];
  const T* __restrict__ go1 = q.in[12];
  const T* __restrict__ go2 = q.in[13];
  T* __restrict__ out_g = q.out[0];
  T* __restrict__ out_p = q.out[1];
  T* __restrict__ out_s0 = q.out[2];
  T* __restrict__ out_s1 = q.out[3];
  T* __restrict__ out_s2 = q.out[4];
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    A a_g, a_p, a_0 = 0, a_1 = 0, a_2 = 0;
    Opt::template BackwardElement<A, kVariant>(
        c, static_cast<A>(g[i]), LoadIf<kParam, A>(p, i),
        LoadIf<(S > 0), A>(s0, i), LoadIf<(S > 1), A>(s1, i),
        LoadIf<(S > 2), A>(s2, i), LoadIf<(S > 0), A>(o0, i),
        LoadIf<(S > 1), A>(o1, i), LoadIf<(S > 2), A>(o2, i),
        LoadIf<(X > 0), A>(x0, i), LoadIf<(X > 1), A>(x1, i),
        static_cast<A>(gu[i]), LoadIf<(kStateGrads && S > 0), A>(go0, i),
        LoadIf<(kStateGrads && S > 1), A>(go1, i),
        LoadIf<(kStateGrads && S > 2), A>(go2, i), &a_g, &a_p,
        &a_0, &a_1, &a_2);
    out_g[i] = static_cast<T>(a_g);
    if (kParam) out_p[i] = static_cast<T>(a_p);
    if (S > 0) out_s0[i] = static_cast<T>(a_0);
    if (S > 1) out_s1[i] = static_cast<T>(a_1);
    if (S > 2) out_s2[i] = static_cast<T>(a_2);
  }
}

template <class Opt, typename T, bool kParam, bool kStateGrads>
void RunBackwardVariant(int variant,
                        const typename Opt::template Coeffs<at::opmath_type<T>>& c,
                        const BackwardPtrs<T>& q, int64_t lo, int64_t hi) {
  DispatchVariant<Opt::kNumVariants>(variant, [&](auto v) {
    BackwardLoop<Opt, T, kParam, kStateGrads, decltype(v)::value>(c, q, lo,
                                                                  hi);
  });
}

template <class Opt, typename T>
void RunBackward(bool param, bool state_grads, int variant,
                 const typename Opt::template Coeffs<at::opmath_type<T>>& c,
                 const BackwardPtrs<T>& q, int64_t lo, int64_t hi) {
  if (param) {
    if (state_grads) {
      RunBackwardVariant<Opt, T, true, true>(variant, c, q, lo, hi);
    } else {
      RunBackwardVariant<Opt, T, true, false>(variant, c, q, lo, hi);
    }
  } else if (state_grads) {
    RunBackwardVariant<Opt, T, false, true>(variant, c, q, lo, hi);
  } else {
    RunBackwardVariant<Opt, T, false, false>(variant, c, q, lo, hi);
  }
}

// saved = {g[K], p[P], s_in[S*K], s_out[S*K], aux[X*K]} (as FusedStepFunction
// saves them), grads = {u[K], s_out[S*K], aux[X*K] (undefined)}. Returns
// {grad_g[K], grad_p[P], grad_s_in[S*K]}.
template <class Opt>
torch::autograd::variable_list FusedFirstOrderBackward(
    const typename Opt::Hyper& h, size_t K, size_t P,
    const torch::autograd::variable_list& saved,
    const torch::autograd::variable_list& grads) {
  const int variant = Opt::Variant(h);
  const int S = NumStates<Opt>(variant);
  const int X = Opt::kNumAux;
  // in[k][slot] in BackwardPtrs order. An undefined gradient of the update
  // becomes zeros; those of the new states are not read at all when none is
  // defined (the common case), and become zeros otherwise.
  bool state_grads = false;
  for (size_t i = K; i < (1 + S) * K; ++i) state_grads |= grads[i].defined();
  std::vector<std::vector<at::Tensor>> in(K, std::vector<at::Tensor>(14));
  torch::autograd::variable_list out_g(K), out_p(P), out_s(S * K);
  std::vector<int64_t> sizes(K);
  for (size_t k = 0; k < K; ++k) {
    auto& t = in[k];
    t[0] = saved[k].contiguous();
    if (P) t[1] = saved[K + k].contiguous();
    const size_t s_in = K + P, s_out = s_in + S * K, aux = s_out + S * K;
    for (int j = 0; j < S; ++j) {
      t[2 + j] = saved[s_in + j * K + k].contiguous();
      t[5 + j] = saved[s_out + j * K + k].contiguous();
    }
    for (int x = 0; x < X; ++x) t[8 + x] = saved[aux + x * K + k].contiguous();
    auto dense = [&](const at::Tensor& gt) {
      return gt.defined() ? gt.contiguous() : at::zeros_like(t[0]);
    };
    t[10] = dense(grads[k]);
    if (state_grads) {
      for (int j = 0; j < S; ++j) t[11 + j] = dense(grads[(1 + j) * K + k]);
    }
    out_g[k] = at::empty_like(t[0]);
    if (P) out_p[k] = at::empty_like(t[0]);
    for (int j = 0; j < S; ++j) out_s[j * K + k] = at::empty_like(t[0]);
    sizes[k] = t[0].numel();
  }
  const std::vector<int64_t> offsets = SegmentOffsets(sizes);
  if (K > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, in[0][0].scalar_type(), Opt::kName, [&] {
          using A = at::opmath_type<scalar_t>;
          const auto c = Opt::template MakeCoeffs<A>(h);
          std::vector<BackwardPtrs<scalar_t>> ptrs(K);
          for (size_t k = 0; k < K; ++k) {
            for (int i = 0; i < 14; ++i) {
              if (in[k][i].defined()) ptrs[k].in[i] = in[k][i].data_ptr<scalar_t>();
            }
            ptrs[k].out[0] = out_g[k].data_ptr<scalar_t>();
            if (P) ptrs[k].out[1] = out_p[k].data_ptr<scalar_t>();
            for (int j = 0; j < S; ++j) {
              ptrs[k].out[2 + j] = out_s[j * K + k].data_ptr<scalar_t>();
            }
          }
          at::parallel_for(
              0, offsets.back(), at::internal::GRAIN_SIZE,
              [&](int64_t begin, int64_t end) {
                ForEachSegment(offsets, begin, end,
                               [&](int64_t k, int64_t lo, int64_t hi) {
                  RunBackward<Opt, scalar_t>(P != 0, state_grads, variant,
                                             c, ptrs[k], lo, hi);
                });
              });
        });
  }
  torch::autograd::variable_list result(out_g);
  result.insert(result.end(), out_p.begin(), out_p.end());
  result.insert(result.end(), out_s.begin(), out_s.end());
  return result;
}

}  // namespace metafuse::kernels
