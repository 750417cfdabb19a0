// The eager reference the compiled inner loop is tested against: K steps of
// SGD or Adam written with torch::autograd (create_graph), then the query
// loss (the same loss on the same batch) differentiated w.r.t. the initial
// params.
#pragma once

#include <cmath>
#include <vector>

#include <torch/torch.h>

#include "compiler/callable/compiled_inner_loop.h"

namespace metafuse::compiler::testing {

struct EagerUnrollResult {
  std::vector<at::Tensor> adapted, losses, meta;
};

inline EagerUnrollResult EagerUnroll(const LossFunction& loss_fn,
                                     const std::vector<at::Tensor>& params0,
                                     const std::vector<at::Tensor>& batch,
                                     const OptimizerSpec& o, int steps) {
  std::vector<at::Tensor> p = params0, mu, nu, losses;
  for (auto& t : p) {
    mu.push_back(torch::zeros_like(t));
    nu.push_back(torch::zeros_like(t));
  }
  for (int k = 1; k <= steps; ++k) {
    auto loss = loss_fn(p, batch);
    losses.push_back(loss);
    auto grads = torch::autograd::grad({loss}, p, {}, true, true);
    for (size_t i = 0; i < p.size(); ++i) {
      if (o.kind == "sgd") {
        p[i] = p[i] - o.lr * grads[i];
      } else {
        mu[i] = o.b1 * mu[i] + (1 - o.b1) * grads[i];
        nu[i] = o.b2 * nu[i] + (1 - o.b2) * grads[i] * grads[i];
        auto mh = mu[i] / (1 - std::pow(o.b1, k));
        auto nh = nu[i] / (1 - std::pow(o.b2, k));
        p[i] = p[i] - o.lr * mh / (torch::sqrt(nh + o.eps_root) + o.eps);
      }
    }
  }
  auto meta = torch::autograd::grad({loss_fn(p, batch)}, params0);
  return {p, losses, meta};
}

}  // namespace metafuse::compiler::testing
