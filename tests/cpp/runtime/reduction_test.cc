// runtime/executor/reduction called directly (no compiler): every plan form
// (full sum / mean, sum_to_size over rows, over columns, a block
// [outer, reduce, inner]), float32 and float64, against a scalar loop in
// double written here; empty and size-1 axes; the inputs it hands to the
// plan's ATen operator (non-contiguous, other dtypes, another shape than a
// block plan's), checked against the same loop; the stack discipline.
#include "runtime/executor/reduction.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace metafuse::runtime {
namespace {

// The canonical schema of `name`'s overload `overload`, as this LibTorch
// registers it (the text differs between torch versions).
std::string SchemaOf(const std::string& name, const std::string& overload) {
  for (const auto& op : torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(name))) {
    if (op->schema().overload_name() == overload) return c10::toString(op->schema());
  }
  ADD_FAILURE() << "no operator " << name << "." << overload;
  return "";
}

// out[o, j] = sum over r of x[o, r, j] (divided by reduce for a mean), x
// read as a row-major [outer, reduce, inner] array of doubles, summed in
// order in double.
std::vector<double> NaiveBlockSum(const at::Tensor& x, int64_t outer, int64_t reduce,
                                  int64_t inner, bool mean) {
  const at::Tensor d = x.to(at::kDouble).contiguous();
  const double* p = d.data_ptr<double>();
  std::vector<double> out(outer * inner, 0.0);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      double s = 0.0;
      for (int64_t r = 0; r < reduce; ++r) s += p[(o * reduce + r) * inner + j];
      out[o * inner + j] = mean ? s / static_cast<double>(reduce) : s;
    }
  }
  return out;
}

// Small integers: every partial sum is an integer far below 2^24, exact in
// float whatever the order. A mean is then one correctly rounded division
// in the plan's dtype; the double quotient rounded to float is the same
// number (an integer quotient of integers below 2^24 is never close enough
// to a float rounding boundary for double rounding to matter).
at::Tensor SmallIntegers(c10::IntArrayRef sizes, at::ScalarType dtype) {
  return at::randint(-8, 9, sizes, at::TensorOptions().dtype(dtype));
}

// Runs the operation on a stack holding a sentinel below the instruction's
// inputs (the executor's stack holds other values too); checks that it
// pops exactly its inputs and pushes one tensor.
at::Tensor RunOn(const ReductionPlan& plan, std::vector<c10::IValue> inputs) {
  torch::jit::Operation op = MakeReductionOperation(plan, inputs.size());
  torch::jit::Stack stack;
  stack.emplace_back(int64_t{4242});
  for (c10::IValue& v : inputs) stack.push_back(std::move(v));
  op(stack);
  EXPECT_EQ(stack.size(), 2u);
  EXPECT_EQ(stack.front().toInt(), 4242);
  return stack.back().toTensor();
}

void ExpectEqualTo(const at::Tensor& got, const std::vector<double>& want,
                   c10::IntArrayRef sizes, at::ScalarType dtype, const std::string& what) {
  ASSERT_EQ(got.scalar_type(), dtype) << what;
  ASSERT_EQ(got.sizes(), sizes) << what;
  const at::Tensor d = got.to(at::kDouble).contiguous();
  ASSERT_EQ(static_cast<size_t>(d.numel()), want.size()) << what;
  for (size_t e = 0; e < want.size(); ++e) {
    const double w = dtype == at::kFloat ? static_cast<double>(static_cast<float>(want[e]))
                                         : want[e];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(d.data_ptr<double>()[e])) << what << " element " << e;
    } else {
      EXPECT_EQ(d.data_ptr<double>()[e], w) << what << " element " << e;
    }
  }
}

std::string SizesText(c10::IntArrayRef sizes) {
  std::ostringstream os;
  os << sizes;
  return os.str();
}

ReductionPlan FullPlan(bool mean, std::vector<int64_t> out_sizes) {
  ReductionPlan plan;
  plan.form = ReductionPlan::kAll;
  plan.mean = mean;
  plan.out_sizes = std::move(out_sizes);
  plan.fallback_schema = SchemaOf(mean ? "aten::mean" : "aten::sum", "");
  return plan;
}

class EveryDtype : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(EveryDtype, FullSumAndMean) {
  const at::ScalarType dtype = GetParam();
  for (const std::vector<int64_t>& sizes :
       std::vector<std::vector<int64_t>>{{1}, {7}, {3, 5}, {2, 3, 4}, {1, 1, 1}, {4097}}) {
    const at::Tensor x = SmallIntegers(sizes, dtype);
    for (bool mean : {false, true}) {
      const at::Tensor got = RunOn(FullPlan(mean, {}), {x, c10::IValue()});
      ExpectEqualTo(got, NaiveBlockSum(x, 1, x.numel(), 1, mean), {}, dtype,
                    std::string(mean ? "mean " : "sum ") + SizesText(x.sizes()));
    }
  }
}

TEST_P(EveryDtype, FullReductionOfNothing) {
  // ATen's values for an empty input: sum 0, mean 0 / 0 = NaN.
  const at::ScalarType dtype = GetParam();
  const at::Tensor x = at::empty({0}, at::TensorOptions().dtype(dtype));
  ExpectEqualTo(RunOn(FullPlan(false, {}), {x, c10::IValue()}), {0.0}, {}, dtype, "sum");
  ExpectEqualTo(RunOn(FullPlan(true, {}), {x, c10::IValue()}), {NAN}, {}, dtype, "mean");
}

TEST_P(EveryDtype, SumToSizeOverRowsAndColumns) {
  const at::ScalarType dtype = GetParam();
  const std::string schema = SchemaOf("aten::sum_to_size", "");
  // m = 1 and n = 1 are size-1 axes; 0 an empty one.
  for (int64_t m : {0, 1, 2, 5, 33}) {
    for (int64_t n : {0, 1, 3, 17}) {
      const at::Tensor x = SmallIntegers({m, n}, dtype);
      ReductionPlan rows;
      rows.form = ReductionPlan::kRows;
      rows.out_sizes = {1, n};
      rows.fallback_schema = schema;
      ExpectEqualTo(RunOn(rows, {x, c10::IValue(std::vector<int64_t>{1, n})}),
                    NaiveBlockSum(x, 1, m, n, false), {1, n}, dtype,
                    "rows of " + std::to_string(m) + "x" + std::to_string(n));
      ReductionPlan columns;
      columns.form = ReductionPlan::kColumns;
      columns.out_sizes = {m, 1};
      columns.fallback_schema = schema;
      ExpectEqualTo(RunOn(columns, {x, c10::IValue(std::vector<int64_t>{m, 1})}),
                    NaiveBlockSum(x, m, n, 1, false), {m, 1}, dtype,
                    "columns of " + std::to_string(m) + "x" + std::to_string(n));
    }
  }
}

// sum / mean over a run of dims with keepdim, as the compiler plans it:
// dims of size 1 and of size 0 inside the run included.
TEST_P(EveryDtype, BlockSumsAndMeans) {
  const at::ScalarType dtype = GetParam();
  struct Case {
    std::vector<int64_t> sizes, dims, out_sizes, block;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {1}, {2, 1, 4}, {2, 3, 4}},
      {{3, 5}, {1}, {3, 1}, {3, 5, 1}},
      {{6, 5}, {0}, {1, 5}, {1, 6, 5}},
      {{2, 1, 3, 1}, {1, 2}, {2, 1, 1, 1}, {2, 3, 1}},
      {{4, 2, 1, 3}, {1, 2}, {4, 1, 1, 3}, {4, 2, 3}},
      {{2, 3, 1}, {0, 1}, {1, 1, 1}, {1, 6, 1}},
      {{2, 0, 3}, {1}, {2, 1, 3}, {2, 0, 3}},  // an empty reduced axis
      {{0, 4, 3}, {1}, {0, 1, 3}, {0, 4, 3}},  // an empty outer axis
  };
  for (bool mean : {false, true}) {
    for (const Case& c : cases) {
      const at::Tensor x = SmallIntegers(c.sizes, dtype);
      ReductionPlan plan;
      plan.form = ReductionPlan::kBlock;
      plan.block = c.block;
      plan.mean = mean;
      plan.out_sizes = c.out_sizes;
      plan.fallback_schema =
          mean ? SchemaOf("aten::mean", "dim") : SchemaOf("aten::sum", "dim_IntList");
      const at::Tensor got =
          RunOn(plan, {x, c10::IValue(c.dims), c10::IValue(true), c10::IValue()});
      ExpectEqualTo(got, NaiveBlockSum(x, c.block[0], c.block[1], c.block[2], mean),
                    c.out_sizes, dtype,
                    std::string(mean ? "mean of " : "sum of ") + SizesText(x.sizes()));
    }
  }
}

// Real values: the loop adds in the input's dtype, in order. Recursive
// summation of r terms errs by at most (r - 1) unit roundoffs times the sum
// of the terms' magnitudes; the result is then rounded once more.
TEST_P(EveryDtype, RealValuesWithinTheSummationBound) {
  const at::ScalarType dtype = GetParam();
  const double u = dtype == at::kFloat ? 0x1p-24 : 0x1p-53;
  const at::Tensor x = at::randn({37, 300}, at::TensorOptions().dtype(dtype));
  ReductionPlan rows;
  rows.form = ReductionPlan::kRows;
  rows.out_sizes = {300};
  rows.fallback_schema = SchemaOf("aten::sum_to_size", "");
  const at::Tensor got =
      RunOn(rows, {x, c10::IValue(std::vector<int64_t>{300})}).to(at::kDouble);
  const std::vector<double> want = NaiveBlockSum(x, 1, 37, 300, false);
  const std::vector<double> size = NaiveBlockSum(x.abs(), 1, 37, 300, false);
  for (int64_t j = 0; j < 300; ++j) {
    EXPECT_NEAR(got[j].item<double>(), want[j], 37 * u * size[j]) << "column " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Reduction, EveryDtype, ::testing::Values(at::kFloat, at::kDouble),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

// Inputs the loop does not take go to the plan's operator, which gives the
// same numbers as the naive loop.
TEST(Reduction, NonContiguousInputTakesTheOperator) {
  const at::Tensor x = SmallIntegers({5, 7}, at::kFloat).t();  // [7, 5], strided
  ASSERT_FALSE(x.is_contiguous());
  ReductionPlan rows;
  rows.form = ReductionPlan::kRows;
  rows.out_sizes = {1, 5};
  rows.fallback_schema = SchemaOf("aten::sum_to_size", "");
  ExpectEqualTo(RunOn(rows, {x, c10::IValue(std::vector<int64_t>{1, 5})}),
                NaiveBlockSum(x, 1, 7, 5, false), {1, 5}, at::kFloat, "rows");
  ExpectEqualTo(RunOn(FullPlan(true, {}), {x, c10::IValue()}), NaiveBlockSum(x, 1, 35, 1, true),
                {}, at::kFloat, "mean");
}

TEST(Reduction, IntegerInputTakesTheOperator) {
  const at::Tensor x = at::arange(12, at::TensorOptions().dtype(at::kLong)).reshape({3, 4});
  ReductionPlan columns;
  columns.form = ReductionPlan::kColumns;
  columns.out_sizes = {3, 1};
  columns.fallback_schema = SchemaOf("aten::sum_to_size", "");
  const at::Tensor got = RunOn(columns, {x, c10::IValue(std::vector<int64_t>{3, 1})});
  ASSERT_EQ(got.scalar_type(), at::kLong);
  ASSERT_EQ(got.sizes(), c10::IntArrayRef({3, 1}));
  // 0+1+2+3, 4+5+6+7, 8+9+10+11.
  EXPECT_EQ(got[0][0].item<int64_t>(), 6);
  EXPECT_EQ(got[1][0].item<int64_t>(), 22);
  EXPECT_EQ(got[2][0].item<int64_t>(), 38);
}

// A generic program may meet another shape than its block plan's: the
// operator sums what it is given, not the plan's block.
TEST(Reduction, BlockPlanOnAnotherShapeTakesTheOperator) {
  ReductionPlan plan;
  plan.form = ReductionPlan::kBlock;
  plan.block = {2, 3, 4};
  plan.out_sizes = {2, 1, 4};
  plan.fallback_schema = SchemaOf("aten::sum", "dim_IntList");
  const at::Tensor x = SmallIntegers({2, 5, 4}, at::kDouble);
  ExpectEqualTo(
      RunOn(plan, {x, c10::IValue(std::vector<int64_t>{1}), c10::IValue(true), c10::IValue()}),
      NaiveBlockSum(x, 2, 5, 4, false), {2, 1, 4}, at::kDouble, "sum over dim 1");
}

// Rows or columns of another matrix than the plan's (or not a matrix):
// the loop would write another count of sums than the plan's output
// holds, so the operator takes them.
TEST(Reduction, RowsAndColumnsOfAnotherShapeTakeTheOperator) {
  const std::string schema = SchemaOf("aten::sum_to_size", "");
  ReductionPlan rows;
  rows.form = ReductionPlan::kRows;
  rows.out_sizes = {1, 7};  // planned for [m, 7]
  rows.fallback_schema = schema;
  const at::Tensor wide = SmallIntegers({5, 9}, at::kFloat);
  ExpectEqualTo(RunOn(rows, {wide, c10::IValue(std::vector<int64_t>{1, 9})}),
                NaiveBlockSum(wide, 1, 5, 9, false), {1, 9}, at::kFloat, "rows of 5x9");
  ReductionPlan columns;
  columns.form = ReductionPlan::kColumns;
  columns.out_sizes = {5, 1};  // planned for [5, n]
  columns.fallback_schema = schema;
  const at::Tensor tall = SmallIntegers({8, 3}, at::kDouble);
  ExpectEqualTo(RunOn(columns, {tall, c10::IValue(std::vector<int64_t>{8, 1})}),
                NaiveBlockSum(tall, 8, 3, 1, false), {8, 1}, at::kDouble, "columns of 8x3");
  const at::Tensor flat = SmallIntegers({6}, at::kFloat);
  ExpectEqualTo(RunOn(columns, {flat, c10::IValue(std::vector<int64_t>{1})}),
                NaiveBlockSum(flat, 1, 6, 1, false), {1}, at::kFloat, "a vector");
}

TEST(Reduction, LeavesItsInputAsItWas) {
  const at::Tensor x = SmallIntegers({6, 9}, at::kFloat);
  const at::Tensor before = x.clone();
  ReductionPlan rows;
  rows.form = ReductionPlan::kRows;
  rows.out_sizes = {9};
  rows.fallback_schema = SchemaOf("aten::sum_to_size", "");
  const at::Tensor got = RunOn(rows, {x, c10::IValue(std::vector<int64_t>{9})});
  EXPECT_TRUE(at::equal(x, before));
  EXPECT_NE(got.data_ptr(), x.data_ptr());
  ExpectEqualTo(got, NaiveBlockSum(x, 1, 6, 9, false), {9}, at::kFloat, "sum of rows");
}

}  // namespace
}  // namespace metafuse::runtime
