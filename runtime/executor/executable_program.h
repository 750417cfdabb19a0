// A compiled program value with both of its executors built: what the
// autograd nodes run (autograd_node.h, loop_node.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/executor/program.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

struct ExecutableProgram {
  explicit ExecutableProgram(CompiledProgram program);
  int64_t num_inputs, num_outputs;
  std::vector<int64_t> differentiable_inputs;
  std::vector<int64_t> guard;
  Program forward, backward;
  // The value it was built from, minus the code the executors hold.
  std::map<std::string, std::string> versions;
  LoopSection loop;  // steps > 0: forward and backward are a loop's body
  // The whole value again (executors keep their ProgramCode).
  CompiledProgram Value() const;
};

}  // namespace metafuse::runtime
