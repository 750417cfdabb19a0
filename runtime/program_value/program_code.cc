#include "runtime/program_value/program_code.h"

#include <sstream>

#include <torch/version.h>

#include "runtime/base/revolve_schedule.h"

namespace metafuse::runtime {
namespace {

void Registers(std::ostream& os, const std::vector<int64_t>& regs) {
  for (size_t k = 0; k < regs.size(); ++k) os << (k ? ", " : "") << "%" << regs[k];
}

template <typename T>
void List(std::ostream& os, const std::vector<T>& xs) {
  os << "[";
  for (size_t k = 0; k < xs.size(); ++k) os << (k ? ", " : "") << xs[k];
  os << "]";
}

void DTypes(std::ostream& os, const std::vector<c10::ScalarType>& xs) {
  os << "[";
  for (size_t k = 0; k < xs.size(); ++k) os << (k ? ", " : "") << c10::toString(xs[k]);
  os << "]";
}

// Tensors by type and sizes only (the serialized form holds their data).
void Constant(std::ostream& os, const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      os << "undefined tensor";
      return;
    }
    os << "tensor " << c10::toString(t.scalar_type()) << t.sizes();
    if (t.numel() == 1) os << " = " << t.item().toDouble();
    return;
  }
  os << v;
}

}  // namespace

const char* InstructionKindName(InstructionKind kind) {
  switch (kind) {
    case InstructionKind::kOperator: return "op";
    case InstructionKind::kListConstruct: return "list";
    case InstructionKind::kListUnpack: return "unpack";
    case InstructionKind::kTupleConstruct: return "tuple";
    case InstructionKind::kFusedKernel: return "kernel";
    case InstructionKind::kGemm: return "gemm";
    case InstructionKind::kReduction: return "reduce";
  }
  return "?";
}

std::vector<int64_t> InputSignature(const std::vector<c10::IValue>& inputs) {
  std::vector<int64_t> sig;
  sig.reserve(inputs.size() * 8);
  for (const c10::IValue& v : inputs) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) {
        sig.push_back(-1);
        continue;
      }
      sig.push_back(static_cast<int64_t>(t.scalar_type()));
      sig.push_back(static_cast<int64_t>(t.device().type()) * 1024 + t.device().index());
      sig.push_back(t.dim());
      for (int64_t s : t.sizes()) sig.push_back(s);
      for (int64_t s : t.strides()) sig.push_back(s);
    } else if (v.isInt()) {
      sig.push_back(-2);
      sig.push_back(v.toInt());
    } else {
      sig.push_back(-3);
    }
  }
  return sig;
}

std::map<std::string, std::string> CurrentVersions() {
  return {{"format", "metafuse-program 6"},
          {"metafuse", "0.1.0"},
          {"libtorch", TORCH_VERSION}};
}

std::string Dump(const ProgramCode& code) {
  std::ostringstream os;
  os << "program " << code.label << " (" << code.num_registers << " registers)\n";
  os << "  inputs: ";
  Registers(os, code.input_registers);
  os << "\n  outputs: ";
  Registers(os, code.output_registers);
  os << "\n";
  for (const auto& [reg, value] : code.constants) {
    os << "  const %" << reg << " = ";
    Constant(os, value);
    os << "\n";
  }
  for (size_t i = 0; i < code.instructions.size(); ++i) {
    const InstructionCode& ins = code.instructions[i];
    os << "  " << i << ": ";
    Registers(os, ins.outputs);
    os << " = " << InstructionKindName(ins.kind) << " " << ins.name;
    if (ins.plan >= 0) os << " #" << ins.plan;
    os << "(";
    Registers(os, ins.inputs);
    os << ")";
    if (!ins.schema.empty() && ins.schema != ins.name) os << "  ; " << ins.schema;
    os << "\n";
  }
  for (size_t k = 0; k < code.kernels.size(); ++k) {
    const KernelCode& kc = code.kernels[k];
    os << "  kernel #" << k << " " << kc.name << ": inputs ";
    DTypes(os, kc.input_dtypes);
    os << " access ";
    List(os, kc.input_access);
    os << " inner ";
    List(os, kc.input_inner);
    os << " mid ";
    List(os, kc.input_mid);
    os << ", outputs ";
    DTypes(os, kc.output_dtypes);
    os << ", " << kc.num_scalars << " scalars"
       << (kc.cuda_source.empty() ? "" : ", CUDA") << "\n";
    std::istringstream ir(kc.kernel_ir);
    for (std::string line; std::getline(ir, line);) os << "    | " << line << "\n";
  }
  for (size_t k = 0; k < code.launches.size(); ++k) {
    const LaunchPlan& l = code.launches[k];
    os << "  launch #" << k << ": kernel #" << l.kernel << " x" << l.segments << " binding ";
    List(os, l.binding);
    os << " tensors ";
    List(os, std::vector<int>(l.is_tensor.begin(), l.is_tensor.end()));
    os << " in ";
    DTypes(os, l.input_dtypes);
    os << " out ";
    DTypes(os, l.output_dtypes);
    os << " numel ";
    List(os, l.numel);
    os << " reuse ";
    List(os, l.reuse);
    for (const LaunchPlan::Reduction& r : l.reductions) {
      os << " sum(out " << r.source << ", access " << r.access << ", inner " << r.inner
         << ", mid " << r.mid << ", scale " << r.scale << ") -> ";
      List(os, r.out_sizes);
    }
    if (l.scratch > 0) os << " scratch " << l.scratch;
    if (!l.pool.empty()) {
      os << " max_pool ";
      List(os, l.pool);
    }
    os << "\n";
  }
  for (size_t k = 0; k < code.gemms.size(); ++k) {
    const GemmPlan& g = code.gemms[k];
    os << "  gemm #" << k << ": trans_a " << g.trans_a << " trans_b " << g.trans_b
       << " accumulate " << g.accumulate << "\n";
  }
  for (size_t k = 0; k < code.reductions.size(); ++k) {
    const ReductionPlan& r = code.reductions[k];
    os << "  reduction #" << k << ": form " << static_cast<int64_t>(r.form) << " mean "
       << r.mean << " out ";
    List(os, r.out_sizes);
    os << " else " << r.fallback_schema << "\n";
  }
  return os.str();
}

std::string Dump(const CompiledProgram& program) {
  std::ostringstream os;
  os << "compiled program: " << program.num_inputs << " inputs, " << program.num_outputs
     << " outputs, differentiable inputs ";
  List(os, program.differentiable_inputs);
  os << "\n  guard ";
  List(os, program.guard);
  os << "\n";
  for (const auto& [k, v] : program.versions) os << "  version " << k << ": " << v << "\n";
  const LoopSection& loop = program.loop;
  if (loop.steps > 0) {
    os << "loop: " << loop.steps << " steps of the body below; memory ";
    if (loop.memory_budget < 0) {
      os << "every step's saved values kept";
    } else if (loop.memory_budget == 0) {
      os << "auto (binomial checkpointing, " << AutoSnapshots(loop.steps) << " snapshots)";
    } else {
      os << loop.memory_budget << " bytes (binomial checkpointing, snapshots as fit)";
    }
    os << "\n  state from inputs ";
    List(os, loop.state_inputs);
    os << " zeros ";
    List(os, loop.state_zeros);
    os << "\n  fixed inputs ";
    List(os, loop.fixed_inputs);
    os << "\n  per-step tables " << loop.per_step.size() << ", body gradients ";
    List(os, loop.body_differentiable_inputs);
    os << "\n  results " << loop.num_results << (loop.return_losses ? " and losses" : "") << "\n";
  }
  os << Dump(program.forward) << Dump(program.backward);
  return os.str();
}

}  // namespace metafuse::runtime
