#include "metafuse/optim/schedules.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

namespace metafuse::optim {
namespace {

void CheckSteps(int64_t transition_steps, int64_t transition_begin) {
  TORCH_CHECK(transition_steps > 0, "`transition_steps` must be > 0, got ",
              transition_steps);
  TORCH_CHECK(transition_begin >= 0, "`transition_begin` must be >= 0, got ",
              transition_begin);
}

}  // namespace

Schedule PolynomialSchedule(double init_value, double end_value, double power,
                            int64_t transition_steps,
                            int64_t transition_begin) {
  CheckSteps(transition_steps, transition_begin);
  return [=](int64_t count) {
    const double t = std::clamp<double>(count - transition_begin, 0.0,
                                        static_cast<double>(transition_steps));
    const double frac = 1.0 - t / static_cast<double>(transition_steps);
    return (init_value - end_value) * std::pow(frac, power) + end_value;
  };
}

Schedule LinearSchedule(double init_value, double end_value,
                        int64_t transition_steps, int64_t transition_begin) {
  return PolynomialSchedule(init_value, end_value, 1.0, transition_steps,
                            transition_begin);
}

Schedule ExponentialDecay(double init_value, double decay_rate,
                          int64_t transition_steps, int64_t transition_begin,
                          bool staircase, double end_value,
                          bool has_end_value) {
  CheckSteps(transition_steps, transition_begin);
  TORCH_CHECK(decay_rate > 0, "`decay_rate` must be > 0, got ", decay_rate);
  return [=](int64_t count) {
    double p = std::max<double>(count - transition_begin, 0.0) /
               static_cast<double>(transition_steps);
    if (staircase) p = std::floor(p);
    double value = init_value * std::pow(decay_rate, p);
    if (has_end_value) {
      // Decay stops at end_value; growth (decay_rate > 1) is capped there.
      value = decay_rate < 1.0 ? std::max(value, end_value)
                               : std::min(value, end_value);
    }
    return value;
  };
}

}  // namespace metafuse::optim
