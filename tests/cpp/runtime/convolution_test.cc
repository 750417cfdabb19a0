// runtime/compute/convolution against ATen's convolutions on the same inputs: every
// stride, padding, dilation, group count and bias case the compiled conv
// nets and their derivatives produce (float64 to 1e-12, float32 to 1e-4
// relative), the weight-gradient form (batch and channels swapped, kernel
// as large as the image), the operation's fallback to ATen, and its errors.
#include "runtime/compute/convolution.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace metafuse::runtime {
namespace {

struct Case {
  std::vector<int64_t> input, weight;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
  bool bias;
};

const Case kCases[] = {
    {{3, 1, 9, 9}, {4, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},     // one input channel
    {{2, 6, 8, 7}, {5, 6, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false},
    {{2, 6, 8, 8}, {6, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 2, true},     // strided, grouped
    {{1, 8, 9, 10}, {8, 2, 3, 2}, {2, 1}, {0, 1}, {2, 1}, 4, false},   // mixed, dilated
    {{2, 4, 5, 5}, {4, 1, 3, 3}, {1, 1}, {2, 2}, {1, 1}, 4, true},     // depthwise, wide pad
    {{4, 3, 6, 6}, {2, 3, 6, 6}, {1, 1}, {1, 1}, {1, 1}, 1, false},    // kernel = image
    {{1, 2, 1, 1}, {3, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},     // 1x1
};

void ExpectClose(const at::Tensor& got, const at::Tensor& want, double rtol, double atol,
                 const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(at::allclose(got, want, rtol, atol))
      << what << ": max difference " << (got - want).abs().max().item<double>();
}

// The convolution operation (transposed: conv_transpose2d) at stride 1,
// padding `pad`, dilation 1, one group and no bias, on `input` and
// `weight`, failing the test if it hands the call to ATen.
at::Tensor RunOperationWithoutATen(bool transposed, const at::Tensor& input,
                                   const at::Tensor& weight, int64_t pad) {
  torch::jit::Operation op = MakeConvolutionOperation(transposed, [](torch::jit::Stack&) {
    ADD_FAILURE() << "handed to ATen";
  });
  const std::vector<int64_t> ones = {1, 1}, padding = {pad, pad}, zeros = {0, 0};
  torch::jit::Stack stack =
      transposed ? torch::jit::Stack{input, weight, c10::IValue(), ones, padding, zeros,
                                     int64_t{1}, ones}
                 : torch::jit::Stack{input, weight, c10::IValue(), ones, padding, ones,
                                     int64_t{1}};
  op(stack);
  EXPECT_EQ(stack.size(), 1u);
  return stack.back().toTensor();
}

TEST(GemmConvolution, Conv2dMatchesATen) {
  torch::manual_seed(0);
  for (auto dtype : {at::kDouble, at::kFloat}) {
    const double rtol = dtype == at::kDouble ? 1e-12 : 1e-4;
    for (const Case& c : kCases) {
      const auto options = at::TensorOptions().dtype(dtype);
      const at::Tensor x = at::randn(c.input, options), w = at::randn(c.weight, options);
      const c10::optional<at::Tensor> b =
          c.bias ? c10::optional<at::Tensor>(at::randn({c.weight[0]}, options)) : c10::nullopt;
      ASSERT_TRUE(GemmConvolutionApplies(x, w, b));
      ExpectClose(Conv2dByGemm(x, w, b, c.stride, c.padding, c.dilation, c.groups),
                  at::conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups), rtol,
                  rtol * 10, "conv2d " + std::string(c10::toString(dtype)) + " input " +
                                 c10::str(c.input) + " weight " + c10::str(c.weight));
    }
  }
}

TEST(GemmConvolution, ConvTranspose2dMatchesATen) {
  torch::manual_seed(1);
  struct TransposedCase {
    std::vector<int64_t> input, weight, stride, padding, output_padding, dilation;
    int64_t groups;
    bool bias;
  };
  const TransposedCase cases[] = {
      {{2, 5, 6, 6}, {5, 4, 3, 3}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},
      {{2, 6, 4, 5}, {6, 2, 3, 3}, {2, 2}, {1, 1}, {1, 0}, {1, 1}, 3, false},
      {{1, 4, 5, 5}, {4, 1, 3, 2}, {1, 2}, {0, 1}, {0, 1}, {2, 1}, 4, true},
      {{3, 1, 7, 7}, {1, 8, 3, 3}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false},
  };
  for (auto dtype : {at::kDouble, at::kFloat}) {
    const double rtol = dtype == at::kDouble ? 1e-12 : 1e-4;
    for (const auto& c : cases) {
      const auto options = at::TensorOptions().dtype(dtype);
      const at::Tensor x = at::randn(c.input, options), w = at::randn(c.weight, options);
      const c10::optional<at::Tensor> b =
          c.bias ? c10::optional<at::Tensor>(at::randn({c.weight[1] * c.groups}, options))
                 : c10::nullopt;
      ExpectClose(ConvTranspose2dByGemm(x, w, b, c.stride, c.padding, c.output_padding,
                                        c.groups, c.dilation),
                  at::conv_transpose2d(x, w, b, c.stride, c.padding, c.output_padding,
                                       c.groups, c.dilation),
                  rtol, rtol * 10, "conv_transpose2d input " + c10::str(c.input));
    }
  }
}

TEST(GemmConvolution, NonContiguousInputsAreRead) {
  const at::Tensor x = at::randn({6, 2, 7, 7}, at::kDouble).transpose(0, 1);  // [2, 6, ...]
  const at::Tensor w = at::randn({4, 6, 3, 3}, at::kDouble);
  ExpectClose(Conv2dByGemm(x, w, c10::nullopt, {1, 1}, {1, 1}, {1, 1}, 1),
              at::conv2d(x, w, {}, 1, 1), 1e-12, 1e-12, "transposed input");
}

TEST(GemmConvolution, WhatItDoesNotCoverGoesToATen) {
  const at::Tensor x = at::randn({1, 2, 5, 5}), w = at::randn({3, 2, 3, 3});
  EXPECT_FALSE(GemmConvolutionApplies(x.to(at::kHalf), w.to(at::kHalf), c10::nullopt));
  EXPECT_FALSE(GemmConvolutionApplies(x, w.to(at::kDouble), c10::nullopt));
  EXPECT_FALSE(GemmConvolutionApplies(x.reshape({2, 5, 5}), w, c10::nullopt));
  // A call that records an autograd graph keeps ATen's differentiable op.
  EXPECT_FALSE(GemmConvolutionApplies(x.clone().requires_grad_(), w, c10::nullopt));
  {
    at::NoGradGuard no_grad;
    EXPECT_TRUE(GemmConvolutionApplies(x.clone().requires_grad_(), w, c10::nullopt));
  }
  // The operation hands such calls to the ATen operation it was given.
  bool aten_called = false;
  torch::jit::Operation op = MakeConvolutionOperation(
      false, [&aten_called](torch::jit::Stack& stack) {
        aten_called = true;
        torch::jit::drop(stack, 7);
        stack.emplace_back(at::zeros({1}));
      });
  torch::jit::Stack stack = {x.to(at::kHalf), w.to(at::kHalf), c10::IValue(),
                             std::vector<int64_t>{1, 1}, std::vector<int64_t>{0, 0},
                             std::vector<int64_t>{1, 1}, int64_t{1}};
  op(stack);
  EXPECT_TRUE(aten_called);
  ASSERT_EQ(stack.size(), 1u);
  stack = {x, w, c10::IValue(), std::vector<int64_t>{1, 1}, std::vector<int64_t>{1, 1},
           std::vector<int64_t>{1, 1}, int64_t{1}};
  aten_called = false;
  op(stack);
  EXPECT_FALSE(aten_called);
  ASSERT_EQ(stack.size(), 1u);
  ExpectClose(stack[0].toTensor(), at::conv2d(x, w, {}, 1, 1), 1e-4, 1e-4, "operation");
}

// The weight gradient as the derivative rule writes it, conv2d(x^T, dy^T),
// computed through convolution_backward: ATen's conv2d of the transposes
// (float64 to 1e-12, float32 to 1e-4 relative), through the operation too;
// other layouts, strides or groups are not this form.
TEST(WeightGradientForm, MatchesConv2dOfTheTransposes) {
  for (auto dtype : {at::kDouble, at::kFloat}) {
    const double tol = dtype == at::kDouble ? 1e-12 : 1e-4;
    for (int64_t pad : {0, 1, 2}) {
      const at::Tensor x = at::randn({5, 3, 9, 8}, dtype), dy = at::randn({5, 4, 7, 8}, dtype);
      const at::Tensor xt = x.transpose(0, 1), dyt = dy.transpose(0, 1);
      ASSERT_TRUE(IsWeightGradientForm(xt, dyt, {1, 1}, {1, 1}, 1));
      const at::Tensor want = at::conv2d(xt, dyt, {}, 1, pad);
      ExpectClose(WeightGradientByConvolutionBackward(xt, dyt, {pad, pad}), want, tol, tol,
                  "weight gradient, padding " + std::to_string(pad));
      ExpectClose(RunOperationWithoutATen(false, xt, dyt, pad), want, tol, tol, "operation");
    }
  }
  const at::Tensor x = at::randn({5, 4, 9, 8}), dy = at::randn({5, 4, 7, 8});
  EXPECT_FALSE(IsWeightGradientForm(x, dy, {1, 1}, {1, 1}, 1));  // not transposed
  EXPECT_FALSE(IsWeightGradientForm(x.transpose(0, 1), dy.transpose(0, 1), {2, 2}, {1, 1}, 1));
  EXPECT_FALSE(IsWeightGradientForm(x.transpose(0, 1), dy.transpose(0, 1), {1, 1}, {2, 2}, 1));
  EXPECT_FALSE(IsWeightGradientForm(x.transpose(0, 1), dy.transpose(0, 1), {1, 1}, {1, 1}, 2));
}

// A first layer's weight gradient: x has one channel, so x^T is contiguous
// too; it is still the form (an image-sized kernel), and a forward
// convolution of one image with a small kernel is not.
TEST(WeightGradientForm, OneChannelInputIsTheFormByItsKernel) {
  const at::Tensor x = at::randn({5, 1, 12, 12}, at::kDouble), dy = at::randn({5, 4, 12, 12},
                                                                               at::kDouble);
  const at::Tensor xt = x.transpose(0, 1), dyt = dy.transpose(0, 1);
  ASSERT_TRUE(xt.is_contiguous());
  ASSERT_TRUE(IsWeightGradientForm(xt, dyt, {1, 1}, {1, 1}, 1));
  ExpectClose(WeightGradientByConvolutionBackward(xt, dyt, {1, 1}), at::conv2d(xt, dyt, {}, 1, 1),
              1e-12, 1e-12, "one-channel weight gradient");
  const at::Tensor image = at::randn({1, 4, 12, 12}), w = at::randn({1, 4, 3, 3});
  EXPECT_FALSE(IsWeightGradientForm(image, w, {1, 1}, {1, 1}, 1));
}

// The second-order term conv_transpose2d(g^T, dy^T) (an image-sized kernel)
// computed as conv_transpose2d(dy, g)^T: ATen's conv_transpose2d of the
// transposes, float64 (the GEMM path) to 1e-12 and float32 (oneDNN) to
// 1e-4, through the operation; the ordinary input gradient is not this form.
TEST(SwappedInputGradientForm, MatchesConvTranspose2dOfTheTransposes) {
  for (auto dtype : {at::kDouble, at::kFloat}) {
    const double tol = dtype == at::kDouble ? 1e-12 : 1e-4;
    for (int64_t pad : {0, 1}) {
      const at::Tensor g = at::randn({6, 4, 3, 3}, dtype);     // [Cout, Cin, 3, 3]
      const at::Tensor dy = at::randn({5, 6, 9, 8}, dtype);    // [N, Cout, H', W']
      const at::Tensor gt = g.transpose(0, 1), dyt = dy.transpose(0, 1);
      ASSERT_TRUE(IsSwappedInputGradientForm(gt, dyt, {1, 1}, {0, 0}, 1, {1, 1}));
      const at::Tensor want = at::conv_transpose2d(gt, dyt, {}, 1, pad);
      ExpectClose(SwappedInputGradient(gt, dyt, {pad, pad}), want, tol, tol,
                  "swapped input gradient, padding " + std::to_string(pad));
      ExpectClose(RunOperationWithoutATen(true, gt, dyt, pad), want, tol, tol, "operation");
    }
  }
  const at::Tensor dy = at::randn({5, 6, 9, 8}), w = at::randn({6, 3, 3, 3});
  EXPECT_FALSE(IsSwappedInputGradientForm(dy, w, {1, 1}, {0, 0}, 1, {1, 1}));
  const at::Tensor gt = at::randn({6, 4, 3, 3}).transpose(0, 1);
  const at::Tensor dyt = at::randn({5, 6, 9, 8}).transpose(0, 1);
  EXPECT_FALSE(IsSwappedInputGradientForm(gt, dyt, {2, 2}, {0, 0}, 1, {1, 1}));
  EXPECT_FALSE(IsSwappedInputGradientForm(gt, dyt, {1, 1}, {1, 1}, 1, {1, 1}));
}

// The input gradient form, conv_transpose2d(dy, w) at stride 1, through
// convolution_backward (float32 with oneDNN): ATen's conv_transpose2d to
// 1e-4 relative, through the operation too; float64 and strided calls are
// not this form.
TEST(InputGradientForm, MatchesConvTranspose2d) {
  if (!at::hasMKLDNN()) GTEST_SKIP() << "this LibTorch has no oneDNN";
  for (int64_t pad : {0, 1, 2}) {
    const at::Tensor dy = at::randn({5, 6, 9, 8}), w = at::randn({6, 3, 3, 3});
    ASSERT_TRUE(IsInputGradientForm(dy, w, {1, 1}, {0, 0}, 1, {1, 1}));
    const at::Tensor want = at::conv_transpose2d(dy, w, {}, 1, pad);
    ExpectClose(InputGradientByConvolutionBackward(dy, w, {pad, pad}), want, 1e-4, 1e-4,
                "input gradient, padding " + std::to_string(pad));
    ExpectClose(RunOperationWithoutATen(true, dy, w, pad), want, 1e-4, 1e-4, "operation");
  }
  const at::Tensor dy = at::randn({5, 6, 9, 8}), w = at::randn({6, 3, 3, 3});
  EXPECT_FALSE(IsInputGradientForm(dy.to(at::kDouble), w.to(at::kDouble), {1, 1}, {0, 0}, 1,
                                   {1, 1}));
  EXPECT_FALSE(IsInputGradientForm(dy, w, {2, 2}, {0, 0}, 1, {1, 1}));
  EXPECT_FALSE(IsInputGradientForm(dy, w, {1, 1}, {1, 1}, 1, {1, 1}));
  EXPECT_FALSE(IsInputGradientForm(dy, w, {1, 1}, {0, 0}, 2, {1, 1}));
  EXPECT_FALSE(IsInputGradientForm(dy, w, {1, 1}, {0, 0}, 1, {2, 2}));
}

TEST(GemmConvolution, MismatchedGroupsAreNamed) {
  const at::Tensor x = at::randn({1, 4, 5, 5}), w = at::randn({3, 2, 3, 3});
  try {
    Conv2dByGemm(x, w, c10::nullopt, {1, 1}, {0, 0}, {1, 1}, 2);
    FAIL() << "no error";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what_without_backtrace()).find("do not match groups=2"),
              std::string::npos)
        << error.what_without_backtrace();
  }
}

}  // namespace
}  // namespace metafuse::runtime
