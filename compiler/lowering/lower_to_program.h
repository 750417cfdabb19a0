// Lowering: a TorchScript graph -> the program value the runtime runs
// (runtime/program_value/program_code.h).
//
// Registers are allocated per value; constants become the initial register
// file. Each node becomes one instruction:
//   - metafuse::FusionGroup: its kernel (lower_fusion_group.h) printed for
//     its device (codegen/llvm_printer.h for the host, codegen/cuda_printer.h
//     for CUDA tensors), plus the launch plan (bindings,
//     segments, output sizes, buffer reuse from plan_buffers.h);
//   - metafuse::gemm (lower_matmul.h): a GEMM plan;
//   - with `plain_reductions`, small sums and means of complete shapes: a
//     reduction plan (runtime/executor/reduction.h);
//   - list and tuple built-ins: their own instruction kinds;
//   - any other node: its operator, by canonical schema.
// The result does not refer to the graph.
#pragma once

#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "runtime/executor/program.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::compiler {

struct LoweringOptions {
  bool plain_reductions = false;  // only for graphs with complete shapes
};

// `nodes`, if given, receives the node of each instruction (in order).
// Throws c10::Error naming a node that has no program form.
runtime::ProgramCode LowerToProgram(const torch::jit::Graph& graph, const std::string& label,
                                    const LoweringOptions& options = {},
                                    std::vector<const torch::jit::Node*>* nodes = nullptr);

// LowerToProgram, made runnable.
runtime::Program MakeProgram(const torch::jit::Graph& graph, const std::string& label = "program",
                             const LoweringOptions& options = {});

}  // namespace metafuse::compiler
