#include "frontend/core/diff/zero_order.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

namespace metafuse::diff {

ZeroOrderMethod ParseZeroOrderMethod(const std::string& method) {
  if (method == "naive") return ZeroOrderMethod::kNaive;
  if (method == "forward") return ZeroOrderMethod::kForward;
  if (method == "antithetic") return ZeroOrderMethod::kAntithetic;
  TORCH_CHECK(false, "`method` must be one of 'naive', 'forward', "
              "'antithetic', got '", method, "'");
}

TensorList CombineZeroOrderEstimate(ZeroOrderMethod method,
                                    const at::Tensor& values,
                                    const at::Tensor& other,
                                    const TensorList& noises, double sigma) {
  TORCH_CHECK(sigma > 0, "`sigma` must be > 0, got ", sigma);
  TORCH_CHECK(values.dim() == 1 && values.numel() > 0,
              "zero-order values must be a non-empty vector, got shape ",
              values.sizes());
  const int64_t n = values.size(0);
  at::Tensor weights;  // one scalar weight per sample, then one contraction
  switch (method) {
    case ZeroOrderMethod::kNaive:
      weights = values / (n * sigma);
      break;
    case ZeroOrderMethod::kForward:
      TORCH_CHECK(other.numel() == 1, "forward method needs f(theta)");
      weights = (values - other) / (n * sigma);
      break;
    case ZeroOrderMethod::kAntithetic:
      TORCH_CHECK(other.sizes() == values.sizes(),
                  "antithetic method needs f(theta - sigma z) per sample");
      weights = (values - other) / (2.0 * n * sigma);
      break;
  }
  TensorList out;
  out.reserve(noises.size());
  for (const at::Tensor& z : noises) {
    TORCH_CHECK(z.dim() >= 1 && z.size(0) == n, "noise for a leaf must have ",
                n, " samples in its first dimension, got shape ", z.sizes());
    // sum_i w_i z_i as one matrix-vector product over the flattened leaf.
    at::Tensor flat = z.reshape({n, -1});
    out.push_back(at::matmul(weights.to(flat.scalar_type()), flat)
                      .reshape(z.sizes().slice(1)));
  }
  return out;
}

at::Tensor EvaluateScriptedSamples(torch::jit::Function& fn,
                                   const std::vector<c10::IValue>& args,
                                   const std::vector<int64_t>& argnums,
                                   const TensorList& noises, double sigma,
                                   double sign) {
  TORCH_CHECK(argnums.size() == noises.size(),
              "one noise tensor per differentiated argument expected");
  TORCH_CHECK(!noises.empty(), "no differentiated argument");
  const int64_t n = noises[0].size(0);
  for (size_t j = 0; j < argnums.size(); ++j) {
    TORCH_CHECK(argnums[j] >= 0 && argnums[j] < static_cast<int64_t>(args.size()),
                "argnums entry ", argnums[j], " is out of range for ",
                args.size(), " arguments");
    TORCH_CHECK(args[argnums[j]].isTensor(), "argument ", argnums[j],
                " of a scripted function must be a tensor");
  }
  std::vector<double> values(n);
  std::vector<std::string> errors(n);
  // Each sample is independent: spread them over the intra-op threads. The
  // ops inside a call then run single-threaded (nested region).
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      try {
        std::vector<c10::IValue> call_args = args;
        for (size_t j = 0; j < argnums.size(); ++j) {
          call_args[argnums[j]] =
              args[argnums[j]].toTensor() + noises[j][i] * (sign * sigma);
        }
        c10::IValue result = fn(std::move(call_args));
        TORCH_CHECK(result.isTensor() && result.toTensor().numel() == 1,
                    "the function must return a scalar tensor");
        values[i] = result.toTensor().item<double>();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
  });
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(errors[i].empty(), "zero-order sample ", i, " failed: ",
                errors[i]);
  }
  return at::tensor(values, at::kDouble);
}

}  // namespace metafuse::diff
