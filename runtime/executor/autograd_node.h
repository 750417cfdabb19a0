// A compiled program run as one autograd node: its forward program computes
// the outputs (and the values its backward needs), its backward program is
// the node's backward, so `loss.backward()` reaches the inputs through the
// compiled meta-backward.
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "runtime/executor/executable_program.h"

namespace metafuse::runtime {

// Runs `program` on `inputs` as one autograd node; a loop's program
// (program->loop.steps > 0) as loop_node.h's loop. `forward_outputs`, when
// given, are the outputs of a forward run that already happened on these
// inputs (a specialization runs its first forward itself; not for loops).
std::vector<at::Tensor> RunDifferentiable(std::shared_ptr<const ExecutableProgram> program,
                                          const std::vector<at::Tensor>& inputs,
                                          std::vector<c10::IValue> forward_outputs = {});

}  // namespace metafuse::runtime
