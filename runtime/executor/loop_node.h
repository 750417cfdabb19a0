// An inner loop run as a loop: one compiled step (the body), run K times in
// the forward, and the reverse loop in the backward, as one autograd node.
//
// The body is an ExecutableProgram whose forward takes
//     state (carried from step to step), fixed (the same every step),
//     per step (row k of the loop's tables at step k)
// and returns the next state and the step's loss, then the values its
// backward reads (saved). Its backward takes (saved..., cotangents of next
// state and loss) and returns the gradients of the loop's
// body_differentiable_inputs: the whole state first, then fixed ones. How
// the loop's inputs feed the body is the LoopSection
// (runtime/program_value/program_code.h), part of the program value.
//
// Memory: with no budget every step's saved values are kept (what an
// unrolled program keeps). With a budget the state is kept only at
// snapshots on the binomial schedule (revolve_schedule.h) and the backward
// runs the steps between them again: the same program on the same inputs,
// so the gradients have the same bits as with everything stored.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "runtime/executor/executable_program.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

// What a run decided and did (the last run's, for the program dump and
// profiles).
struct LoopSchedule {
  int64_t steps = 0;
  bool store_all = true;
  int64_t snapshots = 0;            // with store_all false, the initial state included
  int64_t state_bytes = 0;          // one snapshot
  int64_t saved_bytes_per_step = 0;  // one step's saved values
  int64_t planned_recomputed_steps = 0;  // MinimalAdvances minus the forward's share
  int64_t recomputed_steps = 0;      // counted in the last backward
  int64_t kept_bytes = 0;            // peak of snapshots + saved values held for the backward
  std::string Describe() const;
};

// Runs the loop on `inputs` (the loop's own: what state_inputs and
// fixed_inputs index) as one autograd node; returns the results (and the
// losses). `schedule`, if given, receives the run's schedule (and, after
// the backward, its count of recomputed steps).
std::vector<at::Tensor> RunLoopDifferentiable(std::shared_ptr<const ExecutableProgram> body,
                                              std::shared_ptr<const LoopSection> loop,
                                              const std::vector<at::Tensor>& inputs,
                                              std::shared_ptr<LoopSchedule> schedule = nullptr);

}  // namespace metafuse::runtime
