// An inner loop run as a loop: one compiled step (the body), run K times in
// the forward, and the reverse loop in the backward, as one autograd node.
//
// The body is an ExecutableProgram whose inputs are
//     state (carried from step to step), fixed (the same every step),
//     per step (row k of the plan's tables at step k)
// and whose outputs are the next state and the step's loss, then the values
// its backward reads (saved). Its backward takes (saved..., cotangents of
// next state and loss) and returns the gradients of its differentiable
// inputs: the whole state first, then some fixed ones.
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

#include "runtime/executor/autograd_node.h"

namespace metafuse::runtime {

// How a loop's inputs feed the body, and how much it may keep.
struct LoopPlan {
  int64_t steps = 1;
  // Body input i < state_init.size() is state slot i; it starts as the
  // loop's input `input`, or as zeros like it.
  struct StateSlot {
    int64_t input = 0;
    bool zeros = false;
  };
  std::vector<StateSlot> state_init;
  std::vector<int64_t> fixed_inputs;  // the loop input of each fixed body input
  // One table per per-step body input: row k ([steps, ...]) is its value at
  // step k.
  std::vector<at::Tensor> per_step;
  int64_t num_results = 0;  // the loop's outputs: the first state slots
  bool return_losses = false;  // then the K losses (0-dim each)
  // Bytes the loop may keep for the backward: < 0 keeps every step, 0 is
  // "auto" (AutoSnapshots), > 0 a budget for snapshots plus one step's
  // saved values (an error if not even that fits).
  int64_t memory_budget = -1;
};

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

// Runs the loop on `inputs` (the loop's own: what state_init and
// fixed_inputs index) as one autograd node; returns the results (and the
// losses). `schedule`, if given, receives the run's schedule (and, after
// the backward, its count of recomputed steps).
std::vector<at::Tensor> RunLoopDifferentiable(std::shared_ptr<const ExecutableProgram> body,
                                              std::shared_ptr<const LoopPlan> plan,
                                              const std::vector<at::Tensor>& inputs,
                                              std::shared_ptr<LoopSchedule> schedule = nullptr);

}  // namespace metafuse::runtime
