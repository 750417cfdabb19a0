// The binomial checkpointing schedule against an independent reference: the
// minimum over all splits computed by dynamic programming, and a simulation
// of the schedule that counts its advances and its live snapshots.
#include "runtime/base/revolve_schedule.h"

#include <algorithm>
#include <vector>

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

namespace metafuse::runtime {
namespace {

// cost[l][s]: fewest advances reversing l steps with s slots, by trying
// every split (the recurrence, not the closed form).
std::vector<std::vector<int64_t>> Reference(int64_t max_steps, int64_t max_slots) {
  std::vector<std::vector<int64_t>> cost(max_steps + 1,
                                         std::vector<int64_t>(max_slots + 1, 0));
  for (int64_t l = 2; l <= max_steps; ++l) {
    cost[l][1] = l * (l - 1) / 2;
    for (int64_t s = 2; s <= max_slots; ++s) {
      int64_t best = INT64_MAX;
      for (int64_t m = 1; m < l; ++m) best = std::min(best, m + cost[l - m][s - 1] + cost[m][s]);
      cost[l][s] = best;
    }
  }
  return cost;
}

// Runs the schedule RevolveSplit chooses (as the loop node does) and counts
// advances, taped steps in order, and the most snapshots held at once.
struct Simulation {
  int64_t advances = 0, max_live = 0, live = 0;
  std::vector<int64_t> taped;
  void Reverse(int64_t a, int64_t b, int64_t slots) {
    ++live;  // the state before step a
    max_live = std::max(max_live, live);
    while (b - a >= 1) {
      if (b - a == 1) {
        taped.push_back(a);
        break;
      }
      const int64_t m = a + RevolveSplit(b - a, slots);
      advances += m - a;
      if (slots > 1) {
        Reverse(m, b, slots - 1);
      } else {
        taped.push_back(m);
      }
      b = m;
    }
    --live;
  }
};

TEST(RevolveSchedule, ClosedFormIsTheMinimumOverSplits) {
  const auto cost = Reference(70, 6);
  for (int64_t l = 1; l <= 70; ++l) {
    for (int64_t s = 1; s <= 6; ++s) {
      EXPECT_EQ(MinimalAdvances(l, s), cost[l][s]) << l << " steps, " << s << " snapshots";
    }
  }
}

TEST(RevolveSchedule, TheScheduleReachesTheMinimumWithinItsSnapshots) {
  for (int64_t l : {1, 2, 3, 10, 37, 100, 1000}) {
    for (int64_t s : {1, 2, 3, 5, 12, 40}) {
      Simulation sim;
      sim.Reverse(0, l, s);
      EXPECT_EQ(sim.advances, MinimalAdvances(l, s)) << l << " steps, " << s << " snapshots";
      EXPECT_LE(sim.max_live, s) << l << " steps, " << s << " snapshots";
      // Every step taped exactly once, last to first.
      ASSERT_EQ(static_cast<int64_t>(sim.taped.size()), l);
      for (int64_t k = 0; k < l; ++k) EXPECT_EQ(sim.taped[k], l - 1 - k);
    }
  }
}

TEST(RevolveSchedule, AutoSnapshotsKeepRecomputationToAboutOneStepEach) {
  for (int64_t l : {1, 2, 10, 100, 1000, 10000}) {
    const int64_t s = AutoSnapshots(l);
    EXPECT_LE(s, l);
    EXPECT_LE(MinimalAdvances(l, s), 2 * l) << l;
    // About sqrt(2 l): the least s with (s + 2)(s + 1) / 2 >= l.
    EXPECT_GE((s + 2) * (s + 1) / 2, l);
    if (s > 1) EXPECT_LT((s + 1) * s / 2, l);
  }
  EXPECT_EQ(AutoSnapshots(10000), 140);
}

TEST(RevolveSchedule, RefusesNonsense) {
  EXPECT_THROW(MinimalAdvances(0, 1), c10::Error);
  EXPECT_THROW(MinimalAdvances(3, 0), c10::Error);
  EXPECT_THROW(RevolveSplit(1, 2), c10::Error);
}

}  // namespace
}  // namespace metafuse::runtime
