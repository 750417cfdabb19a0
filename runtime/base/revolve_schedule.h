// The binomial checkpointing schedule of a reversed loop (Griewank's
// "revolve"): with s snapshots of the loop state, reversing l steps costs
// the fewest recomputed steps when the state is snapshotted at the split
// points chosen here.
//
// Convention: reversing step k needs step k run once more "with its saved
// values" (the taping run) from the state before it; the cost counted here
// is the other forward runs of steps ("advances") the reversal needs, given
// the state before the first step and `snapshots` slots, that one included.
//   MinimalAdvances(l, 1) = l (l - 1) / 2     (advance from the start for each)
//   MinimalAdvances(l, s) = t l - C(s + t, t - 1), t the least with C(s + t, s) >= l
// which is the minimum over splits m of m + A(l - m, s - 1) + A(m, s).
#pragma once

#include <cstdint>

namespace metafuse::runtime {

// The fewest advances that reverse `steps` steps with `snapshots` slots
// (both >= 1).
int64_t MinimalAdvances(int64_t steps, int64_t snapshots);

// Where to put the next snapshot: advance this many steps (1 <= m < steps)
// from the held state, snapshot, reverse the steps after it with one slot
// fewer, then the steps before it with the same slots. Optimal: m +
// A(steps - m, snapshots - 1) + A(m, snapshots) = A(steps, snapshots).
// With one slot (or two steps) it is steps - 1.
int64_t RevolveSplit(int64_t steps, int64_t snapshots);

// The snapshots that keep the recomputation to at most one advance per step
// on average ("auto"): the least s with C(s + 2, 2) >= steps, i.e. about
// sqrt(2 steps), capped at `steps`.
int64_t AutoSnapshots(int64_t steps);

}  // namespace metafuse::runtime
