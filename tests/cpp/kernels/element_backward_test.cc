// The closed-form element backwards of kernels/optim_math.h keep their type
// contract: they instantiate with a value type A that has only what the
// contract grants (+ - * / between two A, A + C, A * C, C * A; copies; no
// construction from a literal, no unary minus, no functions), the way the
// compiler instantiates AdamBackwardElement with a symbolic IR value, and give
// the numbers of the double instantiation the fused loops use.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/optim_math.h"

namespace metafuse::kernels {
namespace {

// A double with nothing but the contract's operations.
class Val {
 public:
  static Val Of(double x) { return Val(x); }
  double value() const { return v_; }

  friend Val operator+(Val a, Val b) { return Val(a.v_ + b.v_); }
  friend Val operator-(Val a, Val b) { return Val(a.v_ - b.v_); }
  friend Val operator*(Val a, Val b) { return Val(a.v_ * b.v_); }
  friend Val operator/(Val a, Val b) { return Val(a.v_ / b.v_); }
  friend Val operator+(Val a, double c) { return Val(a.v_ + c); }
  friend Val operator*(Val a, double c) { return Val(a.v_ * c); }
  friend Val operator*(double c, Val a) { return Val(c * a.v_); }

 private:
  explicit Val(double x) : v_(x) {}
  double v_;
};

Val V(double x) { return Val::Of(x); }

}  // namespace

// The one function the contract asks of a value type besides arithmetic.
template <>
struct RootInverse<Val> {
  static Val Of(Val r) { return Val::Of(RootInverse<double>::Of(r.value())); }
};

namespace {

TEST(ElementBackwardContract, Adam) {
  for (bool decoupled : {false, true}) {
    const auto c = MakeAdamCoeffs<double>(3, 0.1, 0.9, 0.999, 1e-3, 1e-6, 0.1,
                                          decoupled, /*maximize=*/true);
    double d[4];
    AdamBackwardElement<double>(c, 0.3, -0.7, 0.2, 0.05, 1.1, -0.4, 0.6, &d[0],
                                &d[1], &d[2], &d[3]);
    Val v[4] = {V(0), V(0), V(0), V(0)};
    AdamBackwardElement<Val, double>(c, V(0.3), V(-0.7), V(0.2), V(0.05),
                                     V(1.1), V(-0.4), V(0.6), &v[0], &v[1],
                                     &v[2], &v[3]);
    for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(v[i].value(), d[i]) << i;
  }
}

// At r = 0 (eps_root = 0, nu' = 0: every gradient so far exactly 0) the
// closed forms return the exact first-order values, not 0 * inf = NaN:
// Adam's first step is u(g) = -lr g / (|g| + eps), u'(0) = -lr / eps.
TEST(ElementBackwardAtZeroRoot, AdamFirstStepIsExact) {
  const double lr = 0.1, eps = 1e-8;
  const auto c = MakeAdamCoeffs<double>(1, lr, 0.9, 0.999, eps, 0.0, 0.0,
                                        false, false);
  double u, mu, nu, r;
  AdamElement<double>(c, 0.0, 0.0, 0.0, 0.0, &u, &mu, &nu, &r);
  ASSERT_EQ(r, 0.0);
  double d[4];
  AdamBackwardElement<double>(c, 0.0, 0.0, mu, r, 1.0, 0.0, 0.0, &d[0], &d[1],
                              &d[2], &d[3]);
  EXPECT_DOUBLE_EQ(d[0], -lr / eps);
  EXPECT_EQ(d[3], 0.0);  // through nu: the midpoint of the one-sided limits
}

TEST(ElementBackwardAtZeroRoot, RmsPropAndAdagradAreExact) {
  const double lr = 0.01, eps = 1e-8;
  const auto rc = MakeRmsPropCoeffs<double>(lr, 0.99, eps, 0.0, 0.0, 0.0,
                                            /*centered=*/true, false);
  double d[5];
  RmsPropBackwardElement<double>(rc, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0,
                                 0.0, &d[0], &d[1], &d[2], &d[3], &d[4]);
  EXPECT_DOUBLE_EQ(d[0], -lr / eps);  // q = g / (r + eps), r = 0
  for (double x : d) EXPECT_TRUE(std::isfinite(x));
  const auto ac = MakeAdagradCoeffs<double>(1, lr, 0.0, 0.0, eps, 0.0, false);
  double a[3];
  AdagradBackwardElement<double>(ac, 0.0, 0.0, 0.0, 1.0, 0.0, &a[0], &a[1],
                                 &a[2]);
  EXPECT_DOUBLE_EQ(a[0], -lr / eps);
  EXPECT_EQ(a[2], 0.0);
}

TEST(ElementBackwardContract, Sgd) {
  const auto c = MakeSgdCoeffs<double>(2, 0.1, 0.9, 0.0, true, 0.1, false);
  double d[3];
  SgdBackwardElement<double>(c, 1.1, -0.4, &d[0], &d[1], &d[2]);
  Val v[3] = {V(0), V(0), V(0)};
  SgdBackwardElement<Val, double>(c, V(1.1), V(-0.4), &v[0], &v[1], &v[2]);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(v[i].value(), d[i]) << i;
}

TEST(ElementBackwardContract, RmsProp) {
  const auto c =
      MakeRmsPropCoeffs<double>(0.01, 0.99, 1e-8, 1e-6, 0.1, 0.9, true, false);
  double d[5];
  RmsPropBackwardElement<double>(c, 0.3, -0.7, 0.2, 0.5, 1.1, -0.4, 0.6, 0.2,
                                 0.3, &d[0], &d[1], &d[2], &d[3], &d[4]);
  Val v[5] = {V(0), V(0), V(0), V(0), V(0)};
  RmsPropBackwardElement<Val, double>(c, V(0.3), V(-0.7), V(0.2), V(0.5),
                                      V(1.1), V(-0.4), V(0.6), V(0.2), V(0.3),
                                      &v[0], &v[1], &v[2], &v[3], &v[4]);
  for (int i = 0; i < 5; ++i) EXPECT_DOUBLE_EQ(v[i].value(), d[i]) << i;
}

TEST(ElementBackwardContract, Adagrad) {
  const auto c =
      MakeAdagradCoeffs<double>(4, 0.01, 0.1, 0.1, 1e-10, 1e-6, true);
  double d[3];
  AdagradBackwardElement<double>(c, 0.3, -0.7, 0.5, 1.1, -0.4, &d[0], &d[1],
                                 &d[2]);
  Val v[3] = {V(0), V(0), V(0)};
  AdagradBackwardElement<Val, double>(c, V(0.3), V(-0.7), V(0.5), V(1.1),
                                      V(-0.4), &v[0], &v[1], &v[2]);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(v[i].value(), d[i]) << i;
}

TEST(ElementBackwardContract, Adadelta) {
  const auto c = MakeAdadeltaCoeffs<double>(1.0, 0.9, 1e-6, 0.1, false);
  double d[4];
  AdadeltaBackwardElement<double>(c, 0.3, -0.7, 0.5, 0.2, 1.1, -0.4, 0.6, 0.2,
                                  0.3, &d[0], &d[1], &d[2], &d[3]);
  Val v[4] = {V(0), V(0), V(0), V(0)};
  AdadeltaBackwardElement<Val, double>(c, V(0.3), V(-0.7), V(0.5), V(0.2),
                                       V(1.1), V(-0.4), V(0.6), V(0.2), V(0.3),
                                       &v[0], &v[1], &v[2], &v[3]);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(v[i].value(), d[i]) << i;
}

}  // namespace
}  // namespace metafuse::kernels
