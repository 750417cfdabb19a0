#include "runtime/program.h"

#include <chrono>

#include "runtime/profiler.h"

#include <sstream>
#include <unordered_map>

#include <ATen/CPUFunctions.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/ir/constants.h>

namespace metafuse::runtime {

using torch::jit::Node;
using torch::jit::Value;

namespace {

// Interpreter built-ins without a registered operator (lists and tuples
// built at run time, e.g. sizes computed by derivative rules).
torch::jit::Operation OperationOf(Node* node) {
  const size_t num_inputs = node->inputs().size();
  const size_t num_outputs = node->outputs().size();
  switch (node->kind()) {
    case torch::jit::prim::ListConstruct: {
      c10::TypePtr element = node->output()->type()->expectRef<c10::ListType>().getElementType();
      return [element, num_inputs](torch::jit::Stack& stack) {
        c10::impl::GenericList list(element);
        list.reserve(num_inputs);
        for (size_t i = stack.size() - num_inputs; i < stack.size(); ++i) {
          list.push_back(std::move(stack[i]));
        }
        stack.resize(stack.size() - num_inputs);
        stack.emplace_back(std::move(list));
      };
    }
    case torch::jit::prim::ListUnpack:
      return [num_outputs](torch::jit::Stack& stack) {
        c10::impl::GenericList list = stack.back().toList();
        stack.pop_back();
        TORCH_CHECK(list.size() == num_outputs, "metafuse runtime: prim::ListUnpack of a ",
                    list.size(), "-element list into ", num_outputs, " values");
        for (size_t i = 0; i < num_outputs; ++i) stack.push_back(list.get(i));
      };
    case torch::jit::prim::TupleConstruct:
      return [num_inputs](torch::jit::Stack& stack) {
        std::vector<c10::IValue> items(stack.end() - num_inputs, stack.end());
        stack.resize(stack.size() - num_inputs);
        stack.emplace_back(c10::ivalue::Tuple::create(std::move(items)));
      };
    default:
      break;
  }
  // Matrix products dominate small meta-learning programs: call the CPU
  // kernel directly instead of through the boxed dispatcher.
  if (node->kind() == torch::jit::aten::mm) {
    return [](torch::jit::Stack& stack) {
      at::Tensor b = std::move(stack.back()).toTensor();
      stack.pop_back();
      at::Tensor a = std::move(stack.back()).toTensor();
      stack.back() = a.is_cpu() && b.is_cpu() ? at::cpu::mm(a, b) : a.mm(b);
    };
  }
  return node->getOperation();
}

}  // namespace

Program::Program(const std::shared_ptr<torch::jit::Graph>& graph, std::string label,
                 const OperationFactory& factory)
    : graph_(graph), label_(std::move(label)) {
  std::unordered_map<const Value*, int> reg;
  auto allocate = [&](const Value* v) {
    reg[v] = num_registers_;
    return num_registers_++;
  };
  for (const Value* in : graph->inputs()) input_registers_.push_back(allocate(in));
  std::unordered_map<int, c10::IValue> constant_values;
  for (Node* node : graph->nodes()) {
    if (node->kind() == torch::jit::prim::Constant) {
      auto value = torch::jit::toIValue(node->output());
      TORCH_CHECK(value.has_value(), "metafuse runtime: unreadable constant");
      constant_values[allocate(node->output())] = *value;
      continue;
    }
    Instruction ins;
    ins.node = node;
    if (factory) ins.op = factory(node);
    if (!ins.op) ins.op = OperationOf(node);
    // A factory may name what it made (e.g. the fused kernel it launches).
    ins.name = node->hasAttribute(torch::jit::attr::name) ? node->s(torch::jit::attr::name)
                                                          : node->kind().toQualString();
    for (const Value* in : node->inputs()) ins.inputs.push_back(reg.at(in));
    for (const Value* out : node->outputs()) ins.outputs.push_back(allocate(out));
    code_.push_back(std::move(ins));
  }
  for (const Value* out : graph->outputs()) output_registers_.push_back(reg.at(out));
  constants_.resize(num_registers_);
  for (auto& [r, v] : constant_values) constants_[r] = v;

  // Liveness: release each non-constant, non-output register after the
  // instruction that reads it last, so intermediates are freed early.
  std::vector<int> last_use(num_registers_, -1);
  for (size_t i = 0; i < code_.size(); ++i) {
    for (int r : code_[i].inputs) last_use[r] = static_cast<int>(i);
  }
  std::vector<bool> keep(num_registers_, false);
  for (int r : output_registers_) keep[r] = true;
  for (auto& [r, v] : constant_values) keep[r] = true;
  for (int r = 0; r < num_registers_; ++r) {
    if (!keep[r] && last_use[r] >= 0) code_[last_use[r]].release.push_back(r);
  }
  // A released register is moved into its last read (the last position if
  // the instruction reads it twice).
  for (Instruction& ins : code_) {
    ins.move.assign(ins.inputs.size(), false);
    for (int r : ins.release) {
      for (size_t k = ins.inputs.size(); k-- > 0;) {
        if (ins.inputs[k] == r) {
          ins.move[k] = true;
          break;
        }
      }
    }
  }
}

std::vector<c10::IValue> Program::Run(std::vector<c10::IValue> inputs,
                                      const Observer& observer) const {
  TORCH_CHECK(inputs.size() == input_registers_.size(), "compiled program takes ",
              input_registers_.size(), " inputs, got ", inputs.size());
  // The program is differentiated symbolically; the autograd engine has no
  // business inside it.
  torch::autograd::AutoGradMode no_grad(false);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  std::vector<c10::IValue> registers = constants_;
  for (size_t i = 0; i < inputs.size(); ++i) {
    registers[input_registers_[i]] = std::move(inputs[i]);
  }
  torch::jit::Stack stack;
  ProfileSession* profile = ProfileSession::Active();
  for (size_t index = 0; index < code_.size(); ++index) {
    const Instruction& ins = code_[index];
    stack.clear();
    for (size_t k = 0; k < ins.inputs.size(); ++k) {
      if (ins.move[k]) {
        stack.push_back(std::move(registers[ins.inputs[k]]));
      } else {
        stack.push_back(registers[ins.inputs[k]]);
      }
    }
    if (profile != nullptr) {
      const auto start = std::chrono::steady_clock::now();
      ins.op(stack);
      profile->Record(label_, ins.name, static_cast<int64_t>(index), start,
                      std::chrono::steady_clock::now());
    } else {
      ins.op(stack);
    }
    TORCH_CHECK(stack.size() == ins.outputs.size(), "metafuse runtime: ", ins.name,
                " returned ", stack.size(), " values, expected ", ins.outputs.size());
    if (observer) observer(ins.node, stack.data(), stack.size());
    for (size_t k = 0; k < ins.outputs.size(); ++k) {
      registers[ins.outputs[k]] = std::move(stack[k]);
    }
    for (int r : ins.release) registers[r] = c10::IValue();
  }
  std::vector<c10::IValue> outputs;
  outputs.reserve(output_registers_.size());
  for (int r : output_registers_) outputs.push_back(registers[r]);
  return outputs;
}

std::string Program::Listing() const {
  std::ostringstream os;
  for (size_t i = 0; i < code_.size(); ++i) {
    os << i << ": " << code_[i].name << "(";
    for (size_t k = 0; k < code_[i].inputs.size(); ++k) {
      os << (k ? ", " : "") << "%" << code_[i].inputs[k];
    }
    os << ") -> ";
    for (size_t k = 0; k < code_[i].outputs.size(); ++k) {
      os << (k ? ", " : "") << "%" << code_[i].outputs[k];
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace metafuse::runtime
