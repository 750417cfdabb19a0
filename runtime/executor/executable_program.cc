#include "runtime/executor/executable_program.h"

namespace metafuse::runtime {

ExecutableProgram::ExecutableProgram(CompiledProgram program)
    : num_inputs(program.num_inputs),
      num_outputs(program.num_outputs),
      differentiable_inputs(std::move(program.differentiable_inputs)),
      guard(std::move(program.guard)),
      forward(std::move(program.forward)),
      backward(std::move(program.backward)),
      versions(std::move(program.versions)),
      loop(std::move(program.loop)) {}

CompiledProgram ExecutableProgram::Value() const {
  CompiledProgram p;
  p.forward = forward.code();
  p.backward = backward.code();
  p.num_inputs = num_inputs;
  p.num_outputs = num_outputs;
  p.differentiable_inputs = differentiable_inputs;
  p.guard = guard;
  p.versions = versions;
  p.loop = loop;
  return p;
}

}  // namespace metafuse::runtime
