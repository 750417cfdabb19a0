#include "compiler/codegen/kernel_ir.h"

#include <gtest/gtest.h>

#include "compiler/codegen/kernel_math.h"
#include "tests/cpp/codegen/test_kernels.h"

namespace metafuse::codegen::kir {
namespace {

using ::metafuse::codegen::testing::AdamKernel;
using ::metafuse::codegen::testing::AllOpsKernel;

std::string ErrorOf(const absl::StatusOr<Kernel>& k) {
  EXPECT_FALSE(k.ok());
  return std::string(k.status().message());
}

Kernel Axpy(const std::string& name = "axpy", double c = 2.0) {
  KernelBuilder b(name);
  int x = b.Input("x", DType::kF32);
  int y = b.Input("y", DType::kF32, Access::kBroadcast);
  int a = b.Scalar("a", DType::kF32);
  // One call per statement: argument evaluation order is unspecified in C++.
  int ax = b.Mul(a, x);
  int cst = b.Const(c, DType::kF32);
  int prod = b.Mul(ax, cst);
  b.Output("out", b.Add(prod, y));
  return *b.Build();
}

TEST(KernelIr, BuilderMixingDtypesNamesTheOpAndDtypes) {
  KernelBuilder b("k");
  int x = b.Input("x", DType::kF32);
  int y = b.Input("y", DType::kF64);
  b.Output("out", b.Add(x, y));
  std::string e = ErrorOf(b.Build());
  EXPECT_HAS(e, "add(%0, %1) mixes dtypes f32 and f64");
  EXPECT_HAS(e, "insert a cast");
}

TEST(KernelIr, BuilderUnknownNodeIsAnError) {
  KernelBuilder b("k");
  int x = b.Input("x", DType::kF32);
  b.Output("out", b.Exp(x + 40));
  EXPECT_HAS(ErrorOf(b.Build()), "exp reads unknown node %40");
}

TEST(KernelIr, ValidateRejectsCycles) {
  Kernel k = Axpy();
  // %3 = mul %2, %0 -> make %2 (mul a, x) read %4 (the add): a cycle.
  k.nodes[3].args[1] = 5;
  absl::Status s = Validate(k);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "is on a cycle");
  EXPECT_HAS(s.message(), "%3 -> %5");
}

TEST(KernelIr, ValidateRejectsUnknownInputsAndScalars) {
  Kernel k = Axpy();
  k.nodes[0].index = 7;
  EXPECT_HAS(Validate(k).message(), "node %0 (input) reads unknown input #7; the kernel has 2");
  k = Axpy();
  k.nodes[2].index = 3;
  EXPECT_HAS(Validate(k).message(), "node %2 (scalar) reads unknown scalar #3");
  k = Axpy();
  k.outputs[0].node = 99;
  EXPECT_HAS(Validate(k).message(), "output 'out' reads unknown node %99");
}

TEST(KernelIr, ValidateRejectsTypeErrors) {
  Kernel k = Axpy();
  k.nodes[0].dtype = DType::kF64;  // input x is f32
  EXPECT_HAS(Validate(k).message(), "has dtype f64 but input 'x' is f32");
  k = Axpy();
  k.inputs[0].dtype = DType::kF64;
  k.nodes[0].dtype = DType::kF64;
  EXPECT_HAS(Validate(k).message(), "node %3 (mul): argument 1 is %0 of dtype f64; expected f32");
  KernelBuilder b("sel");
  int x = b.Input("x", DType::kF32);
  int d = b.Input("d", DType::kF64);
  b.Output("out", b.Select(Cmp::kGt, x, d, x, x));
  EXPECT_HAS(ErrorOf(b.Build()), "(select): argument 1 is %1 of dtype f64; expected f32");
}

TEST(KernelIr, ValidateRejectsBadShapeOfTheKernel) {
  Kernel k = Axpy();
  k.nodes[5].args.push_back(0);
  EXPECT_HAS(Validate(k).message(), "node %5 (mul) has 3 arguments; expected 2");
  k = Axpy();
  k.outputs.clear();
  EXPECT_HAS(Validate(k).message(), "has no outputs");
  k = Axpy();
  k.outputs[0].name = "x";
  EXPECT_HAS(Validate(k).message(), "output name 'x' is used twice");
  k = Axpy();
  k.name = "bad name";
  EXPECT_HAS(Validate(k).message(), "kernel name 'bad name' must be a C identifier");
  k = Axpy();
  k.nodes[4].value = 0.1;  // the f32 constant, not rounded
  EXPECT_HAS(Validate(k).message(), "not exactly a float32");
  uint64_t payload = 0x7FF0000000000001ull;  // a NaN float32 cannot hold
  std::memcpy(&k.nodes[4].value, &payload, 8);
  EXPECT_HAS(Validate(k).message(), "not exactly a float32");
  KernelBuilder b("k");
  b.Output("out", b.Input("row", DType::kF32, Access::kInner, 0));
  EXPECT_HAS(ErrorOf(b.Build()),
             "input 'row' reads [i % inner] with inner = 0, mid = 1; expected both > 0");
  KernelBuilder m("k");
  m.Output("out", m.Input("bias", DType::kF32, Access::kMiddle, 4, 0));
  EXPECT_HAS(ErrorOf(m.Build()), "with inner = 4, mid = 0; expected both > 0");
}

TEST(KernelIr, PrintIsStable) {
  EXPECT_EQ(Print(Axpy()),
            "kernel axpy {\n"
            "  in 0 x: f32 [i]\n"
            "  in 1 y: f32 [0]\n"
            "  scalar 0 a: f32\n"
            "  %0 = input #0 : f32\n"
            "  %1 = input #1 : f32\n"
            "  %2 = scalar #0 : f32\n"
            "  %3 = mul %2, %0 : f32\n"
            "  %4 = const 2 [0x4000000000000000] : f32\n"
            "  %5 = mul %3, %4 : f32\n"
            "  %6 = add %5, %1 : f32\n"
            "  out 0 out = %6\n"
            "}\n");
  EXPECT_EQ(Print(AllOpsKernel(DType::kF64)), Print(AllOpsKernel(DType::kF64)));
}

TEST(KernelIr, StructuralHashIsStableAndIgnoresNames) {
  // A golden value: the hash must not change across runs, builds or hosts
  // (it names cache entries).
  EXPECT_EQ(StructuralHash(Axpy()), 0xd467d00933019eb4ull) << std::hex << StructuralHash(Axpy());
  EXPECT_EQ(StructuralHash(Axpy("other_name")), StructuralHash(Axpy()));
  EXPECT_NE(StructuralHash(Axpy("axpy", 3.0)), StructuralHash(Axpy()));
  EXPECT_NE(StructuralHash(AdamKernel(DType::kF32)), StructuralHash(AdamKernel(DType::kF64)));
  Kernel k = Axpy();
  k.inputs[1].access = Access::kElement;
  EXPECT_NE(StructuralHash(k), StructuralHash(Axpy()));
}

TEST(KernelIr, LiveOrderSkipsDeadNodes) {
  KernelBuilder b("k");
  int x = b.Input("x", DType::kF32);
  b.Exp(x);  // dead
  b.Output("out", b.Neg(x));
  auto k = b.Build();
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(LiveTopologicalOrder(*k), (std::vector<int>{0, 2}));
}

TEST(KernelIr, InterpreterComputesAxpyWithBroadcastAndInPlace) {
  Kernel k = Axpy();
  std::vector<float> x = {1, 2, 3, 4, 5}, y = {10};
  ASSERT_TRUE(Interpret(k, 5, {x.data(), y.data()}, {x.data()}, {0.5}).ok());
  EXPECT_EQ(x, (std::vector<float>{11, 12, 13, 14, 15}));
  absl::Status s = Interpret(k, 5, {x.data()}, {x.data()}, {0.5});
  EXPECT_HAS(s.message(), "takes 2 inputs, 1 outputs, 1 scalars; got 1, 1, 1");
}

TEST(KernelIr, InterpreterAccessPatterns) {
  KernelBuilder b("k");
  int row = b.Input("row", DType::kF64, Access::kInner, 3);
  int col = b.Input("col", DType::kF64, Access::kOuter, 3);
  b.Output("out", b.Add(row, b.Mul(col, b.Const(10, DType::kF64))));
  auto k = b.Build();
  ASSERT_TRUE(k.ok());
  std::vector<double> r = {1, 2, 3}, c = {0, 1}, out(6);
  ASSERT_TRUE(Interpret(*k, 6, {r.data(), c.data()}, {out.data()}, {}).ok());
  EXPECT_EQ(out, (std::vector<double>{1, 2, 3, 11, 12, 13}));
}

TEST(KernelIr, InterpreterMiddleAndPeriodicAccess) {
  KernelBuilder b("k");
  // Loop [2, 3, 2]: bias [2, 1, 2] (broadcast over the middle dim),
  // channel [1, 3, 1] (only the middle dim).
  int bias = b.Input("bias", DType::kF64, Access::kMiddle, 2, 3);
  int channel = b.Input("channel", DType::kF64, Access::kPeriodic, 2, 3);
  b.Output("out", b.Add(bias, b.Mul(channel, b.Const(100, DType::kF64))));
  auto k = b.Build();
  ASSERT_TRUE(k.ok());
  std::vector<double> bs = {1, 2, 3, 4}, ch = {0, 1, 2}, out(12);
  ASSERT_TRUE(Interpret(*k, 12, {bs.data(), ch.data()}, {out.data()}, {}).ok());
  EXPECT_EQ(out, (std::vector<double>{1, 2, 101, 102, 201, 202, 3, 4, 103, 104, 203, 204}));
  EXPECT_EQ(kir::RequiredInputElements(k->inputs[0], 12), 4);
  EXPECT_EQ(kir::RequiredInputElements(k->inputs[1], 12), 3);
  EXPECT_EQ(kir::RequiredInputElements(k->inputs[0], 3), 2);   // [0, 1] and 0
  EXPECT_EQ(kir::RequiredInputElements(k->inputs[1], 3), 2);
}

TEST(KernelIr, InterpreterOpSemantics) {
  KernelBuilder b("k");
  int x = b.Input("x", DType::kF32);
  int y = b.Input("y", DType::kF32);
  b.Output("max", b.Max(x, y));
  b.Output("relu", b.Relu(x));
  b.Output("pow", b.Pow(x, 2));
  auto k = b.Build();
  ASSERT_TRUE(k.ok());
  const float nan = std::nanf("");
  std::vector<float> xs = {nan, 1, -2}, ys = {1, nan, 3}, mx(3), rl(3), pw(3);
  ASSERT_TRUE(Interpret(*k, 3, {xs.data(), ys.data()}, {mx.data(), rl.data(), pw.data()}, {}).ok());
  EXPECT_TRUE(std::isnan(mx[0]));  // NaN propagates from either side
  EXPECT_TRUE(std::isnan(mx[1]));
  EXPECT_EQ(mx[2], 3);
  EXPECT_TRUE(std::isnan(rl[0]));
  EXPECT_EQ(rl[1], 1);
  EXPECT_EQ(rl[2], 0);
  EXPECT_EQ(pw[2], 4);
}

// metafuse's exp against libm's (correctly rounded in practice): within 2 ulp
// for normal results, 3 for subnormal ones (two-step scaling rounds twice),
// exact at the edges.
template <typename T>
void CheckExp(uint32_t seed) {
  const double kMin = mf_kernel_math::ExpConstants<T>::kMin;
  const double kMax = mf_kernel_math::ExpConstants<T>::kMax;
  const DType t = sizeof(T) == 4 ? DType::kF32 : DType::kF64;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> wide(kMin - 2, kMax + 2), narrow(-2, 2);
  int64_t worst_normal = 0, worst_subnormal = 0;
  for (int j = 0; j < 400000; ++j) {
    const T x = static_cast<T>(j % 2 ? wide(rng) : narrow(rng));
    const T got = mf_kernel_math::Exp(x), want = std::exp(x);
    const int64_t d = testing::UlpDistance(got, want, t);
    if (std::fabs(want) >= std::numeric_limits<T>::min()) {
      worst_normal = std::max(worst_normal, d);
      ASSERT_LE(d, 2) << "exp(" << x << ") = " << got << ", libm " << want;
    } else {
      worst_subnormal = std::max(worst_subnormal, d);
      ASSERT_LE(d, 3) << "exp(" << x << ") = " << got << ", libm " << want;
    }
  }
  const T inf = std::numeric_limits<T>::infinity();
  EXPECT_EQ(mf_kernel_math::Exp(T(0)), T(1));
  EXPECT_EQ(mf_kernel_math::Exp(inf), inf);
  EXPECT_EQ(mf_kernel_math::Exp(-inf), T(0));
  EXPECT_EQ(mf_kernel_math::Exp(static_cast<T>(kMax) * 2), inf);
  EXPECT_EQ(mf_kernel_math::Exp(static_cast<T>(kMin) * 2), T(0));
  EXPECT_TRUE(std::isnan(mf_kernel_math::Exp(std::numeric_limits<T>::quiet_NaN())));
  std::cout << (t == DType::kF32 ? "f32" : "f64") << " exp vs libm: " << worst_normal
            << " ulp (normal), " << worst_subnormal << " ulp (subnormal)\n";
}

TEST(KernelMath, ExpIsWithinTwoUlpOfLibm) {
  CheckExp<float>(1);
  CheckExp<double>(2);
}

// metafuse's tanh against libm's: double within 4 ulp everywhere (tiny,
// around the 0.55 switch between series and exp form, saturated); float
// (computed in double) within 1 of libm's double tanh rounded to float
// (glibc's tanhf itself is 2 ulp off at places); exact at the edges.
template <typename T>
void CheckTanh(uint32_t seed) {
  const DType t = sizeof(T) == 4 ? DType::kF32 : DType::kF64;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> wide(-25, 25), narrow(-1, 1), edge(0.5, 0.6),
      exponent(-30, 0);
  int64_t worst = 0;
  for (int j = 0; j < 400000; ++j) {
    T x;
    switch (j % 4) {
      case 0: x = static_cast<T>(wide(rng)); break;
      case 1: x = static_cast<T>(narrow(rng)); break;
      case 2: x = static_cast<T>(j % 8 < 4 ? edge(rng) : -edge(rng)); break;
      default: x = static_cast<T>((j % 8 < 4 ? 1 : -1) * std::pow(2.0, exponent(rng)));
    }
    const T got = mf_kernel_math::Tanh(x);
    const T want = static_cast<T>(std::tanh(static_cast<double>(x)));
    const int64_t d = testing::UlpDistance(got, want, t);
    worst = std::max(worst, d);
    ASSERT_LE(d, sizeof(T) == 4 ? 1 : 4) << "tanh(" << x << ") = " << got << ", libm " << want;
  }
  const T inf = std::numeric_limits<T>::infinity();
  EXPECT_EQ(mf_kernel_math::Tanh(T(0)), T(0));
  EXPECT_TRUE(std::signbit(mf_kernel_math::Tanh(-T(0))));
  EXPECT_EQ(mf_kernel_math::Tanh(inf), T(1));
  EXPECT_EQ(mf_kernel_math::Tanh(-inf), T(-1));
  EXPECT_EQ(mf_kernel_math::Tanh(T(1000)), T(1));
  EXPECT_TRUE(std::isnan(mf_kernel_math::Tanh(std::numeric_limits<T>::quiet_NaN())));
  std::cout << (t == DType::kF32 ? "f32" : "f64") << " tanh vs libm: " << worst << " ulp\n";
}

TEST(KernelMath, TanhIsWithinOneUlpOfLibmInFloatAndFourInDouble) {
  CheckTanh<float>(3);
  CheckTanh<double>(4);
}

}  // namespace
}  // namespace metafuse::codegen::kir
