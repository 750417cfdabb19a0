// Pass: matrix products over a contraction of size 1 to broadcast multiplies.
//
// Runs on a shape-specialized graph, before products become GEMM calls
// (compiler/lowering/lower_matmul.h). aten::mm(a [M, 1], b [1, N]) and
// aten::bmm(a [T, M, 1], b [T, 1, N]) are outer products: every output
// element is one product a[m] * b[n], so aten::mul(a, b) computes the same
// bits. A layer from one input feature (the sinusoid's 1 -> 40) and the
// gradient through a layer to one output (40 -> 1) are such products; as a
// multiply they join the bias add and activation around them in one fused
// kernel (per task: a [T, M, 1] column and a [T, 1, N] row read with the
// outer and middle accesses) instead of costing a BLAS call per task.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// Returns the number of products rewritten.
int64_t RankOneProductsToMultiplies(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
