// runtime/tuning/measured_choice's RunFastest with fake candidates: the faster one
// wins and its result is returned, the loser is not run again once the
// choice is made, a candidate that throws is out of the running, and a key
// where every candidate throws fails with the first one's error.
#include "runtime/tuning/measured_choice.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace metafuse::runtime {
namespace {

const bool kCacheDirSet = [] {
  char dir[] = "/tmp/metafuse_measured_choice_XXXXXX";
  if (mkdtemp(dir) == nullptr) return false;
  setenv("METAFUSE_CACHE_DIR", dir, 1);
  return true;
}();

// A candidate returning `value` after `ms` milliseconds, counting its runs.
Candidate Fake(const std::string& name, double value, double ms, int* runs) {
  return {name, [=] {
            ++*runs;
            std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
            return at::full({1}, value);
          }};
}

TEST(RunFastest, TheFasterWinsAndTheLoserIsNotRunAgain) {
  ASSERT_TRUE(kCacheDirSet);
  int slow_runs = 0, fast_runs = 0;
  const std::vector<Candidate> candidates = {Fake("slow", 1.0, 3.0, &slow_runs),
                                             Fake("fast", 2.0, 0.2, &fast_runs)};
  EXPECT_EQ(RunFastest("test_choices", "machine-a", "key-1", candidates).item<double>(), 2.0);
  EXPECT_GT(slow_runs, 0);
  const int slow_before = slow_runs;
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(RunFastest("test_choices", "machine-a", "key-1", candidates).item<double>(), 2.0);
  EXPECT_EQ(slow_runs, slow_before);
}

TEST(RunFastest, ACandidateThatThrowsIsOutOfTheRunning) {
  int runs = 0;
  const std::vector<Candidate> candidates = {
      {"broken", []() -> at::Tensor { throw std::runtime_error("refused"); }},
      Fake("works", 3.0, 0.1, &runs)};
  EXPECT_EQ(RunFastest("test_choices", "machine-a", "key-2", candidates).item<double>(), 3.0);
}

TEST(RunFastest, EveryCandidateThrowingFailsWithTheFirstError) {
  const std::vector<Candidate> candidates = {
      {"a", []() -> at::Tensor { throw std::runtime_error("first refusal"); }},
      {"b", []() -> at::Tensor { throw std::runtime_error("second refusal"); }}};
  try {
    RunFastest("test_choices", "machine-a", "key-3", candidates);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "first refusal");
  }
}

}  // namespace
}  // namespace metafuse::runtime
