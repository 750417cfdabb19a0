// runtime/compute/max_pool against ATen's max_pool2d_with_indices: values and
// indices equal (the same element wins, ties and NaN as ATen), float32 and
// float64, 2x2 and other windows, odd sizes (the floor drops the last
// row/column), 3-D inputs; the cases it leaves to ATen; the operation.
#include "runtime/compute/max_pool.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace metafuse::runtime {
namespace {

void ExpectSameAsATen(const at::Tensor& x, std::vector<int64_t> kernel) {
  ASSERT_TRUE(PlaneMaxPoolApplies(x, kernel, kernel, {0, 0}, {1, 1}, false)) << x.sizes();
  auto [values, indices] = MaxPool2dByPlanes(x, kernel);
  auto [want_v, want_i] = at::max_pool2d_with_indices(x, kernel, kernel, {0, 0}, {1, 1}, false);
  ASSERT_EQ(values.sizes(), want_v.sizes());
  EXPECT_TRUE(at::equal(indices, want_i)) << x.sizes() << " kernel " << kernel[0];
  // NaN == NaN for this comparison.
  EXPECT_TRUE(at::equal(at::isnan(values), at::isnan(want_v)));
  EXPECT_TRUE(at::equal(at::nan_to_num(values, 0.0), at::nan_to_num(want_v, 0.0)));
}

TEST(PlaneMaxPool, MatchesATenValuesAndIndices) {
  torch::manual_seed(0);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    ExpectSameAsATen(torch::randn({3, 4, 28, 28}, dtype), {2, 2});
    ExpectSameAsATen(torch::randn({2, 3, 7, 9}, dtype), {2, 2});  // odd: floor
    ExpectSameAsATen(torch::randn({2, 3, 9, 8}, dtype), {3, 2});
    ExpectSameAsATen(torch::randn({5, 6, 6}, dtype), {3, 3});     // 3-D
    ExpectSameAsATen(torch::randn({1, 1, 3, 3}, dtype), {3, 3});  // one window
  }
}

TEST(PlaneMaxPool, TiesAndNaNPickWhatATenPicks) {
  // Ties: all equal, so the first of each window; -inf everywhere; NaN in
  // some windows (once and twice), with larger numbers around them.
  at::Tensor x = torch::zeros({1, 2, 4, 6});
  x[0][1].fill_(-INFINITY);
  x[0][0][0][1] = NAN;
  x[0][0][1][0] = 5.0;
  x[0][0][2][2] = NAN;
  x[0][0][3][3] = NAN;
  x[0][0][2][3] = 7.0;
  ExpectSameAsATen(x, {2, 2});
}

// 2x2 windows over every row width from 2 to 70 (output rows of 1 to 35:
// within one 16-output step, across steps, odd widths whose last column
// drops), on data with many ties (small integers), NaNs and -inf.
TEST(PlaneMaxPool, EveryRowWidthMatchesATen) {
  torch::manual_seed(1);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    for (int64_t width = 2; width <= 70; ++width) {
      for (int64_t height : {2, 5}) {
        at::Tensor x = torch::randint(0, 3, {2, 3, height, width}).to(dtype);
        x.view(-1).index_put_({torch::randint(0, x.numel(), {x.numel() / 9})}, NAN);
        x.view(-1).index_put_({torch::randint(0, x.numel(), {x.numel() / 9})}, -INFINITY);
        ExpectSameAsATen(x, {2, 2});
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(PlaneMaxPool, LeavesOtherCallsToATen) {
  at::Tensor x = torch::randn({2, 3, 8, 8});
  EXPECT_FALSE(PlaneMaxPoolApplies(x, {2, 2}, {1, 1}, {0, 0}, {1, 1}, false));  // overlap
  EXPECT_FALSE(PlaneMaxPoolApplies(x, {3, 3}, {3, 3}, {1, 1}, {1, 1}, false));  // padding
  EXPECT_FALSE(PlaneMaxPoolApplies(x, {2, 2}, {2, 2}, {0, 0}, {2, 2}, false));  // dilation
  EXPECT_FALSE(PlaneMaxPoolApplies(x, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true));   // ceil
  EXPECT_FALSE(PlaneMaxPoolApplies(x.transpose(2, 3), {2, 2}, {2, 2}, {0, 0}, {1, 1}, false));
  EXPECT_FALSE(PlaneMaxPoolApplies(x.to(torch::kInt), {2, 2}, {2, 2}, {0, 0}, {1, 1}, false));
  EXPECT_TRUE(PlaneMaxPoolApplies(x, {2}, {}, {0}, {1}, false));  // one int, default stride
}

TEST(PlaneMaxPool, OperationTakesATensFallbackOtherwise) {
  int fallbacks = 0;
  torch::jit::Operation aten = [&fallbacks](torch::jit::Stack& stack) {
    ++fallbacks;
    auto args = torch::jit::last(stack, 6);
    auto [v, i] = at::max_pool2d_with_indices(args[0].toTensor(), args[1].toIntVector(),
                                              args[2].toIntVector(), args[3].toIntVector(),
                                              args[4].toIntVector(), args[5].toBool());
    torch::jit::drop(stack, 6);
    stack.emplace_back(v);
    stack.emplace_back(i);
  };
  auto op = MakeMaxPoolOperation(aten);
  at::Tensor x = torch::randn({2, 3, 8, 8});
  for (bool overlap : {false, true}) {
    std::vector<int64_t> stride = overlap ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{2, 2};
    torch::jit::Stack stack = {x, std::vector<int64_t>{2, 2}, stride, std::vector<int64_t>{0, 0},
                               std::vector<int64_t>{1, 1}, false};
    op(stack);
    ASSERT_EQ(stack.size(), 2u);
    auto want = at::max_pool2d_with_indices(x, {2, 2}, stride, {0, 0}, {1, 1}, false);
    EXPECT_TRUE(at::equal(stack[0].toTensor(), std::get<0>(want)));
    EXPECT_TRUE(at::equal(stack[1].toTensor(), std::get<1>(want)));
  }
  EXPECT_EQ(fallbacks, 1);
}

}  // namespace
}  // namespace metafuse::runtime
