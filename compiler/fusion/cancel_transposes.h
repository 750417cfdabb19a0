// Pass: an elementwise operation between transposes computes untransposed.
//
// Runs on a shape-specialized graph, before products become GEMM calls.
// Reverse-mode differentiation transposes on the way back: the gradient of
// a batched linear layer's outer product (an aten::bmm over a contraction of
// 1, a multiply after compiler/fusion/rank_one_products.h) reads both operands
// transposed, and its only reader transposes the result back:
// t(mul(t(a), t(b))). Elementwise operations commute with a permutation of
// their operands' dims, so that is mul(a, b): the two views and the one
// that undoes them go, the product reads dense operands, and the multiply is
// free to fuse with its reader (a fused kernel takes no transposed view
// between its members).
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// Returns the number of elementwise operations rewritten.
int64_t CancelTransposesAroundElementwise(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
