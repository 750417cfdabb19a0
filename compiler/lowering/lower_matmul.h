// Pass: matrix products to direct GEMM calls.
//
// Runs on a shape-specialized graph. Each aten::mm of float32/float64 CPU
// matrices, and each aten::bmm of stacks of them (one per task, from
// metafuse.vmap), becomes metafuse::gemm(a, b) with attributes trans_a / trans_b:
// an operand that is aten::t (or transpose(0, 1)) of a row-major matrix is
// read through the BLAS transpose flag instead of through a transposed view,
// so the view and the dispatcher call disappear (the transposes die unless
// something else reads them); t(product) becomes the swapped product,
// t(t(x)) is x, and add(x, product) becomes a product accumulating into x
// (a third input: C = x + op(A) op(B)). The runtime operation (runtime/compute/gemm.h) calls the
// BLAS that LibTorch itself uses.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

c10::Symbol GemmKind();

// Returns the number of products lowered.
int64_t LowerMatmulToGemm(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
