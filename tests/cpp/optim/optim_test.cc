// The C++ optimizer core against torch::optim (C++), float64, 50 steps, and
// the differentiable FuncOptimizer against a hand-written meta-gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "metafuse/optim/alias.h"
#include "metafuse/optim/optimizer.h"
#include "metafuse/optim/transforms.h"

namespace metafuse::optim {
namespace {

constexpr int kSteps = 50;

torch::nn::Sequential MakeNet() {
  torch::manual_seed(0);
  torch::nn::Sequential net(torch::nn::Linear(3, 5), torch::nn::Tanh(),
                            torch::nn::Linear(5, 2));
  net->to(torch::kFloat64);
  return net;
}

torch::Tensor Loss(torch::nn::Sequential& net) {
  torch::manual_seed(1);
  auto x = torch::randn({16, 3}, torch::kFloat64);
  auto y = torch::randn({16, 2}, torch::kFloat64);
  return (net->forward(x) - y).pow(2).mean();
}

template <typename MakeTorchOptimizer>
void ExpectSameTrajectory(TransformPtr ours, MakeTorchOptimizer make_theirs) {
  auto net_ours = MakeNet();
  auto net_theirs = MakeNet();
  Optimizer opt(*net_ours, std::move(ours));
  auto theirs = make_theirs(net_theirs->parameters());
  for (int step = 0; step < kSteps; ++step) {
    opt.ZeroGrad();
    Loss(net_ours).backward();
    opt.Step();
    theirs->zero_grad();
    Loss(net_theirs).backward();
    theirs->step();
  }
  auto a = net_ours->parameters();
  auto b = net_theirs->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-10, 1e-12))
        << "parameter " << i << "\n" << a[i] - b[i];
  }
}

TEST(OptimCpp, SgdMatchesTorchOptim) {
  for (double momentum : {0.0, 0.9}) {
    for (bool nesterov : {false, true}) {
      if (nesterov && momentum == 0) continue;
      SgdOptions o;
      o.lr = 0.1;
      o.momentum = momentum;
      o.nesterov = nesterov;
      o.weight_decay = 0.01;
      ExpectSameTrajectory(Sgd(o), [&](auto params) {
        return std::make_unique<torch::optim::SGD>(
            params, torch::optim::SGDOptions(0.1)
                        .momentum(momentum)
                        .nesterov(nesterov)
                        .weight_decay(0.01));
      });
    }
  }
}

TEST(OptimCpp, AdamMatchesTorchOptim) {
  for (double wd : {0.0, 0.05}) {
    AdamOptions o;
    o.lr = 0.01;
    o.eps = 1e-3;
    o.weight_decay = wd;
    ExpectSameTrajectory(Adam(o), [&](auto params) {
      return std::make_unique<torch::optim::Adam>(
          params, torch::optim::AdamOptions(0.01).eps(1e-3).weight_decay(wd));
    });
  }
}

// In place (float32/64 CPU: kernels/adam_direction's one loop) and out of
// place (the op chain) give the same bits, moments and direction.
TEST(OptimCpp, ScaleByAdamInPlaceGivesTheOutOfPlaceBits) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    auto tx = ScaleByAdam(0.9, 0.999, 1e-8, 1e-10, false);
    torch::manual_seed(0);
    TensorList params{torch::randn({40, 40}, dtype), torch::randn({40}, dtype),
                      torch::randn({1, 33}, dtype)};
    TransformState in_place = tx->Init(params), out_of_place = tx->Init(params);
    for (int step = 0; step < 5; ++step) {
      TensorList grads;
      for (const auto& p : params) grads.push_back(torch::randn_like(p) * (step + 1));
      TensorList a = tx->Update(grads, in_place, &params, /*inplace=*/true);
      TensorList b = tx->Update(grads, out_of_place, &params, /*inplace=*/false);
      for (size_t i = 0; i < params.size(); ++i) {
        ASSERT_TRUE(torch::equal(a[i], b[i])) << dtype << " step " << step << " leaf " << i;
        for (const char* field : {"mu", "nu"}) {
          ASSERT_TRUE(torch::equal(in_place.field(field).tensors[i],
                                   out_of_place.field(field).tensors[i]))
              << field << " of leaf " << i;
        }
      }
    }
  }
}

TEST(OptimCpp, AdamWMatchesTorchOptim) {
  AdamOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.05;
  ExpectSameTrajectory(AdamW(o), [&](auto params) {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(0.01).weight_decay(0.05));
  });
}

TEST(OptimCpp, RmsPropMatchesTorchOptim) {
  for (bool centered : {false, true}) {
    RmsPropOptions o;
    o.lr = 0.001;
    o.centered = centered;
    o.momentum = 0.9;
    ExpectSameTrajectory(RmsProp(o), [&](auto params) {
      return std::make_unique<torch::optim::RMSprop>(
          params, torch::optim::RMSpropOptions(0.001)
                      .centered(centered)
                      .momentum(0.9));
    });
  }
}

TEST(OptimCpp, AdagradMatchesTorchOptim) {
  AdagradOptions o;
  o.lr = 0.1;
  o.lr_decay = 0.01;
  o.initial_accumulator_value = 0.1;
  ExpectSameTrajectory(Adagrad(o), [&](auto params) {
    return std::make_unique<torch::optim::Adagrad>(
        params, torch::optim::AdagradOptions(0.1)
                    .lr_decay(0.01)
                    .initial_accumulator_value(0.1));
  });
}

TEST(OptimCpp, FuncOptimizerMetaGradientOfOneSgdStep) {
  // w1 = w0 - lr * d/dw (w . x)^2 = w0 - 2 lr (w0 . x) x
  // meta-loss = sum(w1); d meta / d w0 = 1 - 2 lr x (x . 1)
  auto w0 = torch::tensor({0.5, -1.0, 2.0}, torch::dtype(torch::kFloat64).requires_grad(true));
  auto x = torch::tensor({1.0, 2.0, 3.0}, torch::kFloat64);
  const double lr = 0.01;
  SgdOptions o;
  o.lr = lr;
  FuncOptimizer opt(Sgd(o));
  auto w1 = opt.Step((w0 * x).sum().pow(2), {w0})[0];
  auto grad = torch::autograd::grad({w1.sum()}, {w0})[0];
  auto expected = torch::ones({3}, torch::kFloat64) - 2 * lr * x * x.sum();
  EXPECT_TRUE(torch::allclose(grad, expected, 1e-12, 1e-12)) << grad;
}

TEST(OptimCpp, ErrorsNameTheProblem) {
  auto expect_error = [](auto fn, const std::string& needle) {
    try {
      fn();
      FAIL() << "expected an error mentioning " << needle;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << e.what();
    }
  };
  SgdOptions bad;
  bad.lr = -1.0;
  expect_error([&] { Sgd(bad); }, "`lr` must be >= 0");
  AdamOptions betas;
  betas.b1 = 1.0;
  expect_error([&] { Adam(betas); }, "b1");
  auto tx = Adam(AdamOptions{});
  TensorList params = {torch::zeros({2})};
  auto state = tx->Init(params);
  expect_error([&] { tx->Update({torch::zeros({3})}, state, nullptr, false); },
               "shape");
  expect_error([&] { ApplyUpdates(params, {}, false); }, "same tree structure");
  FuncOptimizer func(Sgd(SgdOptions{}));
  expect_error([&] { func.Step(torch::ones({}), params); }, "does not depend");
}

TEST(OptimCpp, WeightDecayInPlaceOnAViewGradient) {
  // A gradient that is a view made without grad mode (as autograd's are),
  // a parameter that requires grad: the in-place decay adds it as data.
  auto p = torch::ones({2, 3}, torch::requires_grad());
  torch::Tensor g;
  {
    torch::NoGradGuard no_grad;
    g = torch::full({3, 2}, 0.5).t();
  }
  ASSERT_TRUE(g.is_view());
  SgdOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.1;
  auto tx = Sgd(o);
  TensorList params = {p};
  auto state = tx->Init(params);
  auto u = tx->Update({g}, state, &params, /*inplace=*/true)[0];
  EXPECT_FALSE(u.requires_grad());
  EXPECT_TRUE(torch::allclose(u, torch::full({2, 3}, -0.1 * 0.6)));
}

TEST(OptimCpp, ClipGradNormIsAConstantScalingForAutograd) {
  auto u = torch::tensor({3.0, 4.0}, torch::dtype(torch::kFloat64).requires_grad(true));
  auto tx = ClipGradNorm(1.0, 2.0);
  TransformState state = tx->Init({u});
  auto clipped = tx->Update({u * 1.0}, state, nullptr, false)[0];
  auto grad = torch::autograd::grad({clipped.sum()}, {u})[0];
  EXPECT_TRUE(torch::allclose(grad, torch::full({2}, 1.0 / (5.0 + 1e-6), torch::kFloat64)))
      << grad;
  auto strict = ClipGradNorm(1.0, 2.0, /*error_if_nonfinite=*/true);
  TransformState s2 = strict->Init({u});
  EXPECT_THROW(strict->Update({torch::tensor({INFINITY, 1.0})}, s2, nullptr, false),
               c10::Error);
}

TEST(OptimCpp, RmsPropNesterovAndInitialScale) {
  RmsPropOptions o;
  o.lr = 0.1;
  o.alpha = 0.9;
  o.momentum = 0.5;
  o.initial_scale = 0.3;
  o.nesterov = true;
  auto tx = RmsProp(o);
  auto w = torch::tensor({1.0, -2.0}, torch::kFloat64);
  auto state = tx->Init({w});
  auto nu = torch::full({2}, 0.3, torch::kFloat64);
  torch::Tensor buf;
  for (int step = 0; step < 3; ++step) {
    auto g = 2 * w;
    TensorList params = {w};
    auto u = tx->Update({g.clone()}, state, &params, false)[0];
    nu = 0.9 * nu + 0.1 * g * g;
    auto scaled = g / (nu.sqrt() + 1e-8);
    buf = step == 0 ? scaled : 0.5 * buf + scaled;
    EXPECT_TRUE(torch::allclose(u, -0.1 * (scaled + 0.5 * buf), 1e-12, 1e-12)) << u;
    w = w + u;
  }
}

}  // namespace
}  // namespace metafuse::optim
