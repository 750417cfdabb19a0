#include "runtime/executor/program.h"

#include <chrono>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include <ATen/CPUFunctions.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/mobile/type_parser.h>

#include "runtime/executor/buffer_pool.h"
#include "runtime/executor/fused_kernel_launch.h"
#include "runtime/compute/convolution.h"
#include "runtime/compute/gemm.h"
#include "runtime/compute/max_pool.h"
#include "runtime/compute/scatter_add.h"
#include "runtime/executor/small_program_threads.h"
#include "runtime/executor/operator_lookup.h"
#include "runtime/base/profiler.h"
#include "runtime/executor/reduction.h"

namespace metafuse::runtime {
namespace {

// Interpreter built-ins without a registered operator (lists and tuples
// built at run time, e.g. sizes computed by derivative rules).
torch::jit::Operation BuiltinOperation(const InstructionCode& ins) {
  const size_t num_inputs = ins.inputs.size();
  const size_t num_outputs = ins.outputs.size();
  switch (ins.kind) {
    case InstructionKind::kListConstruct: {
      c10::TypePtr element = c10::parseType(ins.schema);
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
    case InstructionKind::kListUnpack:
      return [num_outputs](torch::jit::Stack& stack) {
        c10::impl::GenericList list = stack.back().toList();
        stack.pop_back();
        TORCH_CHECK(list.size() == num_outputs, "metafuse runtime: unpacking a ",
                    list.size(), "-element list into ", num_outputs, " values");
        for (size_t i = 0; i < num_outputs; ++i) stack.push_back(list.get(i));
      };
    case InstructionKind::kTupleConstruct:
      return [num_inputs](torch::jit::Stack& stack) {
        std::vector<c10::IValue> items(stack.end() - num_inputs, stack.end());
        stack.resize(stack.size() - num_inputs);
        stack.emplace_back(c10::ivalue::Tuple::create(std::move(items)));
      };
    default:
      return nullptr;
  }
}

torch::jit::Operation OperationFor(const ProgramCode& code, const InstructionCode& ins) {
  switch (ins.kind) {
    case InstructionKind::kOperator: {
      // Matrix products dominate small meta-learning programs: call the CPU
      // kernel directly instead of through the boxed dispatcher.
      if (ins.schema.rfind("aten::mm(", 0) == 0) {
        return [](torch::jit::Stack& stack) {
          at::Tensor b = std::move(stack.back()).toTensor();
          stack.pop_back();
          at::Tensor a = std::move(stack.back()).toTensor();
          stack.back() = a.is_cpu() && b.is_cpu() ? at::cpu::mm(a, b) : a.mm(b);
        };
      }
      // Convolutions: GEMMs of packed image patches (runtime/compute/convolution.h).
      if (ins.schema.rfind("aten::conv2d(", 0) == 0)
        return MakeConvolutionOperation(false, LookUpOperation(ins.schema));
      if (ins.schema.rfind("aten::conv_transpose2d.input(", 0) == 0)
        return MakeConvolutionOperation(true, LookUpOperation(ins.schema));
      // Pooling: plane by plane (runtime/compute/max_pool.h).
      if (ins.schema.rfind("aten::max_pool2d_with_indices(", 0) == 0)
        return MakeMaxPoolOperation(LookUpOperation(ins.schema));
      // Its gradient: scattered row by row (runtime/compute/scatter_add.h).
      if (ins.schema.rfind("aten::scatter_add(", 0) == 0)
        return MakeScatterAddOperation(LookUpOperation(ins.schema));
      return LookUpOperation(ins.schema);
    }
    case InstructionKind::kFusedKernel: {
      const LaunchPlan& plan = code.launches.at(ins.plan);
      return MakeFusedKernelLaunch(code.kernels.at(plan.kernel), plan);
    }
    case InstructionKind::kGemm:
      return MakeGemmOperation(code.gemms.at(ins.plan));
    case InstructionKind::kReduction:
      return MakeReductionOperation(code.reductions.at(ins.plan), ins.inputs.size());
    default:
      return BuiltinOperation(ins);
  }
}

// The device a run happens on: the first non-CPU tensor input's, else the CPU.
c10::Device RunDevice(const std::vector<c10::IValue>& inputs) {
  for (const c10::IValue& v : inputs) {
    if (v.isTensor() && v.toTensor().defined() && !v.toTensor().is_cpu()) {
      return v.toTensor().device();
    }
  }
  return c10::Device(c10::kCPU);
}

}  // namespace

struct Program::DeviceConstants {
  std::mutex mu;
  std::unordered_map<c10::Device, std::vector<c10::IValue>> registers;  // node-based: references stay valid
};

const std::vector<c10::IValue>& Program::InitialRegisters(c10::Device device) const {
  if (device.is_cpu()) return initial_;
  std::lock_guard<std::mutex> lock(on_device_->mu);
  auto it = on_device_->registers.find(device);
  if (it != on_device_->registers.end()) return it->second;
  std::vector<c10::IValue> moved = initial_;
  for (const auto& [reg, value] : code_.constants) {
    if (!value.isTensor() || !value.toTensor().defined()) continue;
    const at::Tensor& t = value.toTensor();
    at::Tensor copy = t.to(device);
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
      copy.unsafeGetTensorImpl()->set_wrapped_number(true);
    }
    moved[reg] = copy;
  }
  return on_device_->registers.emplace(device, std::move(moved)).first->second;
}

Program::Program(ProgramCode code)
    : code_(std::move(code)), on_device_(std::make_shared<DeviceConstants>()) {
  // All host kernels at once: the C++ back end compiles them in one compiler run.
  try {
    LoadKernels(code_);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "metafuse runtime: program '", code_.label, "': ", e.what_without_backtrace());
  }
  steps_.resize(code_.instructions.size());
  for (size_t i = 0; i < code_.instructions.size(); ++i) {
    const InstructionCode& ins = code_.instructions[i];
    try {
      steps_[i].op = OperationFor(code_, ins);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "metafuse runtime: program '", code_.label, "' instruction ", i, " (",
                  ins.name, "): ", e.what_without_backtrace());
    }
    TORCH_CHECK(steps_[i].op, "metafuse runtime: program '", code_.label, "' instruction ", i,
                " (", ins.name, ") has no operation");
  }
  size_ = SizeOf(code_);
  initial_.resize(code_.num_registers);
  std::vector<bool> keep(code_.num_registers, false);
  for (const auto& [reg, value] : code_.constants) {
    initial_[reg] = value;
    keep[reg] = true;
  }
  for (int64_t r : code_.output_registers) keep[r] = true;

  // Liveness: release each non-constant, non-output register after the
  // instruction that reads it last, so intermediates are freed early.
  std::vector<int64_t> last_use(code_.num_registers, -1);
  for (size_t i = 0; i < code_.instructions.size(); ++i) {
    for (int64_t r : code_.instructions[i].inputs) last_use[r] = static_cast<int64_t>(i);
  }
  for (int64_t r = 0; r < code_.num_registers; ++r) {
    if (!keep[r] && last_use[r] >= 0) steps_[last_use[r]].release.push_back(r);
  }
  // A released register is moved into its last read (the last position if
  // the instruction reads it twice).
  for (size_t i = 0; i < steps_.size(); ++i) {
    const auto& inputs = code_.instructions[i].inputs;
    steps_[i].move.assign(inputs.size(), false);
    for (int64_t r : steps_[i].release) {
      for (size_t k = inputs.size(); k-- > 0;) {
        if (inputs[k] == r) {
          steps_[i].move[k] = true;
          break;
        }
      }
    }
  }
}

std::vector<c10::IValue> Program::Run(std::vector<c10::IValue> inputs,
                                      const Observer& observer) const {
  TORCH_CHECK(inputs.size() == code_.input_registers.size(), "compiled program '",
              code_.label, "' takes ", code_.input_registers.size(), " inputs, got ",
              inputs.size());
  // The program is differentiated symbolically; the autograd engine has no
  // business inside it.
  torch::autograd::AutoGradMode no_grad(false);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  OneThreadScope one_thread(IsSmallRun(size_, inputs));
  InstallBufferPool();
  ProgramAllocationScope pooled;
  std::vector<c10::IValue> registers = InitialRegisters(RunDevice(inputs));
  for (size_t i = 0; i < inputs.size(); ++i) {
    registers[code_.input_registers[i]] = std::move(inputs[i]);
  }
  torch::jit::Stack stack;
  ProfileSession* profile = ProfileSession::Active();
  for (size_t index = 0; index < steps_.size(); ++index) {
    const Step& step = steps_[index];
    const InstructionCode& ins = code_.instructions[index];
    stack.clear();
    for (size_t k = 0; k < ins.inputs.size(); ++k) {
      if (step.move[k]) {
        stack.push_back(std::move(registers[ins.inputs[k]]));
      } else {
        stack.push_back(registers[ins.inputs[k]]);
      }
    }
    if (profile != nullptr) {
      const auto start = std::chrono::steady_clock::now();
      step.op(stack);
      profile->Record(code_.label, ins.name, static_cast<int64_t>(index), start,
                      std::chrono::steady_clock::now());
    } else {
      step.op(stack);
    }
    TORCH_CHECK(stack.size() == ins.outputs.size(), "metafuse runtime: ", ins.name,
                " returned ", stack.size(), " values, expected ", ins.outputs.size());
    if (observer) observer(index, stack.data(), stack.size());
    for (size_t k = 0; k < ins.outputs.size(); ++k) {
      registers[ins.outputs[k]] = std::move(stack[k]);
    }
    for (int64_t r : step.release) registers[r] = c10::IValue();
  }
  std::vector<c10::IValue> outputs;
  outputs.reserve(code_.output_registers.size());
  for (int64_t r : code_.output_registers) outputs.push_back(registers[r]);
  return outputs;
}

std::string Program::Listing() const {
  std::ostringstream os;
  for (size_t i = 0; i < code_.instructions.size(); ++i) {
    const InstructionCode& ins = code_.instructions[i];
    os << i << ": " << ins.name << "(";
    for (size_t k = 0; k < ins.inputs.size(); ++k) os << (k ? ", " : "") << "%" << ins.inputs[k];
    os << ") -> ";
    for (size_t k = 0; k < ins.outputs.size(); ++k) {
      os << (k ? ", " : "") << "%" << ins.outputs[k];
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace metafuse::runtime
