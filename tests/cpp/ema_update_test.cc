#include "kernels/ema_update.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace metafuse {
namespace {

at::Tensor Reference(const at::Tensor& m, const at::Tensor& u, double decay,
                     int64_t order) {
  return m * decay + u.pow(order) * (1.0 - decay);
}

TEST(EmaUpdate, MatchesReferenceInFloat32AndFloat64) {
  torch::manual_seed(0);
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    for (int64_t order : {1, 2}) {
      // Large enough to take the parallel path (> GRAIN_SIZE elements).
      auto m = torch::randn({70000}, dtype);
      auto u = torch::randn({70000}, dtype);
      auto out = ema_update(m, u, 0.9, order);
      auto expected = Reference(m, u, 0.9, order);
      EXPECT_TRUE(torch::allclose(out, expected, 1e-6, 1e-6))
          << "dtype " << dtype << " order " << order;
    }
  }
}

TEST(EmaUpdate, HalfIsComputedInFloat) {
  auto m = torch::randn({257}).to(torch::kHalf);
  auto u = torch::randn({257}).to(torch::kHalf);
  auto out = ema_update(m, u, 0.999, 2);
  ASSERT_EQ(out.scalar_type(), torch::kHalf);
  auto expected = Reference(m.to(torch::kFloat), u.to(torch::kFloat), 0.999, 2);
  EXPECT_TRUE(torch::allclose(out.to(torch::kFloat), expected, 1e-3, 1e-3));
}

TEST(EmaUpdate, NonContiguousInputs) {
  auto m = torch::randn({8, 6}, torch::kFloat64).t();
  auto u = torch::randn({8, 6}, torch::kFloat64).t();
  ASSERT_FALSE(m.is_contiguous());
  EXPECT_TRUE(torch::allclose(ema_update(m, u, 0.5, 1), Reference(m, u, 0.5, 1)));
}

TEST(EmaUpdate, BackwardIsClosedForm) {
  auto m = torch::randn({33}, torch::dtype(torch::kFloat64).requires_grad(true));
  auto u = torch::randn({33}, torch::dtype(torch::kFloat64).requires_grad(true));
  auto g = torch::randn({33}, torch::kFloat64);
  auto grads = torch::autograd::grad({ema_update(m, u, 0.9, 2)}, {m, u}, {g});
  EXPECT_TRUE(torch::allclose(grads[0], 0.9 * g));
  EXPECT_TRUE(torch::allclose(grads[1], 2 * 0.1 * u.detach() * g));
}

TEST(EmaUpdate, DoubleBackwardMatchesAutogradOfReference) {
  auto m = torch::randn({17}, torch::dtype(torch::kFloat64).requires_grad(true));
  auto u = torch::randn({17}, torch::dtype(torch::kFloat64).requires_grad(true));
  auto hessian_diag = [&](auto fn) {
    auto y = fn(m, u).pow(2).sum();
    auto gu = torch::autograd::grad({y}, {u}, {}, true, true)[0];
    return torch::autograd::grad({gu.sum()}, {u, m});
  };
  auto fused = hessian_diag([](auto a, auto b) { return ema_update(a, b, 0.8, 2); });
  auto ref = hessian_diag([](auto a, auto b) { return Reference(a, b, 0.8, 2); });
  EXPECT_TRUE(torch::allclose(fused[0], ref[0], 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(fused[1], ref[1], 1e-12, 1e-12));
}

TEST(EmaUpdate, BadInputsNameTheArgument) {
  auto a = torch::randn({4});
  auto expect_error = [](auto fn, const std::string& needle) {
    try {
      fn();
      FAIL() << "expected an error mentioning " << needle;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << e.what();
    }
  };
  expect_error([&] { ema_update(a, torch::randn({5}), 0.9, 1); }, "same shape");
  expect_error([&] { ema_update(a, a, 0.9, 3); }, "`order`");
  expect_error([&] { ema_update(a, a, 1.5, 1); }, "`decay`");
  expect_error([&] { ema_update(a, a.to(torch::kFloat64), 0.9, 1); }, "dtype");
  expect_error([&] { ema_update(a.to(torch::kInt64), a.to(torch::kInt64), 0.9, 1); },
               "floating-point");
}

}  // namespace
}  // namespace metafuse
