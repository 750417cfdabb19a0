#include "runtime/base/revolve_schedule.h"

#include <c10/util/Exception.h>

namespace metafuse::runtime {
namespace {

// C(n, k) saturating at a bound above any step count (so no overflow).
int64_t Binomial(int64_t n, int64_t k) {
  constexpr int64_t kCap = int64_t{1} << 62;
  if (k < 0 || k > n) return 0;
  if (k > n - k) k = n - k;
  int64_t result = 1;
  for (int64_t i = 1; i <= k; ++i) {
    // result * (n - k + i) / i is exact at every i (a binomial coefficient).
    const int64_t factor = n - k + i;
    if (result > kCap / factor) return kCap;
    result = result * factor / i;
  }
  return result;
}

}  // namespace

int64_t MinimalAdvances(int64_t steps, int64_t snapshots) {
  TORCH_CHECK(steps >= 1 && snapshots >= 1, "MinimalAdvances: steps and snapshots must be >= 1");
  if (steps == 1) return 0;
  if (snapshots == 1) return steps * (steps - 1) / 2;
  int64_t t = 0;
  while (Binomial(snapshots + t, snapshots) < steps) ++t;
  return t * steps - Binomial(snapshots + t, t - 1);
}

int64_t RevolveSplit(int64_t steps, int64_t snapshots) {
  TORCH_CHECK(steps >= 2 && snapshots >= 1, "RevolveSplit: needs steps >= 2 and snapshots >= 1");
  if (snapshots == 1 || steps == 2) return steps - 1;
  const int64_t best = MinimalAdvances(steps, snapshots);
  // The largest optimal split: fewer steps are then reversed with one slot
  // fewer. Every candidate is O(t) to evaluate.
  for (int64_t m = steps - 1; m >= 1; --m) {
    if (m + MinimalAdvances(steps - m, snapshots - 1) + MinimalAdvances(m, snapshots) == best) {
      return m;
    }
  }
  TORCH_CHECK(false, "RevolveSplit: no optimal split for ", steps, " steps, ", snapshots,
              " snapshots");
}

int64_t AutoSnapshots(int64_t steps) {
  TORCH_CHECK(steps >= 1, "AutoSnapshots: steps must be >= 1");
  int64_t s = 1;
  while (s < steps && Binomial(s + 2, 2) < steps) ++s;
  return s;
}

}  // namespace metafuse::runtime
