// runtime/compute/small_gemm's kernels for AVX-512 and AVX2 CPUs: the same product,
// C = op(A) op(B) + beta C row-major, with masked loads and stores, so that
// B is read where it lies (a copy only when it is stored transposed, then
// in 8x8 register transposes) and a row of 40 floats costs two whole
// AVX-512 vectors and one masked one. Products with one output column or
// row become dot products instead of tiles that use one lane of sixteen.
// Call only with an instruction set runtime/compute/cpu_isa.h reports
// (runtime/compute/small_gemm.cc does).
#pragma once

#include <cstdint>

#include "runtime/compute/cpu_isa.h"

namespace metafuse::runtime {

// `isa` is Isa::kAvx512 or Isa::kAvx2.
void SmallGemmInPlace(Isa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const float* a, const float* b, float beta, float* c);
void SmallGemmInPlace(Isa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const double* a, const double* b, double beta, double* c);

}  // namespace metafuse::runtime
