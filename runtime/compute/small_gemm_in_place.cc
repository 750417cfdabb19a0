#include "runtime/compute/small_gemm_in_place.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#define METAFUSE_KERNEL_INLINE __attribute__((always_inline)) inline

namespace metafuse::runtime {

// ----------------------------------------------------------------- AVX-512
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512dq,avx2,fma")
namespace avx512 {
namespace {

// One register of T lanes, its lane mask, and the operations the kernels
// use. Masked loads and stores let the kernels read a matrix in place: a
// row of 40 floats is two whole vectors and one of 8 lanes, and lanes past
// the row are never touched (no padding, no fault at a buffer's end).
template <typename T>
struct Lanes;

template <>
struct Lanes<float> {
  using Vec = __m512;
  using Mask = __mmask16;
  static constexpr int kCount = 16;
  static Mask First(int64_t count) {
    return count >= kCount ? Mask(0xFFFF) : Mask((1u << count) - 1);
  }
  static Vec Load(Mask mask, const float* p) { return _mm512_maskz_loadu_ps(mask, p); }
  static Vec LoadAll(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(Mask mask, float* p, Vec v) { _mm512_mask_storeu_ps(p, mask, v); }
  static Vec Zero() { return _mm512_setzero_ps(); }
  static Vec Broadcast(float x) { return _mm512_set1_ps(x); }
  static Vec MulAdd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static float Sum(Vec v) { return _mm512_reduce_add_ps(v); }
};

template <>
struct Lanes<double> {
  using Vec = __m512d;
  using Mask = __mmask8;
  static constexpr int kCount = 8;
  static Mask First(int64_t count) {
    return count >= kCount ? Mask(0xFF) : Mask((1u << count) - 1);
  }
  static Vec Load(Mask mask, const double* p) { return _mm512_maskz_loadu_pd(mask, p); }
  static Vec LoadAll(const double* p) { return _mm512_loadu_pd(p); }
  static void Store(Mask mask, double* p, Vec v) { _mm512_mask_storeu_pd(p, mask, v); }
  static Vec Zero() { return _mm512_setzero_pd(); }
  static Vec Broadcast(double x) { return _mm512_set1_pd(x); }
  static Vec MulAdd(Vec a, Vec b, Vec c) { return _mm512_fmadd_pd(a, b, c); }
  static double Sum(Vec v) { return _mm512_reduce_add_pd(v); }
};

// Rows of a micro-tile per number of vectors: the accumulators plus one row
// of B fill at most 27 of the 32 registers (A's broadcast is folded into
// the multiply-add).
constexpr int MaxRows(int vectors) { return vectors == 3 ? 8 : 12; }
constexpr int kMaxVectors = 3;

#include "runtime/compute/small_gemm_in_place_kernels.inc"

}  // namespace
}  // namespace avx512
#pragma GCC pop_options

// -------------------------------------------------------------------- AVX2
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
namespace {

// As AVX-512's, with vmaskmov loads and stores (a lane mask is a vector
// whose lanes are all ones or all zeros).
template <typename T>
struct Lanes;

template <>
struct Lanes<float> {
  using Vec = __m256;
  using Mask = __m256i;
  static constexpr int kCount = 8;
  static Mask First(int64_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(count, 8))),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Vec Load(Mask mask, const float* p) { return _mm256_maskload_ps(p, mask); }
  static Vec LoadAll(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(Mask mask, float* p, Vec v) { _mm256_maskstore_ps(p, mask, v); }
  static Vec Zero() { return _mm256_setzero_ps(); }
  static Vec Broadcast(float x) { return _mm256_set1_ps(x); }
  static Vec MulAdd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static float Sum(Vec v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
};

template <>
struct Lanes<double> {
  using Vec = __m256d;
  using Mask = __m256i;
  static constexpr int kCount = 4;
  static Mask First(int64_t count) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(std::min<int64_t>(count, 4)),
                              _mm256_setr_epi64x(0, 1, 2, 3));
  }
  static Vec Load(Mask mask, const double* p) { return _mm256_maskload_pd(p, mask); }
  static Vec LoadAll(const double* p) { return _mm256_loadu_pd(p); }
  static void Store(Mask mask, double* p, Vec v) { _mm256_maskstore_pd(p, mask, v); }
  static Vec Zero() { return _mm256_setzero_pd(); }
  static Vec Broadcast(double x) { return _mm256_set1_pd(x); }
  static Vec MulAdd(Vec a, Vec b, Vec c) { return _mm256_fmadd_pd(a, b, c); }
  static double Sum(Vec v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
};

// 16 registers: accumulators, the row of B and the broadcast of A (AVX2 has
// no broadcast operand).
constexpr int MaxRows(int vectors) { return vectors == 3 ? 4 : vectors == 2 ? 6 : 12; }
constexpr int kMaxVectors = 3;

#include "runtime/compute/small_gemm_in_place_kernels.inc"

}  // namespace
}  // namespace avx2
#pragma GCC pop_options

void SmallGemmInPlace(Isa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const float* a, const float* b, float beta, float* c) {
  if (isa == Isa::kAvx512) return avx512::Gemm<float>(trans_a, trans_b, m, n, k, a, b, beta, c);
  avx2::Gemm<float>(trans_a, trans_b, m, n, k, a, b, beta, c);
}

void SmallGemmInPlace(Isa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const double* a, const double* b, double beta, double* c) {
  if (isa == Isa::kAvx512) return avx512::Gemm<double>(trans_a, trans_b, m, n, k, a, b, beta, c);
  avx2::Gemm<double>(trans_a, trans_b, m, n, k, a, b, beta, c);
}

}  // namespace metafuse::runtime
