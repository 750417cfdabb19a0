#include "runtime/tuning/timing_rule.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace metafuse::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

bool BeatsDefault(double rival_seconds, double default_seconds) {
  return rival_seconds * kTimingRule.margin < default_seconds;
}

double SecondsOf(const std::function<void()>& run, double give_up_above) {
  run();  // warm-up
  double best = std::numeric_limits<double>::infinity(), total = 0;
  for (int i = 0; i < kTimingRule.most_repeats; ++i) {
    if (i >= kTimingRule.least_repeats && total >= kTimingRule.repeat_budget_seconds) break;
    const auto start = Clock::now();
    run();
    const double s = SecondsSince(start);
    best = std::min(best, s);
    total += s;
    if (best > give_up_above) break;
  }
  return best;
}

Timing TimeCandidates(const std::vector<TimedCandidate>& candidates) {
  const double never = std::numeric_limits<double>::infinity();
  const size_t n = candidates.size();
  Timing t;
  t.seconds.assign(n, never);
  t.warm_up_only.assign(n, false);
  t.failed.assign(n, nullptr);
  std::vector<double> warm(n, never), total(n, 0);
  std::vector<int> repeats(n, 0);
  auto run = [&](size_t i) -> double {
    const auto start = Clock::now();
    try {
      if (candidates[i].run_timed) return candidates[i].run_timed();
      candidates[i].run();
    } catch (const std::exception&) {
      t.failed[i] = std::current_exception();
      return never;
    }
    return SecondsSince(start);
  };
  for (size_t i = 0; i < n; ++i) warm[i] = run(i);
  if (std::all_of(t.failed.begin(), t.failed.end(), [](const auto& e) { return bool(e); })) {
    std::rethrow_exception(t.failed[0]);
  }
  const double fastest_warm = *std::min_element(warm.begin(), warm.end());
  for (size_t i = 0; i < n; ++i) {
    t.warm_up_only[i] = !t.failed[i] && warm[i] > kTimingRule.give_up_factor * fastest_warm;
  }
  for (int round = 0; round < kTimingRule.most_repeats; ++round) {
    for (size_t i = 0; i < n; ++i) {
      if (t.failed[i] || t.warm_up_only[i]) continue;
      if (round >= kTimingRule.least_repeats && total[i] >= kTimingRule.repeat_budget_seconds) {
        continue;
      }
      const double s = run(i);
      if (t.failed[i]) continue;
      t.seconds[i] = std::min(t.seconds[i], s);
      total[i] += s;
      ++repeats[i];
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (t.warm_up_only[i]) t.seconds[i] = warm[i];
  }
  // The default (the first that did not fail) unless a rival beats it.
  size_t winner = 0;
  while (t.failed[winner]) ++winner;
  size_t fastest = winner;
  for (size_t i = 0; i < n; ++i) {
    if (!t.failed[i] && t.seconds[i] < t.seconds[fastest]) fastest = i;
  }
  t.winner = BeatsDefault(t.seconds[fastest], t.seconds[winner]) ? fastest : winner;
  for (size_t i = 0; i < n; ++i) {
    absl::StrAppend(&t.note, i ? ", " : "", candidates[i].name);
    if (t.failed[i]) {
      absl::StrAppend(&t.note, " failed");
    } else {
      absl::StrAppend(&t.note, " ", t.seconds[i] * 1e6, " us",
                      t.warm_up_only[i] ? " (warm-up only)" : "");
    }
  }
  return t;
}

}  // namespace metafuse::runtime
