// MAML on sinusoid regression in C++ with the compiled inner loop: the
// per-step loss is traced once, differentiated symbolically and run by the
// runtime as one autograd node per task; metafuse's Adam updates the
// meta-parameters. Prints the meta-loss and "meta-loss fell".
//
//   bazel run //examples/cpp:maml_compiled -- [iterations]
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <iostream>

#include "compiler/callable/compiled_inner_loop.h"
#include "metafuse/optim/alias.h"
#include "metafuse/optim/optimizer.h"

namespace {

using TensorList = std::vector<at::Tensor>;

at::Tensor Loss(const TensorList& p, const TensorList& batch) {
  auto h = torch::relu(torch::linear(batch[0], p[0], p[1]));
  h = torch::relu(torch::linear(h, p[2], p[3]));
  return torch::mse_loss(torch::linear(h, p[4], p[5]), batch[1]);
}

TensorList InitMlp(int hidden) {
  TensorList params;
  for (auto [in, out] : {std::pair{1, hidden}, {hidden, hidden}, {hidden, 1}}) {
    const double bound = 1.0 / std::sqrt(in);
    params.push_back(torch::empty({out, in}).uniform_(-bound, bound).requires_grad_(true));
    params.push_back(torch::empty({out}).uniform_(-bound, bound).requires_grad_(true));
  }
  return params;
}

TensorList SampleTask(int shots) {
  const double amplitude = 0.1 + 4.9 * torch::rand({}).item<double>();
  const double phase = M_PI * torch::rand({}).item<double>();
  auto x = torch::rand({2 * shots, 1}) * 10 - 5;
  auto y = amplitude * torch::sin(x + phase);
  return {x.slice(0, 0, shots), y.slice(0, 0, shots), x.slice(0, shots), y.slice(0, shots)};
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 300;
  const int meta_batch = 25, shots = 10;
  torch::manual_seed(0);
  TensorList meta_params = InitMlp(40);

  metafuse::compiler::OptimizerSpec inner;
  inner.kind = "sgd";
  inner.lr = 0.01;
  TensorList example = SampleTask(shots);
  auto adapt = metafuse::compiler::CompileInnerLoop(
      Loss, meta_params, {example[0], example[1]}, inner, /*steps=*/5);

  metafuse::optim::AdamOptions outer_options;
  outer_options.lr = 1e-3;
  metafuse::optim::Optimizer outer(meta_params, metafuse::optim::Adam(outer_options));
  double first = 0, last = 0;
  for (int it = 0; it < iterations; ++it) {
    outer.ZeroGrad();
    double total = 0;
    for (int t = 0; t < meta_batch; ++t) {
      TensorList task = SampleTask(shots);
      TensorList inputs = meta_params;
      inputs.push_back(task[0]);
      inputs.push_back(task[1]);
      TensorList fast = (*adapt)(inputs);
      auto meta_loss = Loss(fast, {task[2], task[3]}) / meta_batch;
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
  std::cout << (last < first ? "meta-loss fell" : "meta-loss did not fall") << " ("
            << first << " -> " << last << "), "
            << adapt->function().generic().forward.num_instructions() << " forward and "
            << adapt->function().generic().backward.num_instructions()
            << " backward instructions\n";
  return last < first ? 0 : 1;
}
