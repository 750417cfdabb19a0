// The tuning library's one timing rule (runtime/tuning/timing_rule.h) and
// its report (measured_choice.h): the default wins a near tie, a clearly
// faster rival wins, a failing candidate is out, a slow one is given up
// after its warm-up, and every (table, key) appears once in the report.
#include "runtime/tuning/timing_rule.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "runtime/tuning/measured_choice.h"

namespace metafuse::runtime {
namespace {

std::function<void()> Sleeps(double milliseconds, int* calls = nullptr) {
  return [milliseconds, calls] {
    if (calls) ++*calls;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(milliseconds));
  };
}

TEST(TimingRule, AClearlyFasterRivalReplacesTheDefault) {
  const Timing t = TimeCandidates({{"slow", Sleeps(6)}, {"fast", Sleeps(1)}});
  EXPECT_EQ(t.winner, 1u);
  EXPECT_GT(t.seconds[0], t.seconds[1]);
  EXPECT_NE(t.note.find("slow"), std::string::npos);
}

TEST(TimingRule, ANearTieKeepsTheDefault) {
  // Both sleep the same: neither is 1.1x faster than the other.
  const Timing t = TimeCandidates({{"default", Sleeps(3)}, {"rival", Sleeps(3)}});
  EXPECT_EQ(t.winner, 0u);
  EXPECT_FALSE(BeatsDefault(1.0, 1.05));
  EXPECT_TRUE(BeatsDefault(1.0, 1.2));
}

TEST(TimingRule, RepeatsWithinTheBudgetAndGivesUpOnAClearLoser) {
  int fast_calls = 0, slow_calls = 0;
  const Timing t = TimeCandidates({{"fast", Sleeps(1, &fast_calls)},
                                   {"slow", Sleeps(10, &slow_calls)}});
  EXPECT_EQ(t.winner, 0u);
  EXPECT_EQ(fast_calls, 1 + kTimingRule.most_repeats);  // 3 ms of 50: all repeats
  EXPECT_EQ(slow_calls, 1);                             // over 4x: its warm-up only
  EXPECT_TRUE(t.warm_up_only[1]);
  EXPECT_NE(t.note.find("warm-up only"), std::string::npos);
}

TEST(TimingRule, AFailingCandidateIsOutAndAllFailingThrows) {
  const Timing t = TimeCandidates(
      {{"broken", [] { throw std::runtime_error("no"); }}, {"works", Sleeps(1)}});
  EXPECT_EQ(t.winner, 1u);
  EXPECT_TRUE(t.failed[0]);
  EXPECT_NE(t.note.find("broken failed"), std::string::npos);
  EXPECT_THROW(TimeCandidates({{"a", [] { throw std::runtime_error("first"); }},
                               {"b", [] { throw std::runtime_error("second"); }}}),
               std::runtime_error);
}

TEST(TimingRule, SecondsOfStopsAfterARunPastTheGiveUpTime) {
  int calls = 0;
  SecondsOf(Sleeps(2, &calls), /*give_up_above=*/0.0005);
  EXPECT_EQ(calls, 2);  // warm-up, one timed run over the limit
  calls = 0;
  const double s = SecondsOf(Sleeps(2, &calls));
  EXPECT_EQ(calls, 1 + kTimingRule.most_repeats);
  EXPECT_GE(s, 0.002);
}

TEST(ChoiceReport, EveryChoiceOnceWithItsSource) {
  ClearMeasuredChoicesForTesting();
  RecordChoice({"test_table", "key 1", "a", ChoiceSource::kMeasured, "a 1 us, b 2 us"});
  RecordChoice({"test_table", "key 2", "b", ChoiceSource::kSetting, "SOME_VARIABLE=b"});
  RecordChoice({"test_table", "key 2", "a", ChoiceSource::kMeasured, "ignored: not the first"});
  const std::vector<ChoiceRecord> report = ChoiceReport();
  ASSERT_EQ(report.size(), 2u);
  EXPECT_EQ(report[0].key, "key 1");
  EXPECT_EQ(report[0].source, ChoiceSource::kMeasured);
  EXPECT_EQ(report[0].note, "a 1 us, b 2 us");
  EXPECT_EQ(report[1].choice, "b");
  EXPECT_STREQ(ChoiceSourceName(report[1].source), "setting");
  ClearMeasuredChoicesForTesting();
  EXPECT_TRUE(ChoiceReport().empty());
}

}  // namespace
}  // namespace metafuse::runtime
