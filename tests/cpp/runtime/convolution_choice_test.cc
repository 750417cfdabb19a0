// The measured choice of a convolution's algorithm (runtime/compute/convolution.h,
// runtime/tuning/measured_choice.h): whatever wins, the result is ATen's (float64
// to 1e-12, float32 to 1e-4 relative); the first call of a shape records
// one line naming the winner among the candidates it timed, later calls and
// a fresh process table (another process) reuse it without timing again.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/compute/convolution.h"
#include "runtime/tuning/measured_choice.h"

namespace metafuse::runtime {
namespace {

// A private cache directory before anything opens the process's cache.
const std::string kCacheDir = [] {
  char dir[] = "/tmp/metafuse_convolution_choice_XXXXXX";
  if (mkdtemp(dir) == nullptr) return std::string();
  setenv("METAFUSE_CACHE_DIR", dir, 1);
  unsetenv("METAFUSE_CONV_ALGORITHM");
  return std::string(dir);
}();
const bool kCacheDirSet = !kCacheDir.empty();

// The convolution choices file (its name hashes the convolution's own
// machine identity), found by its table name.
std::string ChoicesFileText() {
  std::string text;
  for (const auto& entry : std::filesystem::directory_iterator(kCacheDir)) {
    if (entry.path().filename().string().rfind("convolution_choices-", 0) != 0) continue;
    std::ifstream in(entry.path());
    std::stringstream s;
    s << in.rdbuf();
    text += s.str();
  }
  return text;
}

int Lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

void ExpectClose(const at::Tensor& got, const at::Tensor& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(at::allclose(got, want, rtol, rtol))
      << what << ": max difference " << (got - want).abs().max().item<double>();
}

TEST(ConvolutionChoice, FastestMatchesATenAndIsRecordedOnce) {
  ASSERT_TRUE(kCacheDirSet);
  torch::manual_seed(0);
  struct Shape {
    std::vector<int64_t> input, weight;
    int64_t pad;
  };
  // A first layer (the direct kernels apply), a wide 3x3 one (Winograd
  // applies in float32), a strided-free 1x1.
  const Shape shapes[] = {{{6, 1, 12, 12}, {8, 1, 3, 3}, 1},
                          {{3, 32, 10, 10}, {32, 32, 3, 3}, 1},
                          {{2, 4, 5, 5}, {3, 4, 1, 1}, 0}};
  int calls = 0;
  for (auto dtype : {at::kFloat, at::kDouble}) {
    const double rtol = dtype == at::kFloat ? 1e-4 : 1e-12;
    for (const Shape& s : shapes) {
      const at::Tensor x = at::randn(s.input, dtype), w = at::randn(s.weight, dtype);
      const at::Tensor b = at::randn({s.weight[0]}, dtype);
      const std::vector<int64_t> ones = {1, 1}, pad = {s.pad, s.pad};
      const at::Tensor want = at::conv2d(x, w, b, ones, pad);
      for (int repeat = 0; repeat < 2; ++repeat) {
        ExpectClose(FastestConv2d(x, w, b, ones, pad, ones, 1), want, rtol, "conv2d");
      }
      ++calls;
      const at::Tensor y = at::randn(want.sizes(), dtype);
      ExpectClose(FastestConvTranspose2d(y, w, c10::nullopt, ones, pad, {0, 0}, 1, ones),
                  at::conv_transpose2d(y, w, {}, 1, pad), rtol, "conv_transpose2d");
      ++calls;
    }
  }
  // One line per distinct call, each naming its form and a winner that is
  // one of the candidates listed in its key.
  std::string text = ChoicesFileText();
  EXPECT_EQ(Lines(text), calls) << text;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::string key = line.substr(0, tab);
    const std::string chosen = line.substr(tab + 1, line.find('\t', tab + 1) - tab - 1);
    const std::string candidates = key.substr(key.rfind(" of ") + 3) + " ";
    EXPECT_NE(candidates.find(" " + chosen + " "), std::string::npos) << line;
    EXPECT_TRUE(key.rfind("conv2d ", 0) == 0 || key.rfind("conv_transpose2d ", 0) == 0) << line;
  }
  // Another process (a fresh table) reads the file: nothing is timed again.
  ClearMeasuredChoicesForTesting();
  const at::Tensor x = at::randn({6, 1, 12, 12}), w = at::randn({8, 1, 3, 3});
  FastestConv2d(x, w, at::randn({8}), {1, 1}, {1, 1}, {1, 1}, 1);
  EXPECT_EQ(Lines(ChoicesFileText()), calls);
}

TEST(ConvolutionChoice, GradientFormsMatchATen) {
  ASSERT_TRUE(kCacheDirSet);
  torch::manual_seed(1);
  // Weight gradient of a 3x3 layer of 32 channels: conv2d(x^T, dy^T).
  const at::Tensor x = at::randn({4, 32, 10, 10}), dy = at::randn({4, 32, 10, 10});
  const at::Tensor want = at::conv2d(x.transpose(0, 1), dy.transpose(0, 1), {}, 1, 1);
  ExpectClose(WeightGradient(x.transpose(0, 1), dy.transpose(0, 1), {1, 1}), want, 1e-4,
              "weight gradient");
  if (at::hasMKLDNN()) {
    const at::Tensor w = at::randn({32, 16, 3, 3});
    ExpectClose(InputGradient(dy, w, {1, 1}), at::conv_transpose2d(dy, w, {}, 1, 1), 1e-4,
                "input gradient");
  }
  const std::string text = ChoicesFileText();
  EXPECT_NE(text.find("weight_gradient Float"), std::string::npos) << text;
}

}  // namespace
}  // namespace metafuse::runtime
