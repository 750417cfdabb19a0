// The C++ API of the fused optimizer ops: values, exact first and second
// derivatives against autograd of a plain reference, the multi-tensor form.
#include "kernels/optimizers.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace metafuse {
namespace {

auto F64() { return torch::dtype(torch::kFloat64); }

// Adam in plain differentiable ATen ops.
std::vector<at::Tensor> AdamReference(const at::Tensor& g, const at::Tensor& mu,
                                      const at::Tensor& nu, int64_t count,
                                      double lr, double b1, double b2,
                                      double eps, double eps_root) {
  auto m = mu * b1 + g * (1 - b1);
  auto v = nu * b2 + g * g * (1 - b2);
  const double bc1 = 1 - std::pow(b1, count), bc2 = 1 - std::pow(b2, count);
  auto u = -(m / bc1) / ((v / bc2 + eps_root).sqrt() + eps) * lr;
  return {u, m, v};
}

// d(loss)/d(g, mu, nu) and the gradient of |that|^2, for either implementation.
template <typename Fn>
std::vector<at::Tensor> FirstAndSecond(Fn fn, const std::vector<at::Tensor>& in) {
  std::vector<at::Tensor> xs;
  for (const auto& t : in) xs.push_back(t.clone().requires_grad_());
  std::vector<at::Tensor> out = fn(xs[0], xs[1], xs[2]);
  auto w = torch::linspace(-1, 1, in[0].numel(), F64());
  auto loss = (out[0] * w).sum() + (out[1] * w.flip(0)).sum() + (out[2] * w * w).sum();
  auto first = torch::autograd::grad({loss}, xs, {}, true, true);
  at::Tensor total = first[0].pow(2).sum() + first[1].pow(2).sum() + first[2].pow(2).sum();
  auto second = torch::autograd::grad({total}, xs, {}, false, false, true);
  std::vector<at::Tensor> all(first.begin(), first.end());
  for (auto& s : second) all.push_back(s.defined() ? s : torch::zeros_like(xs[0]));
  return all;
}

TEST(FusedAdam, ExactDerivativesWithEpsAndEpsRoot) {
  torch::manual_seed(0);
  std::vector<at::Tensor> in = {torch::randn({50}, F64()), torch::randn({50}, F64()),
                                torch::rand({50}, F64()) * 1e-4};
  in[0][3] = 0.0;  // a zero gradient and, with mu = 0, a zero first moment
  in[1][3] = 0.0;
  auto fused = FirstAndSecond(
      [](auto g, auto m, auto v) {
        auto [u, m2, v2] = adam(g, m, v, c10::nullopt, 3, 0.1, 0.9, 0.999,
                                1e-3, 1e-6, 0.0, false, false);
        return std::vector<at::Tensor>{u, m2, v2};
      },
      in);
  auto ref = FirstAndSecond(
      [](auto g, auto m, auto v) {
        return AdamReference(g, m, v, 3, 0.1, 0.9, 0.999, 1e-3, 1e-6);
      },
      in);
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_TRUE(torch::allclose(fused[i], ref[i], 1e-11, 1e-14)) << "result " << i;
  }
  EXPECT_NE(fused[0][3].item<double>(), 0.0);  // derivative where mu' == 0
}

TEST(FusedAdam, MultiTensorEqualsPerTensorAcrossParallelChunks) {
  torch::manual_seed(1);
  std::vector<at::Tensor> g, m, v, p;
  for (int64_t n : {1, 40001, 0, 3, 33333}) {
    g.push_back(torch::randn({n}));
    m.push_back(torch::randn({n}));
    v.push_back(torch::rand({n}));
    p.push_back(torch::randn({n}));
  }
  auto [us, ms, vs] = adam_multi(g, m, v, p, 2, 1e-2, 0.9, 0.99, 1e-8, 0.0,
                                 0.01, true, false);
  ASSERT_EQ(us.size(), g.size());
  for (size_t k = 0; k < g.size(); ++k) {
    auto [u, m2, v2] = adam(g[k], m[k], v[k], p[k], 2, 1e-2, 0.9, 0.99, 1e-8,
                            0.0, 0.01, true, false);
    EXPECT_TRUE(torch::equal(us[k], u)) << k;
    EXPECT_TRUE(torch::equal(ms[k], m2)) << k;
    EXPECT_TRUE(torch::equal(vs[k], v2)) << k;
  }
}

TEST(FusedOptimizers, EveryOpMatchesItsFormula) {
  torch::manual_seed(2);
  auto g = torch::randn({17}, F64()), p = torch::randn({17}, F64());
  auto s = torch::rand({17}, F64()) + 0.1, t = torch::rand({17}, F64()) + 0.1;
  auto close = [](const at::Tensor& a, const at::Tensor& b) {
    return torch::allclose(a, b, 1e-12, 1e-14);
  };
  {  // SGD, Nesterov, weight decay, second step
    auto [u, b] = sgd(g, s, p, 2, 0.1, 0.9, 0.0, true, 0.01, false);
    auto ge = g + p * 0.01;
    auto b_ref = s * 0.9 + ge;
    EXPECT_TRUE(close(b, b_ref));
    EXPECT_TRUE(close(u, -(ge + b_ref * 0.9) * 0.1));
  }
  {  // RMSProp, centered, with momentum
    auto ga = torch::randn({17}, F64()) * 0.1;
    auto [u, sq, ga2, buf] = rmsprop(g, s + 1, ga, t, c10::nullopt, 0.01, 0.9,
                                     1e-3, 0.0, 0.0, 0.5, true, false);
    auto sq_ref = (s + 1) * 0.9 + g * g * 0.1;
    auto ga_ref = ga * 0.9 + g * 0.1;
    auto buf_ref = t * 0.5 + g / ((sq_ref - ga_ref * ga_ref).sqrt() + 1e-3);
    EXPECT_TRUE(close(sq, sq_ref));
    EXPECT_TRUE(close(ga2, ga_ref));
    EXPECT_TRUE(close(u, -buf_ref * 0.01));
  }
  {  // Adagrad with lr decay
    auto [u, sum] = adagrad(g, s, c10::nullopt, 3, 0.1, 0.5, 0.0, 1e-10, 0.0, true);
    auto sum_ref = s + g * g;
    EXPECT_TRUE(close(sum, sum_ref));
    EXPECT_TRUE(close(u, g * (0.1 / 2.0) / (sum_ref.sqrt() + 1e-10)));
  }
  {  // Adamax
    auto [u, m, n] = adamax(g, p, s, c10::nullopt, 2, 0.002, 0.9, 0.999, 1e-8, 0.0, false);
    auto n_ref = torch::maximum(s * 0.999, g.abs() + 1e-8);
    EXPECT_TRUE(close(n, n_ref));
    EXPECT_TRUE(close(u, -(p * 0.9 + g * 0.1) / n_ref * (0.002 / (1 - 0.81))));
  }
  {  // Adadelta
    auto [u, sq, acc] = adadelta(g, s, t, c10::nullopt, 1.0, 0.9, 1e-6, 0.0, false);
    auto sq_ref = s * 0.9 + g * g * 0.1;
    auto delta = (t + 1e-6).sqrt() / (sq_ref + 1e-6).sqrt() * g;
    EXPECT_TRUE(close(u, -delta));
    EXPECT_TRUE(close(acc, t * 0.9 + delta * delta * 0.1));
  }
  {  // RAdam before rectification: plain bias-corrected momentum
    auto [u, m, v] = radam(g, p, s, c10::nullopt, 1, 1e-3, 0.9, 0.999, 1e-8,
                           0.0, 0.0, false, false);
    EXPECT_TRUE(close(u, -(p * 0.9 + g * 0.1) / 0.1 * 1e-3));
  }
}

TEST(FusedOptimizers, BadInputsNameTheArgument) {
  auto a = torch::randn({4});
  try {
    adam(a, a, torch::randn({5}), c10::nullopt, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0,
         0.0, false, false);
    FAIL() << "expected a shape error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("`nus` tensor 0 must have the shape"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace metafuse
