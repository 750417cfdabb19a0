// Learning-rate schedules (Optax semantics): functions of the step count.
#pragma once

#include "metafuse/optim/gradient_transformation.h"

namespace metafuse::optim {

// init -> end linearly over transition_steps, starting at transition_begin.
Schedule LinearSchedule(double init_value, double end_value,
                        int64_t transition_steps, int64_t transition_begin);
// (init - end) * (1 - t / transition_steps)^power + end.
Schedule PolynomialSchedule(double init_value, double end_value, double power,
                            int64_t transition_steps, int64_t transition_begin);
// init * decay_rate^(t / transition_steps), optionally staircase, clipped at
// end_value when it is set (> 0 clips from below for decay, above for growth).
Schedule ExponentialDecay(double init_value, double decay_rate,
                          int64_t transition_steps, int64_t transition_begin,
                          bool staircase, double end_value, bool has_end_value);

}  // namespace metafuse::optim
