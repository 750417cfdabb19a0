// The compiled inner loop against a hand-unrolled torch::autograd
// computation: adapted params, inner losses and meta-gradients.
#include "compiler/callable/compiled_inner_loop.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "compiler/autodiff/autodiff.h"
#include "runtime/tuning/measured_choice.h"
#include "tests/cpp/compiler/eager_unroll.h"

namespace metafuse::compiler {
namespace {

using TensorList = std::vector<at::Tensor>;

at::Tensor MlpLoss(const TensorList& p, const TensorList& b) {
  auto h = torch::tanh(torch::linear(b[0], p[0], p[1]));
  h = torch::relu(torch::linear(h, p[2], p[3]));
  return torch::mse_loss(torch::linear(h, p[4], p[5]), b[1]);
}

TensorList MakeParams(torch::Dtype dtype) {
  torch::manual_seed(0);
  TensorList p = {torch::randn({8, 1}), torch::randn({8}), torch::randn({8, 8}),
                  torch::randn({8}), torch::randn({1, 8}), torch::randn({1})};
  for (auto& t : p) t = (t * 0.5).to(dtype).requires_grad_(true);
  return p;
}

TensorList MakeBatch(torch::Dtype dtype) {
  auto x = torch::linspace(-2, 2, 10).unsqueeze(1).to(dtype);
  return {x, torch::sin(x)};
}

void ExpectCompiledEqualsEager(const OptimizerSpec& o, torch::Dtype dtype,
                               double rtol, double atol) {
  auto params = MakeParams(dtype);
  auto batch = MakeBatch(dtype);
  auto loop = CompileInnerLoop(MlpLoss, params, batch, o, /*steps=*/3);
  TensorList inputs = params;
  inputs.insert(inputs.end(), batch.begin(), batch.end());
  TensorList adapted = (*loop)(inputs);
  auto meta = torch::autograd::grad({MlpLoss(adapted, batch)}, params);
  auto expected = testing::EagerUnroll(MlpLoss, params, batch, o, 3);
  const auto& expected_adapted = expected.adapted;
  const auto& expected_meta = expected.meta;
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(adapted[i], expected_adapted[i], rtol, atol))
        << o.kind << " adapted param " << i;
    EXPECT_TRUE(torch::allclose(meta[i], expected_meta[i], rtol, atol))
        << o.kind << " meta-gradient " << i << "\n" << meta[i] - expected_meta[i];
  }
}

TEST(CompiledInnerLoop, SgdMatchesEagerFloat64) {
  OptimizerSpec o;
  o.kind = "sgd";
  o.lr = 0.1;
  ExpectCompiledEqualsEager(o, torch::kFloat64, 1e-10, 1e-12);
}

TEST(CompiledInnerLoop, AdamMatchesEagerFloat64) {
  OptimizerSpec o;
  o.kind = "adam";
  o.lr = 0.01;
  o.eps_root = 1e-10;
  ExpectCompiledEqualsEager(o, torch::kFloat64, 1e-10, 1e-12);
}

// The C++ front runs the fusion cost check on the first call, through the
// tuning library: a choice, a report line, no gradient on the caller's
// tensors from the timed calls, and the same numbers as eager either way.
TEST(CompiledInnerLoop, TheCppFrontRunsTheFusionCheckThroughTheTuningLibrary) {
  runtime::ClearMeasuredChoicesForTesting();
  OptimizerSpec o;
  o.kind = "sgd";
  o.lr = 0.1;
  auto params = MakeParams(torch::kFloat64);
  auto batch = MakeBatch(torch::kFloat64);
  auto loop = CompileInnerLoop(MlpLoss, params, batch, o, /*steps=*/3);
  EXPECT_FALSE(loop->fusion_choice().has_value());
  TensorList inputs = params;
  inputs.insert(inputs.end(), batch.begin(), batch.end());
  TensorList adapted = (*loop)(inputs);
  ASSERT_TRUE(loop->fusion_choice().has_value());
  const FusionChoice choice = *loop->fusion_choice();
  EXPECT_GT(choice.fused_seconds, 0);
  EXPECT_GT(choice.unfused_seconds, 0);
  EXPECT_EQ(loop->function().fusion(), choice.fusion);
  for (const auto& p : params) EXPECT_FALSE(p.grad().defined());
  bool reported = false;
  for (const runtime::ChoiceRecord& r : runtime::ChoiceReport()) {
    if (r.table != "fusion") continue;
    reported = true;
    EXPECT_EQ(r.key.rfind("C++ inner loop: Double[8, 1]", 0), 0u) << r.key;
    EXPECT_EQ(r.choice, choice.fusion ? "fused" : "unfused");
  }
  EXPECT_TRUE(reported);
  auto expected = testing::EagerUnroll(MlpLoss, params, batch, o, 3);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(adapted[i], expected.adapted[i], 1e-10, 1e-12));
  }
}

TEST(CompiledInnerLoop, SgdMatchesEagerFloat32) {
  OptimizerSpec o;
  o.kind = "sgd";
  o.lr = 0.1;
  ExpectCompiledEqualsEager(o, torch::kFloat32, 1e-5, 1e-6);
}

TEST(CompiledInnerLoop, RecordsEveryStage) {
  OptimizerSpec o;
  auto loop = CompileInnerLoop(MlpLoss, MakeParams(torch::kFloat64),
                               MakeBatch(torch::kFloat64), o, 2);
  std::vector<std::string> names;
  for (const auto& [stage, ir] : loop->function().stages()) names.push_back(stage);
  EXPECT_EQ(names.front(), "captured");
  EXPECT_NE(std::find(names.begin(), names.end(), "decomposed"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "backward_program"), names.end());
  EXPECT_GT(loop->function().generic().forward.num_instructions(), 0u);
}

TEST(CompiledInnerLoop, UnsupportedOpIsNamed) {
  auto loss = [](const TensorList& p, const TensorList& b) {
    return torch::cumprod(p[0] * b[0], 0).sum();
  };
  OptimizerSpec o;
  try {
    CompileInnerLoop(loss, {torch::randn({3}, torch::requires_grad())},
                     {torch::randn({3})}, o, 1);
    FAIL() << "expected UnsupportedOp";
  } catch (const UnsupportedOp& e) {
    EXPECT_NE(std::string(e.what()).find("aten::cumprod"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace metafuse::compiler
