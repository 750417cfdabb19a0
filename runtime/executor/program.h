// The executor of compiled programs: a ProgramCode (program_code.h) made
// runnable. Construction resolves every instruction once: operators are
// looked up by schema in this process's registry, fused kernels are loaded
// (JIT, process registry, disk cache: fused_kernel_launch.h), GEMM and
// reduction plans become direct calls. Run then pops each instruction's
// inputs from a register file, calls it, writes its outputs, and releases
// registers after their last use. No Python, no autograd engine, no
// TorchScript interpreter, no graph.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

#include "runtime/program_value/program_code.h"
#include "runtime/executor/small_program_threads.h"

namespace metafuse::runtime {

// Sees every instruction's outputs as they are produced (the compiler
// records shapes with it).
using Observer =
    std::function<void(size_t instruction, const c10::IValue* outputs, size_t n)>;

class Program {
 public:
  // Throws c10::Error naming the instruction that cannot be resolved (an
  // operator not registered here, a kernel that does not load).
  explicit Program(ProgramCode code);
  Program(Program&&) = default;

  // Runs the program on `inputs` (one per program input) with autograd off;
  // timed per instruction while a ProfileSession is active on this thread.
  // A register read for the last time is moved, not copied, into its
  // instruction: an operation that finds a tensor argument uniquely owned may
  // reuse its buffer (buffer_ownership.h).
  std::vector<c10::IValue> Run(std::vector<c10::IValue> inputs,
                               const Observer& observer = nullptr) const;

  size_t num_instructions() const { return code_.instructions.size(); }
  size_t num_inputs() const { return code_.input_registers.size(); }
  size_t num_outputs() const { return code_.output_registers.size(); }
  const ProgramCode& code() const { return code_; }
  // One line per instruction, for profiles and debugging.
  std::string Listing() const;

 private:
  struct Step {
    mutable torch::jit::Operation op = nullptr;  // call is non-const
    std::vector<bool> move;     // per input: the register's last read
    std::vector<int64_t> release;  // registers whose last use is here
  };
  // The register file with constants for a run on `device`: the compiler
  // makes tensor constants on the CPU; a run on CUDA tensors uses copies on
  // that device, made once (wrapped-number flags kept, so type promotion is
  // unchanged).
  const std::vector<c10::IValue>& InitialRegisters(c10::Device device) const;

  struct DeviceConstants;
  ProgramCode code_;
  std::vector<Step> steps_;  // one per instruction
  std::vector<c10::IValue> initial_;  // the register file with constants
  std::shared_ptr<DeviceConstants> on_device_;
  ProgramSize size_;  // what decides a run's thread count (small_program_threads.h)
};

}  // namespace metafuse::runtime
