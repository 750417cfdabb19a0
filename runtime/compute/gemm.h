// The runtime operation of a GEMM instruction (compiler/lowering/lower_matmul.h):
// C = op(A) op(B) (+ acc) into a fresh row-major matrix, through the Fortran
// BLAS (sgemm_/dgemm_) that LibTorch links, found in the running process,
// or for small products through runtime/compute/small_gemm.h (faster there, and
// safe to run a batch's tasks on several threads).
// Where no such BLAS is loaded, and for CUDA tensors, the operation calls
// ATen's mm / bmm on (transposed) views (on CUDA: cuBLAS, the accumulator
// folded in with addmm / baddbmm).
#pragma once

#include <ATen/core/stack.h>

#include <mutex>

#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

torch::jit::Operation MakeGemmOperation(const GemmPlan& plan);

// True if the BLAS routines were found (for tests and reports).
bool DirectBlasAvailable();

// Debian's serial OpenBLAS shares its work buffers between calls: two
// threads in it at once corrupt each other's results. Every direct BLAS
// call of metafuse's runtime holds this mutex (the GEMM operation of a
// program run on several threads at once, by metafuse.vmap's parallel
// strategies, waits for it).
std::mutex& BlasMutex();

// Row-major dense C[m, n] = op(A) B + beta C (float32; op(A) = A [m, k],
// or with trans_a A^T of A [k, m]) through that BLAS, for runtime kernels
// built on products (runtime/compute/winograd_convolution.cc); only where
// DirectBlasAvailable(). Returns false, computing nothing, when another
// thread holds BlasMutex() or when the measured choice of this shape
// (runtime/compute/gemm_choice.h) is runtime/compute/small_gemm; the caller then takes it.
bool TryRowMajorSgemm(bool trans_a, int m, int n, int k, const float* a, const float* b,
                      float beta, float* c);

}  // namespace metafuse::runtime
