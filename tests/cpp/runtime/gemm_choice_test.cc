// runtime/compute/gemm_choice: the first product of a shape is timed both ways and
// the faster kept, in the process and in a file that other processes read
// instead of timing again; METAFUSE_SMALL_GEMM overrides it. Also the GEMM
// operation itself on the operand layouts a batched program gives it (a
// stack expanded from one matrix, transposed views), against at::bmm.
#include "runtime/compute/gemm_choice.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>
#include <string>

#include "runtime/compute/gemm.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {
namespace {

// A private cache directory before anything opens the process's cache.
const bool kCacheDirSet = [] {
  char dir[] = "/tmp/metafuse_gemm_choice_XXXXXX";
  if (mkdtemp(dir) == nullptr) return false;
  setenv("METAFUSE_CACHE_DIR", dir, 1);
  unsetenv("METAFUSE_SMALL_GEMM");
  return true;
}();

// A timer reporting fixed seconds per kernel, counting its calls.
struct FakeTimer {
  double blas_s, small_s;
  int calls = 0;
  GemmTimer Fn() {
    return [this](GemmKernel k) {
      ++calls;
      return k == GemmKernel::kBlas ? blas_s : small_s;
    };
  }
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(GemmChoice, TimesOnceAndKeepsTheFasterInTheProcessAndTheFile) {
  ASSERT_TRUE(kCacheDirSet);
  const std::string blas = "fake-blas-1";
  const std::string file = GemmChoiceFile(blas);
  ASSERT_FALSE(file.empty());
  FakeTimer small_wins{2e-6, 1e-6}, blas_wins{1e-6, 3e-6};
  const GemmShape a{false, false, true, 10, 40, 40}, b{false, true, false, 40, 40, 10};
  EXPECT_EQ(ChooseGemmKernel(a, blas, small_wins.Fn()), GemmKernel::kSmall);
  EXPECT_EQ(ChooseGemmKernel(b, blas, blas_wins.Fn()), GemmKernel::kBlas);
  EXPECT_GT(small_wins.calls, 0);
  EXPECT_GT(blas_wins.calls, 0);
  // Kept in the process: no more timing, even with a timer that disagrees.
  FakeTimer disagree{1e-6, 9e-6};
  EXPECT_EQ(ChooseGemmKernel(a, blas, disagree.Fn()), GemmKernel::kSmall);
  EXPECT_EQ(disagree.calls, 0);
  // Kept on disk: a fresh table (another process) reads the file.
  const std::string text = ReadAll(file);
  EXPECT_NE(text.find(a.Key() + "\tsmall"), std::string::npos) << text;
  EXPECT_NE(text.find(b.Key() + "\tblas"), std::string::npos) << text;
  ClearGemmChoicesForTesting();
  EXPECT_EQ(ChooseGemmKernel(a, blas, disagree.Fn()), GemmKernel::kSmall);
  EXPECT_EQ(ChooseGemmKernel(b, blas, disagree.Fn()), GemmKernel::kBlas);
  EXPECT_EQ(disagree.calls, 0);
  // Another BLAS is another file: timed again.
  EXPECT_NE(GemmChoiceFile("fake-blas-2"), file);
  EXPECT_EQ(ChooseGemmKernel(a, "fake-blas-2", disagree.Fn()), GemmKernel::kBlas);
  EXPECT_GT(disagree.calls, 0);
}

TEST(GemmChoice, ShapesTooLargeForTheSmallGemmAreNotTimed) {
  FakeTimer timer{1.0, 1e-9};
  const GemmShape big{false, false, false, 512, 512, 512};
  EXPECT_EQ(ChooseGemmKernel(big, "fake-blas-3", timer.Fn()), GemmKernel::kBlas);
  EXPECT_EQ(timer.calls, 0);
}

TEST(GemmChoice, EnvironmentOverridesAndNamesItselfWhenWrong) {
  FakeTimer timer{1e-6, 2e-6};
  const GemmShape s{true, false, false, 7, 9, 11};
  setenv("METAFUSE_SMALL_GEMM", "always", 1);
  EXPECT_EQ(ChooseGemmKernel(s, "fake-blas-4", timer.Fn()), GemmKernel::kSmall);
  setenv("METAFUSE_SMALL_GEMM", "never", 1);
  EXPECT_EQ(ChooseGemmKernel(s, "fake-blas-4", timer.Fn()), GemmKernel::kBlas);
  EXPECT_EQ(timer.calls, 0);
  setenv("METAFUSE_SMALL_GEMM", "fastest", 1);
  try {
    ChooseGemmKernel(s, "fake-blas-4", timer.Fn());
    ADD_FAILURE() << "a bad METAFUSE_SMALL_GEMM was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("METAFUSE_SMALL_GEMM must be auto, always or never, "
                                         "got 'fastest'"),
              std::string::npos)
        << e.what();
  }
  unsetenv("METAFUSE_SMALL_GEMM");
}

// The GEMM operation on a batched program's operand layouts, under each
// policy, against at::bmm (float64 to 1e-12).
TEST(GemmOperation, SharedAndTransposedStacksMatchBmm) {
  torch::manual_seed(3);
  for (const char* policy : {"never", "always", "auto"}) {
    setenv("METAFUSE_SMALL_GEMM", policy, 1);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        // A: [5, 10, 40] per task (or its transpose); B: one [40, 40]
        // matrix expanded to every task (stride 0), as the meta-parameters.
        at::Tensor a = ta ? torch::randn({5, 40, 10}, torch::kDouble)
                          : torch::randn({5, 10, 40}, torch::kDouble);
        at::Tensor w = torch::randn({40, 40}, torch::kDouble);
        at::Tensor b = w.expand({5, 40, 40});
        GemmPlan plan;
        plan.trans_a = ta;
        plan.trans_b = tb;
        torch::jit::Stack stack = {a, b};
        MakeGemmOperation(plan)(stack);
        ASSERT_EQ(stack.size(), 1u);
        const at::Tensor got = stack[0].toTensor();
        const at::Tensor want = at::bmm(ta ? a.transpose(1, 2) : a,
                                        tb ? b.transpose(1, 2) : b);
        EXPECT_TRUE(at::allclose(got, want, 1e-12, 1e-12))
            << policy << " ta " << ta << " tb " << tb << ": max difference "
            << (got - want).abs().max().item<double>();
        // A transposed view of a stack (column-major per task) as A.
        at::Tensor at_view = torch::randn({5, 40, 10}, torch::kDouble).transpose(1, 2);
        torch::jit::Stack stack2 = {at_view, b};
        GemmPlan plain;
        plain.trans_b = tb;
        MakeGemmOperation(plain)(stack2);
        const at::Tensor want2 = at::bmm(at_view, tb ? b.transpose(1, 2) : b);
        EXPECT_TRUE(at::allclose(stack2[0].toTensor(), want2, 1e-12, 1e-12)) << policy;
      }
    }
  }
  unsetenv("METAFUSE_SMALL_GEMM");
}

}  // namespace
}  // namespace metafuse::runtime
