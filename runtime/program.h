// A compiled program: a TorchScript graph lowered to a flat instruction list
// of operator calls over a register file. No Python, no autograd engine, no
// TorchScript interpreter: each instruction pops its inputs from registers,
// calls the operator (ATen or metafuse), and writes its outputs; registers
// are released after their last use.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

namespace metafuse::runtime {

// Supplies the operation of a node the runtime does not know by itself
// (e.g. a fused kernel launch); nullptr means "use the registered operator".
using OperationFactory = std::function<torch::jit::Operation(torch::jit::Node*)>;

// Sees every instruction's outputs as they are produced (shape recording).
using Observer =
    std::function<void(const torch::jit::Node* node, const c10::IValue* outputs, size_t n)>;

class Program {
 public:
  // Lowers `graph`; every node must have a registered operator or an
  // operation from `factory`. `label` names the program in profiles
  // ("forward", "backward"). The program keeps `graph` alive.
  explicit Program(const std::shared_ptr<torch::jit::Graph>& graph,
                   std::string label = "program",
                   const OperationFactory& factory = nullptr);

  // Runs the program on `inputs` (one per graph input) with autograd off;
  // timed per instruction while a ProfileSession is active on this thread.
  // A register read for the last time is moved, not copied, into its
  // instruction: an operation that finds a tensor argument uniquely owned may
  // reuse its buffer (see compiler/plan_buffers.h).
  std::vector<c10::IValue> Run(std::vector<c10::IValue> inputs,
                               const Observer& observer = nullptr) const;

  size_t num_instructions() const { return code_.size(); }
  size_t num_inputs() const { return input_registers_.size(); }
  size_t num_outputs() const { return output_registers_.size(); }
  // One line per instruction, for profiles and debugging.
  std::string Listing() const;

 private:
  struct Instruction {
    mutable torch::jit::Operation op = nullptr;  // call is non-const
    std::string name;
    const torch::jit::Node* node = nullptr;
    std::vector<int> inputs;
    std::vector<bool> move;    // per input: the register's last read
    std::vector<int> outputs;
    std::vector<int> release;  // registers whose last use is here
  };
  std::shared_ptr<torch::jit::Graph> graph_;
  std::vector<Instruction> code_;
  std::vector<c10::IValue> constants_;  // initial register file (constants)
  std::vector<int> input_registers_;
  std::vector<int> output_registers_;
  int num_registers_ = 0;
  std::string label_;
};

}  // namespace metafuse::runtime
