// runtime/compute/scatter_add against ATen's scatter_add along the last dim:
// repeated indices (the same bits: additions in index order), float32 and
// float64, in place and on a copy; the calls it leaves to ATen; an index
// out of range named; the operation writing into a free `self`; the scatter
// into fresh zeros (metafuse::scatter_add_into_zeros) against ATen's zeros
// and scatter_add, through the dispatcher too.
#include "runtime/compute/scatter_add.h"

#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace metafuse::runtime {
namespace {

TEST(LastDimScatterAdd, MatchesATenWithRepeatedIndices) {
  torch::manual_seed(2);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    const at::Tensor self = torch::randn({4, 3, 9}, dtype);
    const at::Tensor index = torch::randint(0, 9, {4, 3, 20});  // many repeats
    const at::Tensor src = torch::randn({4, 3, 20}, dtype);
    ASSERT_TRUE(LastDimScatterAddApplies(self, -1, index, src));
    ASSERT_TRUE(LastDimScatterAddApplies(self, 2, index, src));
    const at::Tensor want = self.scatter_add(-1, index, src);
    EXPECT_TRUE(at::equal(ScatterAddLastDim(self, index, src, false), want));
    EXPECT_TRUE(at::equal(self.scatter_add(-1, index, src), want));  // self untouched
    at::Tensor target = self.clone();
    const at::Tensor got = ScatterAddLastDim(target, index, src, true);
    EXPECT_EQ(got.data_ptr(), target.data_ptr());
    EXPECT_TRUE(at::equal(got, want));
  }
}

TEST(LastDimScatterAdd, LeavesOtherCallsToATen) {
  const at::Tensor self = torch::zeros({3, 8}), index = torch::zeros({3, 4}, torch::kLong);
  const at::Tensor src = torch::ones({3, 4});
  EXPECT_FALSE(LastDimScatterAddApplies(self, 0, index, src));  // not the last dim
  EXPECT_FALSE(LastDimScatterAddApplies(self.t().contiguous().t(), -1, index, src));
  EXPECT_FALSE(LastDimScatterAddApplies(self.to(torch::kInt), -1, index, src.to(torch::kInt)));
  EXPECT_FALSE(LastDimScatterAddApplies(self, -1, index.to(torch::kInt), src));
  EXPECT_FALSE(LastDimScatterAddApplies(self, -1, index.narrow(1, 0, 2), src));  // sizes
  EXPECT_FALSE(LastDimScatterAddApplies(torch::zeros({2, 8}), -1, index, src));  // rows
}

TEST(LastDimScatterAdd, IndexOutOfRangeIsNamed) {
  const at::Tensor self = torch::zeros({2, 5});
  at::Tensor index = torch::zeros({2, 3}, torch::kLong);
  index[1][2] = 5;
  try {
    ScatterAddLastDim(self, index, torch::ones({2, 3}), false);
    FAIL() << "no error";
  } catch (const c10::Error& error) {
    const std::string what = error.what_without_backtrace();
    EXPECT_NE(what.find("index 5 is out of bounds for a last dimension of size 5"),
              std::string::npos)
        << what;
  }
}

TEST(LastDimScatterAdd, OperationWritesIntoAFreeSelf) {
  int fallbacks = 0;
  torch::jit::Operation op =
      MakeScatterAddOperation([&](torch::jit::Stack&) { ++fallbacks; });
  const at::Tensor index = torch::tensor({{1, 1, 3}}, torch::kLong);
  const at::Tensor src = torch::tensor({{1.0, 2.0, 4.0}});
  at::Tensor self = torch::zeros({1, 4});
  const void* buffer = self.data_ptr();
  torch::jit::Stack stack = {std::move(self), int64_t{-1}, index, src};
  op(stack);
  ASSERT_EQ(stack.size(), 1u);
  EXPECT_EQ(stack[0].toTensor().data_ptr(), buffer);
  EXPECT_TRUE(at::equal(stack[0].toTensor(), torch::tensor({{0.0, 3.0, 0.0, 4.0}})));
  const at::Tensor held = torch::zeros({1, 4});  // still held here: copied
  stack = {held, int64_t{-1}, index, src};
  op(stack);
  EXPECT_NE(stack[0].toTensor().data_ptr(), held.data_ptr());
  EXPECT_TRUE(at::equal(held, torch::zeros({1, 4})));
  stack = {held, int64_t{0}, index, src};
  op(stack);
  EXPECT_EQ(fallbacks, 1);
}

TEST(ScatterAddIntoZeros, MatchesZerosThenScatterAdd) {
  torch::manual_seed(3);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    const at::Tensor index = torch::randint(0, 9, {4, 3, 20});  // many repeats
    const at::Tensor src = torch::randn({4, 3, 20}, dtype);
    const at::Tensor want = torch::zeros({4, 3, 9}, dtype).scatter_add_(-1, index, src);
    EXPECT_TRUE(at::equal(ScatterAddIntoZeros({4, 3, 9}, dtype, at::kCPU, -1, index, src), want));
    EXPECT_TRUE(at::equal(ScatterAddIntoZeros({4, 3, 9}, dtype, at::kCPU, 2, index, src), want));
    // Not the last dim: ATen's two calls.
    const at::Tensor rows = torch::randint(0, 4, {4, 3, 20});
    EXPECT_TRUE(at::equal(ScatterAddIntoZeros({4, 3, 20}, dtype, at::kCPU, 0, rows, src),
                          torch::zeros({4, 3, 20}, dtype).scatter_add_(0, rows, src)));
  }
  // No element to scatter: all zeros all the same (the buffer is fresh).
  const at::Tensor none = ScatterAddIntoZeros({2, 5}, at::kFloat, at::kCPU, -1,
                                              torch::zeros({2, 0}, torch::kLong),
                                              torch::zeros({2, 0}));
  EXPECT_TRUE(at::equal(none, torch::zeros({2, 5})));
}

TEST(ScatterAddIntoZeros, RegisteredForProgramsAndIndexErrorsNamed) {
  auto op = c10::Dispatcher::singleton().findSchema({"metafuse::scatter_add_into_zeros", ""});
  ASSERT_TRUE(op.has_value());
  const at::Tensor index = torch::tensor({{1, 1, 3}}, torch::kLong);
  const at::Tensor src = torch::tensor({{1.0, 2.0, 4.0}});
  torch::jit::Stack stack = {std::vector<int64_t>{1, 4}, static_cast<int64_t>(at::kFloat),
                             c10::Device(at::kCPU), int64_t{-1}, index, src};
  op->callBoxed(&stack);
  ASSERT_EQ(stack.size(), 1u);
  EXPECT_TRUE(at::equal(stack[0].toTensor(), torch::tensor({{0.0, 3.0, 0.0, 4.0}})));
  try {
    ScatterAddIntoZeros({1, 3}, at::kFloat, at::kCPU, -1, index, src);
    FAIL() << "no error";
  } catch (const c10::Error& error) {
    const std::string what = error.what_without_backtrace();
    EXPECT_NE(what.find("index 3 is out of bounds for a last dimension of size 3"),
              std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace metafuse::runtime
