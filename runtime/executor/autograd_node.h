// A compiled program run as one autograd node: its forward program computes
// the outputs (and the values its backward needs), its backward program is
// the node's backward, so `loss.backward()` reaches the inputs through the
// compiled meta-backward.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "runtime/executor/program.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

// A CompiledProgram with both of its executors built.
struct ExecutableProgram {
  explicit ExecutableProgram(CompiledProgram program);
  int64_t num_inputs, num_outputs;
  std::vector<int64_t> differentiable_inputs;
  std::vector<int64_t> guard;
  Program forward, backward;
  // The value it was built from, minus the code the executors hold.
  std::map<std::string, std::string> versions;
  // The whole value again (executors keep their ProgramCode).
  CompiledProgram Value() const;
};

// Runs `program` on `inputs` as one autograd node. `forward_outputs`, when
// given, are the outputs of a forward run that already happened on these
// inputs (a specialization runs its first forward itself).
std::vector<at::Tensor> RunDifferentiable(std::shared_ptr<const ExecutableProgram> program,
                                          const std::vector<at::Tensor>& inputs,
                                          std::vector<c10::IValue> forward_outputs = {});

}  // namespace metafuse::runtime
