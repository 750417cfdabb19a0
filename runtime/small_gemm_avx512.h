// runtime/small_gemm's kernels for AVX-512 CPUs: the same product, C =
// op(A) op(B) + beta C row-major, with masked loads and stores, so that B
// is read where it lies (a copy only when it is stored transposed) and a
// row of 40 floats costs two whole vectors and one masked one. Products
// with one output column or row become dot products instead of tiles that
// use one lane of sixteen. Call only where runtime/cpu_isa.h reports
// AVX-512 (runtime/small_gemm.cc does).
#pragma once

#include <cstdint>

namespace metafuse::runtime {

void SmallGemmAvx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                     const float* b, float beta, float* c);
void SmallGemmAvx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                     const double* a, const double* b, double beta, double* c);

}  // namespace metafuse::runtime
