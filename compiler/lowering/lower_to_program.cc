#include "compiler/lowering/lower_to_program.h"

#include <mutex>
#include <unordered_map>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>

#include "compiler/codegen/cuda_printer.h"
#include "compiler/codegen/llvm_printer.h"
#include "compiler/fusion/fusion_group.h"
#include "compiler/ir/ir_helpers.h"
#include "compiler/lowering/lower_fusion_group.h"
#include "compiler/lowering/lower_matmul.h"

namespace metafuse::compiler {
namespace {

namespace aten = torch::jit::aten;
namespace prim = torch::jit::prim;
using runtime::InstructionKind;
using torch::jit::Node;
using torch::jit::Value;

// A schema's canonical text, printed once per process: schemas belong to
// registered operators (stable addresses), and printing one costs more than
// lowering its node.
const std::string& SchemaText(const c10::FunctionSchema& schema) {
  static std::mutex mu;
  static auto* texts = new std::unordered_map<const c10::FunctionSchema*, std::string>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = texts->find(&schema);
  if (it == texts->end()) it = texts->emplace(&schema, c10::toString(schema)).first;
  return it->second;
}

std::vector<int64_t> ConcreteSizes(const Value* v) {
  auto type = v->type()->cast<c10::TensorType>();
  TORCH_CHECK(type && type->sizes().concrete_sizes(), "metafuse lowering: value %",
              v->debugName(), " has no complete shape");
  return *type->sizes().concrete_sizes();
}

// A reduction over one run of adjacent dims (dims of size 1 aside) is the
// middle of [outer, reduce, inner]: sum_to_size to a shape with ones in a
// run, or sum / mean over constant dims with no dtype. Anything else stays
// ATen's.
std::optional<runtime::ReductionPlan> BlockReductionPlan(const Node* node,
                                                         const std::vector<int64_t>& in_sizes,
                                                         runtime::ReductionPlan plan) {
  const int64_t rank = static_cast<int64_t>(in_sizes.size());
  auto dims = ReducedDims(node, rank);
  if (!dims) return std::nullopt;
  const std::vector<bool>& reduced = *dims;
  plan.mean = node->kind() == aten::mean;
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d] || in_sizes[d] == 1) continue;
    if (first < 0) first = d;
    last = d;
  }
  if (first < 0) return std::nullopt;  // nothing summed: a copy, ATen's
  int64_t outer = 1, reduce = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < first) {
      outer *= in_sizes[d];
    } else if (d > last) {
      inner *= in_sizes[d];
    } else {
      if (!reduced[d] && in_sizes[d] != 1) return std::nullopt;  // not one run
      reduce *= in_sizes[d];
    }
  }
  int64_t out_numel = 1;
  for (int64_t s : plan.out_sizes) out_numel *= s;
  if (out_numel != outer * inner) return std::nullopt;
  plan.form = runtime::ReductionPlan::kBlock;
  plan.block = {outer, reduce, inner};
  return plan;
}

// The plain-loop form of a small reduction, or nullopt.
std::optional<runtime::ReductionPlan> ReductionPlanFor(const Node* node) {
  if (node->kind() != aten::sum && node->kind() != aten::mean &&
      node->kind() != aten::sum_to_size) {
    return std::nullopt;
  }
  if (node->inputs().empty() || node->outputs().size() != 1 || !node->maybeSchema()) {
    return std::nullopt;
  }
  auto in_type = node->input(0)->type()->cast<c10::TensorType>();
  auto out_type = node->output()->type()->cast<c10::TensorType>();
  if (!in_type || !out_type || !in_type->isComplete() || !out_type->isComplete()) {
    return std::nullopt;
  }
  const auto in_sizes = *in_type->sizes().concrete_sizes();
  const auto out_sizes = *out_type->sizes().concrete_sizes();
  runtime::ReductionPlan plan;
  plan.out_sizes = out_sizes;
  plan.fallback_schema = SchemaText(node->schema());
  if (node->kind() == aten::sum || node->kind() == aten::mean) {
    // Over some dims: sum / mean(x, dims, keepdim, dtype=None).
    if (node->inputs().size() == 4) return BlockReductionPlan(node, in_sizes, std::move(plan));
    // Full reduction, no dtype argument: sum(x, None) / mean(x, None).
    if (node->inputs().size() != 2 || !torch::jit::toIValue(node->input(1)) ||
        !torch::jit::toIValue(node->input(1))->isNone()) {
      return std::nullopt;
    }
    plan.form = runtime::ReductionPlan::kAll;
    plan.mean = node->kind() == aten::mean;
    return plan;
  }
  if (in_sizes.size() != 2) return BlockReductionPlan(node, in_sizes, std::move(plan));
  const int64_t m = in_sizes[0], n = in_sizes[1];
  if ((out_sizes == std::vector<int64_t>{n} || out_sizes == std::vector<int64_t>{1, n}) &&
      m > 1) {
    plan.form = runtime::ReductionPlan::kRows;
  } else if (out_sizes == std::vector<int64_t>{m, 1} && n > 1) {
    plan.form = runtime::ReductionPlan::kColumns;
  } else if (out_type->numel().value_or(-1) == 1) {
    plan.form = runtime::ReductionPlan::kAll;
  } else {
    return std::nullopt;
  }
  return plan;
}

// A list of constant numbers (sizes after shape specialization) is a
// constant itself, not an instruction building it at every run; no
// operation of a program mutates a list it reads.
std::optional<c10::IValue> ConstantList(const Node* node) {
  if (node->kind() != prim::ListConstruct) return std::nullopt;
  const auto element = node->output()->type()->expectRef<c10::ListType>().getElementType();
  if (element->kind() != c10::TypeKind::IntType && element->kind() != c10::TypeKind::FloatType &&
      element->kind() != c10::TypeKind::BoolType) {
    return std::nullopt;
  }
  for (const Value* in : node->inputs()) {
    if (in->node()->kind() != prim::Constant) return std::nullopt;
  }
  auto values = torch::jit::runNodeIfInputsAreConstant(node);
  if (!values || values->size() != 1) return std::nullopt;
  return (*values)[0];
}

class Lowering {
 public:
  Lowering(const std::string& label, const LoweringOptions& options) : options_(options) {
    code_.label = label;
  }

  runtime::ProgramCode Run(const torch::jit::Graph& graph,
                           std::vector<const Node*>* nodes) {
    for (const Value* in : graph.inputs()) code_.input_registers.push_back(Allocate(in));
    for (const Node* node : graph.nodes()) {
      if (node->kind() == prim::Constant) {
        auto value = torch::jit::toIValue(node->output());
        TORCH_CHECK(value.has_value(), "metafuse lowering: unreadable constant %",
                    node->output()->debugName());
        code_.constants.emplace_back(Allocate(node->output()), *value);
        continue;
      }
      if (auto list = ConstantList(node)) {
        code_.constants.emplace_back(Allocate(node->output()), *std::move(list));
        continue;
      }
      runtime::InstructionCode ins = Instruction(node);
      for (const Value* in : node->inputs()) ins.inputs.push_back(reg_.at(in));
      for (const Value* out : node->outputs()) ins.outputs.push_back(Allocate(out));
      code_.instructions.push_back(std::move(ins));
      if (nodes != nullptr) nodes->push_back(node);
    }
    for (const Value* out : graph.outputs()) code_.output_registers.push_back(reg_.at(out));
    return std::move(code_);
  }

 private:
  int64_t Allocate(const Value* v) {
    reg_[v] = code_.num_registers;
    return code_.num_registers++;
  }

  runtime::InstructionCode Instruction(const Node* node) {
    runtime::InstructionCode ins;
    ins.name = node->kind().toQualString();
    if (node->kind() == FusionGroupKind()) {
      ins.kind = InstructionKind::kFusedKernel;
      ins.plan = Launch(node, &ins.name);
    } else if (node->kind() == GemmKind()) {
      runtime::GemmPlan g;
      g.trans_a = node->i(c10::Symbol::attr("trans_a")) != 0;
      g.trans_b = node->i(c10::Symbol::attr("trans_b")) != 0;
      // A third input is an accumulator: C = acc + op(A) op(B).
      g.accumulate = node->inputs().size() == 3;
      ins.kind = InstructionKind::kGemm;
      ins.name = std::string("gemm_") + (g.trans_a ? "t" : "n") + (g.trans_b ? "t" : "n");
      ins.plan = static_cast<int64_t>(code_.gemms.size());
      code_.gemms.push_back(g);
    } else if (auto reduction = options_.plain_reductions ? ReductionPlanFor(node)
                                                          : std::nullopt) {
      ins.kind = InstructionKind::kReduction;
      ins.plan = static_cast<int64_t>(code_.reductions.size());
      code_.reductions.push_back(*std::move(reduction));
    } else if (node->kind() == prim::ListConstruct) {
      ins.kind = InstructionKind::kListConstruct;
      ins.schema =
          node->output()->type()->expectRef<c10::ListType>().getElementType()->annotation_str();
    } else if (node->kind() == prim::ListUnpack) {
      ins.kind = InstructionKind::kListUnpack;
    } else if (node->kind() == prim::TupleConstruct) {
      ins.kind = InstructionKind::kTupleConstruct;
    } else {
      const c10::FunctionSchema* schema = node->maybeSchema();
      TORCH_CHECK(schema != nullptr && !schema->is_vararg(), "metafuse lowering: ", ins.name,
                  " has no registered operator schema; it cannot be part of a compiled program");
      ins.kind = InstructionKind::kOperator;
      ins.schema = SchemaText(*schema);
    }
    return ins;
  }

  // The launch plan of a fusion group (its kernel added once per program).
  int64_t Launch(const Node* group, std::string* name) {
    auto lowered = LowerFusionGroup(group);
    TORCH_CHECK(lowered.ok(), "metafuse: cannot lower fusion group: ",
                lowered.status().ToString(), "; its subgraph:\n",
                *group->g(torch::jit::attr::Subgraph));
    const FusedKernelPlan& fused = *lowered;
    runtime::LaunchPlan plan;
    auto known = kernel_index_.find(fused.kernel.name);
    if (known == kernel_index_.end()) {
      // The group's device picks the printer: CUDA source for NVRTC, LLVM IR
      // for the host JIT (IsFusibleNode fuses nothing else).
      const auto device = group->output(0)->type()->expectRef<c10::TensorType>().device();
      auto kernel = device && device->is_cuda() ? codegen::CudaKernelCode(fused.kernel)
                                                : codegen::HostKernelCode(fused.kernel);
      TORCH_CHECK(kernel.ok(), "metafuse: cannot print fused kernel ", fused.kernel.name, ": ",
                  kernel.status().ToString());
      known = kernel_index_.emplace(fused.kernel.name, code_.kernels.size()).first;
      code_.kernels.push_back(*std::move(kernel));
    }
    plan.kernel = known->second;
    plan.segments = group->hasAttribute(SegmentsAttr()) ? group->i(SegmentsAttr()) : 1;
    plan.binding.assign(fused.binding.begin(), fused.binding.end());
    plan.is_tensor = fused.is_tensor;
    plan.input_dtypes = fused.input_dtypes;
    plan.output_dtypes = fused.output_dtypes;
    const size_t outputs_per_segment = group->g(torch::jit::attr::Subgraph)->outputs().size();
    for (int64_t s = 0; s < plan.segments; ++s) {
      const Value* first = group->outputs()[s * outputs_per_segment];
      plan.out_sizes.push_back(ConcreteSizes(first));
      plan.numel.push_back(*first->type()->expectRef<c10::TensorType>().numel());
    }
    if (group->hasAttribute(ReuseAttr())) plan.reuse = group->is(ReuseAttr());
    plan.reuse.resize(plan.segments * outputs_per_segment, -1);
    if (group->hasAttribute(ReduceAttr())) {
      const std::vector<int64_t> reduce = group->is(ReduceAttr());
      const std::vector<double> scales = group->fs(ReduceScaleAttr());
      TORCH_CHECK(plan.segments == 1 && reduce.size() == 4 * scales.size() &&
                      group->outputs().size() == outputs_per_segment + scales.size(),
                  "metafuse lowering: inconsistent reductions of fusion group ", fused.kernel.name);
      for (size_t r = 0; r < scales.size(); ++r) {
        runtime::LaunchPlan::Reduction red;
        red.source = reduce[4 * r];
        red.access = reduce[4 * r + 1];
        red.inner = reduce[4 * r + 2];
        red.mid = reduce[4 * r + 3];
        red.scale = scales[r];
        red.out_sizes = ConcreteSizes(group->output(outputs_per_segment + r));
        plan.reductions.push_back(std::move(red));
      }
      plan.scratch = group->hasAttribute(ScratchAttr()) ? group->i(ScratchAttr()) : 0;
    }
    if (group->hasAttribute(PoolAttr())) {
      plan.pool = group->is(PoolAttr());
      TORCH_CHECK(plan.segments == 1 && plan.reductions.empty() && outputs_per_segment == 1 &&
                      group->outputs().size() == 3,
                  "metafuse lowering: inconsistent max-pool of fusion group ", fused.kernel.name);
    }
    // Profiles show the kernel (and its segment count) instead of the node kind.
    *name = fused.kernel.name.substr(0, 14) +
            (plan.segments > 1 ? "[x" + std::to_string(plan.segments) + "]" : "") +
            (plan.reductions.empty() ? "" : "+sum" + std::to_string(plan.reductions.size())) +
            (plan.pool.empty() ? "" : "+pool");
    code_.launches.push_back(std::move(plan));
    return static_cast<int64_t>(code_.launches.size()) - 1;
  }

  LoweringOptions options_;
  runtime::ProgramCode code_;
  std::unordered_map<const Value*, int64_t> reg_;
  std::unordered_map<std::string, size_t> kernel_index_;
};

}  // namespace

runtime::ProgramCode LowerToProgram(const torch::jit::Graph& graph, const std::string& label,
                                    const LoweringOptions& options,
                                    std::vector<const Node*>* nodes) {
  return Lowering(label, options).Run(graph, nodes);
}

runtime::Program MakeProgram(const torch::jit::Graph& graph, const std::string& label,
                             const LoweringOptions& options) {
  return runtime::Program(LowerToProgram(graph, label, options));
}

}  // namespace metafuse::compiler
