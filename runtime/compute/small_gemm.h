// A GEMM for the small matrices of meta-learning inner loops (a 40x40 layer
// applied to 10 shots, one product per task): C = op(A) op(B) + beta C,
// row-major, with register-blocked SIMD micro-kernels chosen once for the
// CPU (AVX-512, AVX2 or SSE2). A BLAS call on such shapes spends most of its
// time outside the arithmetic (argument checks, packing for cache blocks it
// does not need): runtime/compute/gemm.cc sends products here where
// PreferSmallGemm says this is faster, measured in
// bench/small_gemm_bench.cc (docs/benchmarks.md).
//
// Unlike Debian's serial OpenBLAS, which shares work buffers between calls,
// SmallGemm keeps its scratch per thread: calls from several threads at
// once are safe, so the tasks of a batched product can run in parallel.
#pragma once

#include <cstddef>
#include <cstdint>

namespace metafuse::runtime {

// C[m,n] = op(A)[m,k] op(B)[k,n] + beta C[m,n]. A is m x k row-major (k x m
// when trans_a), B is k x n row-major (n x k when trans_b), C is m x n
// row-major. beta == 0 never reads C (it may hold garbage).
void SmallGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
               const float* b, float beta, float* c);
void SmallGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a,
               const double* b, double beta, double* c);

// SmallGemm on a named instruction set ("avx512", "avx2" or "sse2") instead
// of the CPU's best, so tests cover every micro-kernel on one machine.
// Throws std::invalid_argument for an unknown name or one this CPU lacks.
void SmallGemmOn(const char* isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const float* a, const float* b, float beta, float* c);
void SmallGemmOn(const char* isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const double* a, const double* b, double beta, double* c);

// The same product with B already packed by the caller (a convolution
// writes its image patches straight into this layout): k rows, each
// `stride` elements apart, zero from column n to the stride. The stride
// must be SmallGemmPackedStride(n, sizeof(T)) or a larger multiple of it
// (std::invalid_argument otherwise). A's element (row i, step p) is at
// a[i * a_row + p * a_col]; C's rows are ldc apart.
int64_t SmallGemmPackedStride(int64_t n, size_t element_size);
void SmallGemmPacked(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row,
                     int64_t a_col, const float* packed, int64_t stride, float beta, float* c,
                     int64_t ldc);
void SmallGemmPacked(int64_t m, int64_t n, int64_t k, const double* a, int64_t a_row,
                     int64_t a_col, const double* packed, int64_t stride, double beta,
                     double* c, int64_t ldc);

// True where SmallGemm is faster than the BLAS on this shape (a rule from
// the measurements in docs/benchmarks.md, not a per-call timing).
bool PreferSmallGemm(int64_t m, int64_t n, int64_t k);

// The instruction set the micro-kernels use on this CPU: "avx512", "avx2"
// or "sse2" (reports and tests).
const char* SmallGemmIsa();

}  // namespace metafuse::runtime
