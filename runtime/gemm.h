// The runtime operation of a GEMM instruction (compiler/lower_matmul.h):
// C = op(A) op(B) (+ acc) into a fresh row-major matrix, through the Fortran
// BLAS (sgemm_/dgemm_) that LibTorch links, found in the running process,
// or for small products through runtime/small_gemm.h (faster there, and
// safe to run a batch's tasks on several threads).
// Where no such BLAS is loaded, and for CUDA tensors, the operation calls
// ATen's mm / bmm on (transposed) views (on CUDA: cuBLAS, the accumulator
// folded in with addmm / baddbmm).
#pragma once

#include <ATen/core/stack.h>

#include "runtime/program_code.h"

namespace metafuse::runtime {

torch::jit::Operation MakeGemmOperation(const GemmPlan& plan);

// True if the BLAS routines were found (for tests and reports).
bool DirectBlasAvailable();

// Row-major dense C[m, n] = A[m, k] B[k, n] (float32) through that BLAS,
// for runtime kernels built on products (runtime/winograd_convolution.cc);
// only where DirectBlasAvailable().
void RowMajorSgemm(int m, int n, int k, const float* a, const float* b, float* c);

}  // namespace metafuse::runtime
