// runtime/compute/direct_convolution against ATen on the same inputs: 1 to 3 input
// channels, padding 0 to 2, widths that leave a partial vector (and ones
// narrower than a vector), with and without bias, float64 to 1e-12 and
// float32 to 1e-5 relative; the weight gradient against
// convolution_backward; what it refuses; the convolution operation taking
// it for a first layer and its weight gradient.
#include "runtime/compute/direct_convolution.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "runtime/compute/convolution.h"

namespace metafuse::runtime {
namespace {

void ExpectClose(const at::Tensor& got, const at::Tensor& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = std::max(1.0, want.abs().max().item<double>());
  EXPECT_LE((got - want).abs().max().item<double>(), tol * scale) << what;
}

struct Case {
  int64_t n, channels, h, w, k, pad;
};

const Case kCases[] = {
    {3, 1, 9, 9, 4, 1},     {2, 1, 28, 28, 5, 1}, {2, 2, 7, 13, 3, 0}, {1, 3, 16, 16, 16, 1},
    {2, 3, 5, 4, 2, 2},     {1, 1, 3, 3, 1, 0},   {4, 2, 11, 17, 7, 2}, {5, 1, 1, 1, 3, 1},
};

std::string Describe(const Case& c, at::ScalarType type) {
  return "n=" + std::to_string(c.n) + " c=" + std::to_string(c.channels) + " " +
         std::to_string(c.h) + "x" + std::to_string(c.w) + " k=" + std::to_string(c.k) +
         " pad=" + std::to_string(c.pad) + (type == at::kDouble ? " double" : " float");
}

TEST(DirectConvolution, Conv2dMatchesATen) {
  torch::manual_seed(0);
  for (const auto type : {at::kDouble, at::kFloat}) {
    const double tol = type == at::kDouble ? 1e-12 : 1e-5;
    for (const Case& c : kCases) {
      const at::Tensor x = at::randn({c.n, c.channels, c.h, c.w}, type);
      const at::Tensor w = at::randn({c.k, c.channels, 3, 3}, type);
      const at::Tensor b = at::randn({c.k}, type);
      ASSERT_TRUE(DirectConvolutionApplies(x, w, {1, 1}, {c.pad, c.pad}, {1, 1}, 1))
          << Describe(c, type);
      ExpectClose(Conv2dDirect(x, w, b, {c.pad, c.pad}), at::conv2d(x, w, b, 1, c.pad), tol,
                  Describe(c, type) + " with bias");
      const at::Tensor got = Conv2dDirect(x, w, c10::nullopt, {c.pad});
      EXPECT_TRUE(got.is_contiguous());
      ExpectClose(got, at::conv2d(x, w, {}, 1, c.pad), tol, Describe(c, type));
    }
  }
}

TEST(DirectConvolution, MixedPaddingAndNonContiguousInput) {
  torch::manual_seed(1);
  const at::Tensor x = at::randn({6, 2, 10, 3}, at::kDouble).permute({0, 1, 3, 2});
  ASSERT_FALSE(x.is_contiguous());
  const at::Tensor w = at::randn({4, 2, 3, 3}, at::kDouble);
  ExpectClose(Conv2dDirect(x, w, c10::nullopt, {0, 2}), at::conv2d(x, w, {}, 1, at::IntArrayRef({0, 2})), 1e-12,
              "padding (0, 2), permuted input");
}

TEST(DirectConvolution, WeightGradientMatchesConvolutionBackward) {
  torch::manual_seed(2);
  for (const auto type : {at::kDouble, at::kFloat}) {
    const double tol = type == at::kDouble ? 1e-12 : 1e-5;
    for (const Case& c : kCases) {
      const at::Tensor x = at::randn({c.n, c.channels, c.h, c.w}, type);
      const at::Tensor dy =
          at::randn({c.n, c.k, c.h + 2 * c.pad - 2, c.w + 2 * c.pad - 2}, type);
      ASSERT_TRUE(DirectWeightGradientApplies(x, dy, {c.pad, c.pad})) << Describe(c, type);
      const at::Tensor shape = at::empty({c.k, c.channels, 3, 3}, x.options());
      const at::Tensor want = std::get<1>(at::convolution_backward(
          dy, x, shape, c10::nullopt, {1, 1}, {c.pad, c.pad}, {1, 1}, false, {0, 0}, 1,
          {false, true, false}));
      ExpectClose(WeightGradientDirect(x, dy, {c.pad, c.pad}), want, tol, Describe(c, type));
    }
  }
}

TEST(DirectConvolution, RefusesWhatItDoesNotCompute) {
  const at::Tensor x = at::randn({2, 1, 8, 8}), w = at::randn({4, 1, 3, 3});
  EXPECT_FALSE(DirectConvolutionApplies(at::randn({2, 4, 8, 8}), at::randn({4, 4, 3, 3}),
                                        {1, 1}, {1, 1}, {1, 1}, 1));  // 4 channels
  EXPECT_FALSE(DirectConvolutionApplies(x, at::randn({4, 1, 5, 5}), {1, 1}, {1, 1}, {1, 1}, 1));
  EXPECT_FALSE(DirectConvolutionApplies(x, w, {2, 2}, {1, 1}, {1, 1}, 1));  // strided
  EXPECT_FALSE(DirectConvolutionApplies(x, w, {1, 1}, {1, 1}, {2, 2}, 1));  // dilated
  EXPECT_FALSE(DirectConvolutionApplies(x, w, {1, 1}, {3, 3}, {1, 1}, 1));  // wide padding
  EXPECT_FALSE(DirectConvolutionApplies(x.to(at::kHalf), w.to(at::kHalf), {1, 1}, {1, 1},
                                        {1, 1}, 1));
  EXPECT_FALSE(DirectConvolutionApplies(x, w.to(at::kDouble), {1, 1}, {1, 1}, {1, 1}, 1));
  EXPECT_FALSE(DirectConvolutionApplies(at::randn({2, 1, 1, 1}), w, {1, 1}, {0, 0}, {1, 1}, 1));
  EXPECT_FALSE(DirectWeightGradientApplies(x, at::randn({2, 4, 7, 7}), {1, 1}));  // not 3x3
  EXPECT_FALSE(DirectWeightGradientApplies(x, at::randn({3, 4, 8, 8}), {1, 1}));  // images
  try {
    Conv2dDirect(x, at::randn({4, 1, 5, 5}), c10::nullopt, {1, 1});
    FAIL() << "a 5x5 weight was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight [4, 1, 5, 5]"), std::string::npos) << e.what();
  }
  try {
    Conv2dDirect(x, w, at::randn({5}), {1, 1});
    FAIL() << "a bias of the wrong size was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bias must be [4]"), std::string::npos) << e.what();
  }
}

// Through the operation programs run: a first layer (one channel, the
// GEMM convolution's case before) and its weight gradient in the derivative
// rule's form conv2d(x^T, dy^T), both against ATen.
TEST(DirectConvolution, TheConvolutionOperationTakesIt) {
  torch::manual_seed(3);
  torch::jit::Operation op = MakeConvolutionOperation(false, [](torch::jit::Stack&) {
    ADD_FAILURE() << "handed to ATen";
  });
  const at::Tensor x = at::randn({5, 1, 28, 28}, at::kDouble);
  const at::Tensor w = at::randn({8, 1, 3, 3}, at::kDouble), b = at::randn({8}, at::kDouble);
  const std::vector<int64_t> ones = {1, 1};
  torch::jit::Stack stack{x, w, b, ones, ones, ones, int64_t{1}};
  op(stack);
  ExpectClose(stack.back().toTensor(), at::conv2d(x, w, b, 1, 1), 1e-12, "first layer");
  const at::Tensor dy = at::randn({5, 8, 28, 28}, at::kDouble);
  stack = {x.transpose(0, 1), dy.transpose(0, 1), c10::IValue(), ones, ones, ones, int64_t{1}};
  op(stack);
  ExpectClose(stack.back().toTensor(), at::conv2d(x.transpose(0, 1), dy.transpose(0, 1), {}, 1, 1),
              1e-12, "first layer's weight gradient");
}

}  // namespace
}  // namespace metafuse::runtime
