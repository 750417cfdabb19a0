// A flop model of the unfused programs, for benchmarks and reports: each
// node's flops from the sizes its values had in one run (mm 2mkn;
// reductions the input's numel; shape, fill and scalar ops none;
// metafuse::adam the elementwise ops of the generic chain it stands for; any
// other op the numel of its first output; convolutions are not modelled).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

#include "compiler/autodiff/inner_loop.h"

namespace metafuse::compiler {

struct NodeCount {
  int64_t nodes = 0;  // without constants
  double flops = 0.0;
};

// Runs `graph` once on `inputs` with every tensor a node produces returned
// too (so its size is known); returns the count and the graph's own outputs.
std::pair<NodeCount, std::vector<c10::IValue>> CountProgram(
    const std::shared_ptr<torch::jit::Graph>& graph, std::vector<c10::IValue> inputs);

struct ProgramCounts {
  NodeCount forward, backward;
};
// The forward on `inputs`, then the backward on cotangents of ones.
ProgramCounts CountSplitProgram(const SplitProgram& split, const std::vector<at::Tensor>& inputs);

}  // namespace metafuse::compiler
