// MAML on sinusoid regression in C++ with metafuse's FuncOptimizer.
//
// The model is a functional MLP (parameters in a TensorList) so that the
// inner updates stay differentiable; the outer loop uses metafuse's Adam in
// place. Prints the meta-loss every few iterations and "meta-loss fell" when
// the last value is below the first.
//
//   bazel run //examples/cpp:maml_sinusoid -- [iterations]
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <iostream>

#include "metafuse/optim/alias.h"
#include "metafuse/optim/optimizer.h"

namespace {

using metafuse::optim::TensorList;

TensorList InitMlp(int hidden) {
  auto layer = [](int in, int out) {
    const double bound = 1.0 / std::sqrt(in);
    return TensorList{torch::empty({out, in}).uniform_(-bound, bound),
                      torch::empty({out}).uniform_(-bound, bound)};
  };
  TensorList params;
  for (auto [in, out] : {std::pair{1, hidden}, {hidden, hidden}, {hidden, 1}}) {
    for (auto& t : layer(in, out)) params.push_back(t.requires_grad_(true));
  }
  return params;
}

torch::Tensor Forward(const TensorList& p, const torch::Tensor& x) {
  auto h = torch::relu(torch::linear(x, p[0], p[1]));
  h = torch::relu(torch::linear(h, p[2], p[3]));
  return torch::linear(h, p[4], p[5]);
}

struct Task {
  torch::Tensor xs, ys, xq, yq;
};

Task SampleTask(int shots) {
  const double amplitude = 0.1 + 4.9 * torch::rand({}).item<double>();
  const double phase = M_PI * torch::rand({}).item<double>();
  auto x = torch::rand({2 * shots, 1}) * 10 - 5;
  auto y = amplitude * torch::sin(x + phase);
  return {x.slice(0, 0, shots), y.slice(0, 0, shots), x.slice(0, shots),
          y.slice(0, shots)};
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 300;
  const int meta_batch = 25, inner_steps = 5, shots = 10;
  torch::manual_seed(0);
  TensorList meta_params = InitMlp(40);

  metafuse::optim::AdamOptions outer_options;
  outer_options.lr = 1e-3;
  metafuse::optim::Optimizer outer(meta_params,
                                   metafuse::optim::Adam(outer_options));
  metafuse::optim::SgdOptions inner_options;
  inner_options.lr = 0.01;
  auto inner_tx = metafuse::optim::Sgd(inner_options);

  double first = 0, last = 0;
  for (int it = 0; it < iterations; ++it) {
    outer.ZeroGrad();
    double total = 0;
    for (int t = 0; t < meta_batch; ++t) {
      Task task = SampleTask(shots);
      metafuse::optim::FuncOptimizer inner(inner_tx);
      TensorList fast = meta_params;
      for (int k = 0; k < inner_steps; ++k) {
        fast = inner.Step((Forward(fast, task.xs) - task.ys).pow(2).mean(),
                          fast);
      }
      auto meta_loss =
          (Forward(fast, task.xq) - task.yq).pow(2).mean() / meta_batch;
      meta_loss.backward();
      total += meta_loss.item<double>();
    }
    outer.Step();
    if (it == 0) first = total;
    last = total;
    if (it % 50 == 0 || it == iterations - 1) {
      std::cout << "iteration " << it << " meta-loss " << total << "\n";
    }
  }
  std::cout << (last < first ? "meta-loss fell" : "meta-loss did not fall")
            << " (" << first << " -> " << last << ")\n";
  return last < first ? 0 : 1;
}
