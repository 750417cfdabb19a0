// The compiled program as a value.
//
// What the compiler's pipeline (compiler/pipeline.h) produces and the runtime
// runs: a straight-line instruction list over a register file, with
// everything an instruction needs written out (operator schemas, constants,
// fused-kernel code and launch plans, GEMM and reduction plans). It does not
// refer to the TorchScript graph it came from, so it can be dumped as text,
// serialized and read back exactly (program_serialization.h), shipped to
// another process, and its kernels regenerated for another target from the
// kernel IR each KernelCode keeps.
//
// A CompiledProgram is one differentiable function: a forward ProgramCode
// (inputs -> outputs, then the values its backward needs, "saved") and a
// backward ProgramCode (saved..., cotangents... -> one gradient per
// differentiable input), with the guard it was specialized for.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

namespace metafuse::runtime {

// One fused elementwise kernel, as the runtime loads it.
struct KernelCode {
  std::string name;       // the entry symbol is "mf_" + name
  std::string kernel_ir;  // kernel IR text (compiler/codegen/kernel_ir.h): the source of
                          // truth a printer for another target starts from
  std::string llvm_ir;    // LLVM module for the host, what the JIT loads; empty
                          // in a program compiled for CUDA tensors
  // CUDA C++ of the kernel (compiler/codegen/cuda_printer.h), what NVRTC
  // compiles for a program specialized for CUDA tensors; empty for the host.
  std::string cuda_source;
  // The launch contract, checked by JitKernel::Run: per kernel input its
  // dtype, access (0 element, 1 broadcast, 2 inner, 3 outer, 4 middle, 5
  // periodic: codegen::kir::Access) and its inner and mid sizes; per output
  // its dtype; the number of scalar parameters.
  std::vector<c10::ScalarType> input_dtypes;
  std::vector<int64_t> input_access, input_inner, input_mid;
  std::vector<c10::ScalarType> output_dtypes;
  int64_t num_scalars = 0;
  std::vector<std::string> input_names, output_names;  // for error messages
  // Host object code LLVM emitted for `llvm_ir` on a CPU described by
  // `object_target` (LlvmHostTarget(): name and features), attached when an
  // ahead-of-time artifact is saved (runtime/executor/host_object_code.h); a loading
  // process links it instead of running LLVM. Empty: JIT from llvm_ir.
  std::string object_code, object_target;
};

// How one fused-kernel instruction binds its operands to its kernel. A
// horizontally fused launch runs the kernel over `segments` operand groups
// laid one after another on the instruction's inputs and outputs.
struct LaunchPlan {
  int64_t kernel = -1;  // index into ProgramCode::kernels
  int64_t segments = 1;
  // Per input of one segment: kernel input number (tensors) or scalar
  // parameter number (numbers).
  std::vector<int64_t> binding;
  std::vector<bool> is_tensor;
  std::vector<c10::ScalarType> input_dtypes;   // per input of one segment
  std::vector<c10::ScalarType> output_dtypes;  // per output of one segment
  std::vector<int64_t> numel;                  // per segment
  std::vector<std::vector<int64_t>> out_sizes;  // per segment
  // Per output over all segments: the instruction input whose buffer it may
  // take when that input is uniquely owned at run time, or -1.
  std::vector<int64_t> reuse;
  // Sums of kernel outputs taken while the kernel runs (one segment only):
  // element i of output `source` adds to element j of the result, j being
  // where a kernel input of `access` (codegen::kir::Access numbering) with
  // `inner` and `mid` reads i; the sum is multiplied by `scale` (a mean).
  // The instruction's outputs are the kernel's, then one per reduction.
  struct Reduction {
    int64_t source = 0, access = 1, inner = 1, mid = 1;
    double scale = 1.0;
    std::vector<int64_t> out_sizes;
  };
  std::vector<Reduction> reductions;
  // The last `scratch` kernel outputs only feed the reductions: never
  // materialized (their instruction outputs are undefined tensors).
  int64_t scratch = 0;
  // {kh, kw}: the kernel's one output, [..., H, W] planes, is max-pooled by
  // kh x kw windows at stride kh x kw as it is computed (a block of planes
  // at a time in a per-thread buffer), never materialized: the instruction's
  // outputs are an undefined tensor, the pooled values and their int64
  // indices (aten::max_pool2d_with_indices's; runtime/compute/max_pool.h). One
  // segment of a host kernel, no reductions. Empty: no pooling.
  std::vector<int64_t> pool;
};

// C = op(A) op(B) (+ acc when `accumulate`: a third input).
struct GemmPlan {
  bool trans_a = false, trans_b = false, accumulate = false;
};

// A small reduction run by a plain loop (runtime/executor/reduction.h); the
// operator named by `fallback_schema` runs inputs the loop does not handle.
struct ReductionPlan {
  // kBlock: a contiguous input viewed as [outer, reduce, inner], summed over
  // the middle (a batched program's per-task bias gradient [T, R, C] ->
  // [T, 1, C], a per-task loss mean [T, S] -> [T]).
  enum Form : int64_t { kAll = 0, kRows = 1, kColumns = 2, kBlock = 3 };
  Form form = kAll;
  std::vector<int64_t> block;  // kBlock: {outer, reduce, inner}
  bool mean = false;
  std::vector<int64_t> out_sizes;
  std::string fallback_schema;
};

enum class InstructionKind : int64_t {
  kOperator = 0,        // a registered operator, by schema
  kListConstruct = 1,   // interpreter built-ins without an operator
  kListUnpack = 2,
  kTupleConstruct = 3,
  kFusedKernel = 4,     // plan: LaunchPlan
  kGemm = 5,            // plan: GemmPlan
  kReduction = 6,       // plan: ReductionPlan
};
const char* InstructionKindName(InstructionKind kind);

struct InstructionCode {
  InstructionKind kind = InstructionKind::kOperator;
  std::string name;    // what profiles and listings show
  // kOperator: the operator's canonical schema; kListConstruct: the list's
  // element type (annotation string).
  std::string schema;
  int64_t plan = -1;   // index into the plan vector of `kind`
  std::vector<int64_t> inputs, outputs;  // registers
};

struct ProgramCode {
  std::string label;  // "forward", "backward", ...
  int64_t num_registers = 0;
  std::vector<int64_t> input_registers, output_registers;
  std::vector<std::pair<int64_t, c10::IValue>> constants;  // register, value
  std::vector<InstructionCode> instructions;
  std::vector<KernelCode> kernels;
  std::vector<LaunchPlan> launches;
  std::vector<GemmPlan> gemms;
  std::vector<ReductionPlan> reductions;
  // Every kernel above printed as C++ and compiled by the system compiler
  // into one shared object for an x86-64 level `shared_object_target`
  // (runtime/jit/cpp_kernel_library.h), attached when an ahead-of-time artifact
  // is saved; a loading process on the C++ back end dlopens it instead of
  // running a compiler. Empty: compile from the kernels' IR.
  std::string shared_object, shared_object_target;
};

// What a specialization is keyed by and checked against: dtype, device,
// sizes and strides of every tensor input, the value of every integer input.
std::vector<int64_t> InputSignature(const std::vector<c10::IValue>& inputs);

// A looped inner loop (runtime/executor/loop_node.h): the value's forward
// and backward programs are one step (the body), run `steps` times. The
// body's inputs are the state slots, the fixed inputs, then one value per
// per-step table; its outputs the next state and the step's loss, then its
// saved values.
struct LoopSection {
  int64_t steps = 0;  // 0: the value is not a loop
  // Per state slot: the loop input it starts from, and whether it starts as
  // zeros like that input (an optimizer's moments) instead.
  std::vector<int64_t> state_inputs;
  std::vector<int64_t> state_zeros;  // 0 or 1
  std::vector<int64_t> fixed_inputs;  // per fixed body input: the loop input
  std::vector<at::Tensor> per_step;   // [steps, ...]: row k is step k's value
  // The body's gradients, in order: state slots first, then fixed inputs.
  std::vector<int64_t> body_differentiable_inputs;
  int64_t num_results = 0;     // the loop's outputs: the first state slots,
  bool return_losses = false;  // then the K losses
  // What the backward may keep: < 0 every step's saved values, 0 "auto"
  // (AutoSnapshots), > 0 bytes (revolve_schedule.h).
  int64_t memory_budget = -1;
};

struct CompiledProgram {
  ProgramCode forward;   // inputs -> outputs [0, num_outputs), then saved values
  ProgramCode backward;  // saved..., cotangents... -> gradients
  int64_t num_inputs = 0;
  int64_t num_outputs = 0;
  std::vector<int64_t> differentiable_inputs;  // one gradient each, in order
  // InputSignature of the inputs the program was specialized for; empty for
  // a generic program (any shapes).
  std::vector<int64_t> guard;
  // What produced it: format, metafuse, LibTorch, LLVM, host CPU.
  std::map<std::string, std::string> versions;
  // Set (steps > 0): forward and backward are a loop's body; num_inputs,
  // num_outputs and differentiable_inputs are the loop's.
  LoopSection loop;
};

// The versions a program made in this process records.
std::map<std::string, std::string> CurrentVersions();

// Stable, readable text of the whole value: same program, same text.
std::string Dump(const ProgramCode& code);
std::string Dump(const CompiledProgram& program);

}  // namespace metafuse::runtime
