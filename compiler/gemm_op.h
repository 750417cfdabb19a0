// The runtime operation of metafuse::gemm (lower_matmul.h): C = op(A) op(B)
// into a fresh row-major matrix, through the Fortran BLAS (sgemm_/dgemm_)
// that LibTorch links, found in the running process. Where no such BLAS is
// loaded, the operation calls ATen's mm on (transposed) views: same result,
// slower.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

namespace metafuse::compiler {

torch::jit::Operation MakeGemmOperation(torch::jit::Node* gemm);

// True if the BLAS routines were found (for tests and reports).
bool DirectBlasAvailable();

}  // namespace metafuse::compiler
