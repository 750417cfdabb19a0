// The closed-form element backwards of kernels/optim_math.h keep their type
// contract: they instantiate with a value type A that has only what the
// contract grants (+ - * / between two A, A + C, A * C, C * A; copies; no
// construction from a literal, no unary minus, no functions), the way the
// compiler instantiates AdamBackwardElement with a symbolic IR value, and give
// the numbers of the double instantiation the fused loops use.
#include <gtest/gtest.h>

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
