// Zero-order (evolution-strategies) gradient estimation, the numeric core of
// metafuse.diff.zero_order.
//
// For f_sigma(theta) = E_z[f(theta + sigma z)] the gradient is estimated from
// n noise samples z_i:
//   naive       g = 1/(n sigma)  sum_i f(theta + sigma z_i) z_i
//   forward     g = 1/(n sigma)  sum_i (f(theta + sigma z_i) - f(theta)) z_i
//   antithetic  g = 1/(2n sigma) sum_i (f(theta + sigma z_i) - f(theta - sigma z_i)) z_i
// (for Gaussian z these are unbiased for grad f_sigma).
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/api/function_impl.h>

namespace metafuse::diff {

using TensorList = std::vector<at::Tensor>;

enum class ZeroOrderMethod { kNaive, kForward, kAntithetic };

// "naive", "forward" or "antithetic"; anything else is an error naming
// `method` and the choices.
ZeroOrderMethod ParseZeroOrderMethod(const std::string& method);

// The estimate for each differentiated leaf. `noises[j]` is [n, *shape_j];
// `values` is [n] = f(theta + sigma z_i); `other` is [n] = f(theta - sigma
// z_i) for antithetic, the scalar f(theta) for forward, unused for naive.
TensorList CombineZeroOrderEstimate(ZeroOrderMethod method,
                                    const at::Tensor& values,
                                    const at::Tensor& other,
                                    const TensorList& noises, double sigma);

// Evaluates a TorchScript function at n perturbed points, samples spread over
// OpenMP threads (no Python, no GIL): sample i calls `fn` with
// args[argnums[j]] + sign * sigma * noises[j][i]. Each call must return a
// scalar tensor; the result is [n].
at::Tensor EvaluateScriptedSamples(torch::jit::Function& fn,
                                   const std::vector<c10::IValue>& args,
                                   const std::vector<int64_t>& argnums,
                                   const TensorList& noises, double sigma,
                                   double sign);

}  // namespace metafuse::diff
