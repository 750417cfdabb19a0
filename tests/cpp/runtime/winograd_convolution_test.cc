// runtime/compute/winograd_convolution against ATen's conv2d in float64 on the same
// float32 inputs: both tiles, every padding it takes, odd sizes (partial
// tiles), bias, several image blocks; the tile rule; and the refusals.
#include "runtime/compute/winograd_convolution.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <string>
#include <vector>

#include "runtime/compute/convolution.h"
#include "runtime/compute/gemm.h"

namespace metafuse::runtime {
namespace {

// The float64 references run on one thread: this LibTorch's (1.13) float64
// conv2d at two threads now and then returns a wrong result (measured: a
// difference of 64 in one call of ten on 16 x 32 x 14 x 14).
struct OneThread {
  int saved = at::get_num_threads();
  OneThread() { at::set_num_threads(1); }
  ~OneThread() { at::set_num_threads(saved); }
};

// Largest error relative to the largest output of the float64 reference.
double RelativeError(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& b,
                     std::vector<int64_t> padding, WinogradTile tile) {
  const at::Tensor got = Conv2dByWinograd(x, w, b, padding, tile);
  const c10::optional<at::Tensor> b64 =
      b.has_value() ? c10::optional<at::Tensor>(b->to(at::kDouble)) : c10::nullopt;
  at::Tensor want;
  {
    OneThread one;
    want = at::conv2d(x.to(at::kDouble), w.to(at::kDouble), b64, {1, 1}, padding, {1, 1}, 1);
  }
  EXPECT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(got.is_contiguous());
  return ((got.to(at::kDouble) - want).abs().max() / want.abs().max()).item<double>();
}

TEST(WinogradConvolution, MatchesTheDirectConvolution) {
  at::manual_seed(0);
  struct Case {
    std::vector<int64_t> input;
    int64_t out_channels;
    std::vector<int64_t> padding;
    bool bias;
  };
  const Case cases[] = {
      {{3, 16, 14, 14}, 24, {1, 1}, true},   // whole tiles for F(2x2), partial for F(4x4)
      {{16, 32, 14, 14}, 32, {1, 1}, true},  // several image blocks of 64 tiles
      {{2, 8, 7, 9}, 5, {1, 1}, false},      // odd sizes, few channels
      {{1, 4, 5, 6}, 3, {0, 0}, true},       // no padding
      {{2, 3, 6, 5}, 7, {2, 2}, false},      // full padding
      {{1, 5, 8, 8}, 4, {0, 2}, true},       // different per axis
      {{70, 6, 3, 3}, 6, {1, 1}, true},      // one tile per image, many image blocks
      {{9, 17, 11, 13}, 19, {1, 1}, false},  // channels not a multiple of the vector width
  };
  // Two threads: the image blocks run in parallel and their GEMMs go to
  // runtime/compute/small_gemm instead of the BLAS.
  for (const int threads : {1, 2}) {
  at::set_num_threads(threads);
  for (const Case& c : cases) {
    const at::Tensor x = at::randn(c.input);
    const at::Tensor w = at::randn({c.out_channels, c.input[1], 3, 3});
    const c10::optional<at::Tensor> b =
        c.bias ? c10::optional<at::Tensor>(at::randn({c.out_channels})) : c10::nullopt;
    const std::string what = c10::str(c.input, " -> ", c.out_channels, " padding ", c.padding,
                                      ", ", threads, " thread(s)");
    EXPECT_LT(RelativeError(x, w, b, c.padding, WinogradTile::kF2), 1e-6) << what << " F(2x2)";
    EXPECT_LT(RelativeError(x, w, b, c.padding, WinogradTile::kF4), 3e-5) << what << " F(4x4)";
  }
  }
  at::set_num_threads(1);
}

TEST(WinogradConvolution, ABusyBlasGivesTheSameResult) {
  // Another thread in the BLAS (held here): the products go to
  // runtime/compute/small_gemm instead, with the same result.
  at::manual_seed(4);
  const at::Tensor x = at::randn({8, 32, 14, 14}), w = at::randn({32, 32, 3, 3});
  const at::Tensor free_blas = Conv2dByWinograd(x, w, c10::nullopt, {1, 1}, WinogradTile::kF2);
  std::lock_guard<std::mutex> busy(BlasMutex());
  const at::Tensor busy_blas = Conv2dByWinograd(x, w, c10::nullopt, {1, 1}, WinogradTile::kF2);
  EXPECT_TRUE(at::allclose(free_blas, busy_blas, 1e-5, 1e-5));
  EXPECT_LT(RelativeError(x, w, c10::nullopt, {1, 1}, WinogradTile::kF2), 1e-6);
}

TEST(WinogradConvolution, TheInputGradientEqualsTheTransposedConvolution) {
  // conv_transpose2d(dy, w) at stride 1 through the flipped kernel: the
  // shapes of the Omniglot net's 14x14 layer (Winograd is chosen there).
  at::manual_seed(1);
  const at::Tensor dy = at::randn({75, 64, 14, 14}), w = at::randn({64, 64, 3, 3});
  const std::vector<int64_t> ones = {1, 1}, pad = {1, 1};
  ASSERT_NE(ChooseWinogradTile(dy, w.transpose(0, 1).flip({2, 3}), ones, pad, ones, 1),
            WinogradTile::kNone);
  const at::Tensor got = InputGradient(dy, w, pad);
  const at::Tensor want =
      at::conv_transpose2d(dy.to(at::kDouble), w.to(at::kDouble), {}, ones, pad, {0, 0}, 1, ones);
  EXPECT_LT(((got.to(at::kDouble) - want).abs().max() / want.abs().max()).item<double>(), 3e-5);
}

// convolution_backward's weight gradient in float64 on the same inputs.
at::Tensor ReferenceWeightGradient(const at::Tensor& x, const at::Tensor& dy,
                                   std::vector<int64_t> padding) {
  OneThread one;
  const at::Tensor shape = at::empty({dy.size(1), x.size(1), 3, 3}, at::kDouble);
  return std::get<1>(at::convolution_backward(dy.to(at::kDouble), x.to(at::kDouble), shape,
                                              c10::nullopt, {1, 1}, padding, {1, 1}, false,
                                              {0, 0}, 1, {false, true, false}));
}

TEST(WinogradConvolution, TheWeightGradientMatchesConvolutionBackward) {
  at::manual_seed(2);
  struct Case {
    std::vector<int64_t> input;
    int64_t out_channels;
    std::vector<int64_t> padding;
  };
  const Case cases[] = {
      {{3, 16, 14, 14}, 24, {1, 1}},  // partial F(4x4) tiles: dy is zero past its edge
      {{2, 8, 7, 9}, 5, {1, 1}},
      {{1, 4, 5, 6}, 3, {0, 0}},
      {{2, 3, 6, 5}, 7, {2, 2}},
      {{1, 5, 8, 8}, 4, {0, 2}},
      {{70, 6, 3, 3}, 6, {1, 1}},     // many image blocks summed
      {{16, 32, 14, 14}, 32, {1, 1}},
  };
  for (const int threads : {1, 2}) {
    at::set_num_threads(threads);
    for (const Case& c : cases) {
      const at::Tensor x = at::randn(c.input);
      const int64_t out_h = c.input[2] + 2 * c.padding[0] - 2;
      const int64_t out_w = c.input[3] + 2 * c.padding[1] - 2;
      const at::Tensor dy = at::randn({c.input[0], c.out_channels, out_h, out_w});
      const at::Tensor want = ReferenceWeightGradient(x, dy, c.padding);
      for (const auto tile : {WinogradTile::kF2, WinogradTile::kF4}) {
        const at::Tensor got = WeightGradientByWinograd(x, dy, c.padding, tile);
        ASSERT_EQ(got.sizes(), want.sizes());
        const double error =
            ((got.to(at::kDouble) - want).abs().max() / want.abs().max()).item<double>();
        EXPECT_LT(error, tile == WinogradTile::kF2 ? 1e-6 : 3e-5)
            << c.input << " -> " << c.out_channels << " padding " << c.padding << ", "
            << threads << " thread(s), F(" << (tile == WinogradTile::kF2 ? 2 : 4) << ")";
      }
    }
  }
  at::set_num_threads(1);
}

TEST(WinogradConvolution, TheWeightGradientFormGoesThroughWinograd) {
  // conv2d(x^T, dy^T) with the image-sized kernel (the derivative rules'
  // form) on the 14x14 layer's shapes: the transpose of the weight gradient.
  at::manual_seed(3);
  const at::Tensor x = at::randn({75, 64, 14, 14}), dy = at::randn({75, 64, 14, 14});
  ASSERT_EQ(ChooseWinogradWeightGradientTile(x, dy, {1, 1}), WinogradTile::kF2);
  const at::Tensor got = WeightGradient(x.transpose(0, 1), dy.transpose(0, 1), {1, 1});
  const at::Tensor want = ReferenceWeightGradient(x, dy, {1, 1}).transpose(0, 1);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_LT(((got.to(at::kDouble) - want).abs().max() / want.abs().max()).item<double>(), 1e-6);
}

TEST(WinogradConvolution, TheRuleTakesWideLayersWithManyOutputs) {
  const std::vector<int64_t> ones = {1, 1}, pad = {1, 1};
  const at::Tensor w = at::empty({64, 64, 3, 3});
  auto tile = [&](std::vector<int64_t> input, const at::Tensor& weight) {
    return ChooseWinogradTile(at::empty(input), weight, ones, pad, ones, 1);
  };
  // The default rule: F(2x2) (its rounding is the direct kernels') on
  // outputs of 8x8 and more.
  EXPECT_EQ(tile({75, 64, 14, 14}, w), WinogradTile::kF2);
  EXPECT_EQ(tile({5, 64, 14, 14}, w), WinogradTile::kF2);
  EXPECT_EQ(tile({75, 64, 7, 7}, w), WinogradTile::kNone);   // F(2x2) does not pay
  EXPECT_EQ(tile({2, 64, 14, 14}, w), WinogradTile::kNone);  // too few outputs
  EXPECT_EQ(tile({75, 64, 3, 3}, w), WinogradTile::kNone);   // 3x3 outputs
  EXPECT_EQ(tile({75, 1, 28, 28}, at::empty({64, 1, 3, 3})), WinogradTile::kNone);  // narrow
  EXPECT_EQ(tile({25, 16, 16, 16}, at::empty({16, 16, 3, 3})), WinogradTile::kNone);  // 16 ch
}

TEST(WinogradConvolution, RefusesWhatItCannotCompute) {
  const std::vector<int64_t> ones = {1, 1}, pad = {1, 1}, twos = {2, 2};
  const at::Tensor x = at::empty({2, 16, 8, 8}), w = at::empty({16, 16, 3, 3});
  EXPECT_TRUE(WinogradApplies(x, w, ones, pad, ones, 1));
  EXPECT_FALSE(WinogradApplies(x.to(at::kDouble), w.to(at::kDouble), ones, pad, ones, 1));
  EXPECT_FALSE(WinogradApplies(x, w, twos, pad, ones, 1));                        // stride
  EXPECT_FALSE(WinogradApplies(x, w, ones, pad, twos, 1));                        // dilation
  EXPECT_FALSE(WinogradApplies(x, at::empty({16, 8, 3, 3}), ones, pad, ones, 2));  // groups
  EXPECT_FALSE(WinogradApplies(x, at::empty({16, 16, 5, 5}), ones, pad, ones, 1));  // 5x5
  EXPECT_FALSE(WinogradApplies(x, w, ones, {3, 3}, ones, 1));                     // padding
  EXPECT_THROW(Conv2dByWinograd(x, at::empty({16, 16, 5, 5}), c10::nullopt, pad,
                                WinogradTile::kF2),
               c10::Error);
  EXPECT_THROW(Conv2dByWinograd(x, w, at::empty({3}), pad, WinogradTile::kF2), c10::Error);
  // Empty tensors (no image, no channel) stay with ATen.
  EXPECT_FALSE(WinogradApplies(at::empty({0, 16, 8, 8}), w, ones, pad, ones, 1));
  EXPECT_EQ(ChooseWinogradWeightGradientTile(at::empty({0, 16, 8, 8}),
                                             at::empty({0, 16, 8, 8}), pad),
            WinogradTile::kNone);
  EXPECT_THROW(WeightGradientByWinograd(at::empty({0, 16, 8, 8}), at::empty({0, 16, 8, 8}), pad,
                                        WinogradTile::kF2),
               c10::Error);
  // Weight gradients: the output gradient must be a 3x3 kernel's.
  EXPECT_EQ(ChooseWinogradWeightGradientTile(x, at::empty({2, 16, 7, 7}), pad),
            WinogradTile::kNone);
  EXPECT_THROW(WeightGradientByWinograd(x, at::empty({2, 16, 7, 7}), pad, WinogradTile::kF4),
               c10::Error);
}

}  // namespace
}  // namespace metafuse::runtime
