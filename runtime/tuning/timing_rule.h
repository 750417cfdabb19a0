// The one rule by which every measured choice of metafuse times its
// candidates: convolution algorithms and GEMM kernels (runtime/compute),
// splitting grouped convolutions (compiler/fusion), fusion on or off and
// metafuse.vmap's strategies (Python, through metafuse._C._tuning).
//
//   warm-up   each candidate runs once untimed (it compiles, oneDNN builds
//             its primitives); one that throws is out of the running
//   repeats   then timed runs, alternating between candidates so that a
//             burst of load hits all of them: at least 2 each, a 3rd while
//             a candidate's timed runs total under 50 ms; a candidate's
//             time is its fastest run
//   give up   a candidate over 4x the fastest warm-up is not repeated (its
//             warm-up is its time); a caller timing candidates one after
//             another passes the time past which one has clearly lost
//   threshold the first candidate is the default; a rival replaces it
//             only when faster by kMargin (1.1x): a near tie keeps the
//             default, whatever the noise of one timing
#pragma once

#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace metafuse::runtime {

struct TimingRule {
  int least_repeats = 2;
  int most_repeats = 3;
  double repeat_budget_seconds = 0.05;
  double give_up_factor = 4.0;
  double margin = 1.1;
};

// The rule every choice uses.
inline constexpr TimingRule kTimingRule{};

struct TimedCandidate {
  std::string name;  // no space, tab or newline
  std::function<void()> run;
  // Set instead of `run` for a candidate that times itself (a loop of calls
  // too short to time one by one, as a small GEMM): its seconds per run.
  std::function<double()> run_timed = nullptr;
};

struct Timing {
  std::vector<double> seconds;            // per candidate (inf where it failed)
  std::vector<bool> warm_up_only;         // given up after its warm-up
  std::vector<std::exception_ptr> failed;
  size_t winner = 0;                      // by the threshold
  std::string note;                       // "a 12.5 us, b 9.1 us", for reports
};

// Times `candidates` (the first is the default) by kTimingRule and picks the
// winner. Throws the first candidate's error if every one fails.
Timing TimeCandidates(const std::vector<TimedCandidate>& candidates);

// Seconds of `run` alone by the rule's warm-up and repeats (for choices that
// time their candidates one after another): stops early after a timed run
// slower than `give_up_above`.
double SecondsOf(const std::function<void()>& run,
                 double give_up_above = std::numeric_limits<double>::infinity());

// Whether a rival timed `rival_seconds` replaces a default timed
// `default_seconds`: faster by the rule's margin.
bool BeatsDefault(double rival_seconds, double default_seconds);

}  // namespace metafuse::runtime
