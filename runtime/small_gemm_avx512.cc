#include "runtime/small_gemm_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

// Every function here is compiled for AVX-512 (the target attribute), and
// only called after runtime/cpu_isa.h found it.
#define METAFUSE_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma")))
#define METAFUSE_AVX512_INLINE METAFUSE_AVX512 __attribute__((always_inline)) inline

namespace metafuse::runtime {
namespace {

// One register of T lanes, its lane mask, and the handful of operations the
// kernels use. Masked loads and stores are what let the kernels read a
// matrix in place: a row of 40 floats is two whole vectors and one of 8
// lanes, and the lanes past the row are never touched (no padding, no
// fault at the end of a buffer).
template <typename T>
struct Lanes;

template <>
struct Lanes<float> {
  using Vec = __m512;
  using Mask = __mmask16;
  static constexpr int kCount = 16;
  METAFUSE_AVX512_INLINE static Mask First(int64_t count) {
    return count >= kCount ? Mask(0xFFFF) : Mask((1u << count) - 1);
  }
  METAFUSE_AVX512_INLINE static Vec Load(Mask mask, const float* p) {
    return _mm512_maskz_loadu_ps(mask, p);
  }
  METAFUSE_AVX512_INLINE static void Store(Mask mask, float* p, Vec v) {
    _mm512_mask_storeu_ps(p, mask, v);
  }
  METAFUSE_AVX512_INLINE static Vec Zero() { return _mm512_setzero_ps(); }
  METAFUSE_AVX512_INLINE static Vec Broadcast(float x) { return _mm512_set1_ps(x); }
  METAFUSE_AVX512_INLINE static Vec MulAdd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  METAFUSE_AVX512_INLINE static float Sum(Vec v) { return _mm512_reduce_add_ps(v); }
};

template <>
struct Lanes<double> {
  using Vec = __m512d;
  using Mask = __mmask8;
  static constexpr int kCount = 8;
  METAFUSE_AVX512_INLINE static Mask First(int64_t count) {
    return count >= kCount ? Mask(0xFF) : Mask((1u << count) - 1);
  }
  METAFUSE_AVX512_INLINE static Vec Load(Mask mask, const double* p) {
    return _mm512_maskz_loadu_pd(mask, p);
  }
  METAFUSE_AVX512_INLINE static void Store(Mask mask, double* p, Vec v) {
    _mm512_mask_storeu_pd(p, mask, v);
  }
  METAFUSE_AVX512_INLINE static Vec Zero() { return _mm512_setzero_pd(); }
  METAFUSE_AVX512_INLINE static Vec Broadcast(double x) { return _mm512_set1_pd(x); }
  METAFUSE_AVX512_INLINE static Vec MulAdd(Vec a, Vec b, Vec c) { return _mm512_fmadd_pd(a, b, c); }
  METAFUSE_AVX512_INLINE static double Sum(Vec v) { return _mm512_reduce_add_pd(v); }
};

// Rows of a micro-tile for a given number of vectors: its accumulators
// plus one row of B fill at most 27 of the 32 registers (the broadcast of
// A is folded into the multiply-add).
constexpr int MaxRows(int vectors) { return vectors == 3 ? 8 : 12; }
constexpr int kMaxVectors = 3;

// C[kRows, columns] = A B + beta C on one micro-tile: B's row p is read in
// place at b + p * b_row (its last vector through `last`), A's element
// (r, p) is broadcast from a[r * a_row + p * a_col].
template <typename T, int kRows, int kVectors>
METAFUSE_AVX512_INLINE void Tile(int64_t k, const T* a, int64_t a_row, int64_t a_col,
                                 const T* b, int64_t b_row, typename Lanes<T>::Mask last,
                                 T beta, T* c, int64_t ldc) {
  using L = Lanes<T>;
  const typename L::Mask full = L::First(L::kCount);
  typename L::Vec acc[kRows][kVectors];
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < kVectors; ++v) acc[r][v] = L::Zero();
  for (int64_t p = 0; p < k; ++p) {
    typename L::Vec row[kVectors];
#pragma GCC unroll 3
    for (int v = 0; v < kVectors; ++v)
      row[v] = L::Load(v == kVectors - 1 ? last : full, b + p * b_row + v * L::kCount);
#pragma GCC unroll 12
    for (int r = 0; r < kRows; ++r) {
      const typename L::Vec scale = L::Broadcast(a[r * a_row + p * a_col]);
#pragma GCC unroll 3
      for (int v = 0; v < kVectors; ++v) acc[r][v] = L::MulAdd(scale, row[v], acc[r][v]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 3
    for (int v = 0; v < kVectors; ++v) {
      const typename L::Mask mask = v == kVectors - 1 ? last : full;
      T* out = c + r * ldc + v * L::kCount;
      typename L::Vec result = acc[r][v];
      if (beta != T(0)) result = L::MulAdd(L::Broadcast(beta), L::Load(mask, out), result);
      L::Store(mask, out, result);
    }
  }
}

// The compiled Tile for `rows` x kVectors (rows within MaxRows).
template <typename T, int kVectors>
METAFUSE_AVX512_INLINE void TileOfRows(int rows, int64_t k, const T* a, int64_t a_row,
                                       int64_t a_col, const T* b, int64_t b_row,
                                       typename Lanes<T>::Mask last, T beta, T* c,
                                       int64_t ldc) {
#define METAFUSE_TILE_ROWS(R)                                                           \
  case R:                                                                               \
    if constexpr (MaxRows(kVectors) >= R)                                               \
      Tile<T, R, kVectors>(k, a, a_row, a_col, b, b_row, last, beta, c, ldc);           \
    return;
  switch (rows) {
    METAFUSE_TILE_ROWS(1)
    METAFUSE_TILE_ROWS(2)
    METAFUSE_TILE_ROWS(3)
    METAFUSE_TILE_ROWS(4)
    METAFUSE_TILE_ROWS(5)
    METAFUSE_TILE_ROWS(6)
    METAFUSE_TILE_ROWS(7)
    METAFUSE_TILE_ROWS(8)
    METAFUSE_TILE_ROWS(9)
    METAFUSE_TILE_ROWS(10)
    METAFUSE_TILE_ROWS(11)
    METAFUSE_TILE_ROWS(12)
    default:
      return;
  }
#undef METAFUSE_TILE_ROWS
}

// C (m x n, ldc apart rows) = A B + beta C where B's rows are contiguous
// (row p at b + p * b_row) and A's element (i, p) at a[i * a_row + p * a_col].
template <typename T>
METAFUSE_AVX512 void Product(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_row,
                             int64_t a_col, const T* b, int64_t b_row, T beta, T* c,
                             int64_t ldc) {
  using L = Lanes<T>;
  for (int64_t j = 0; j < n; j += kMaxVectors * L::kCount) {
    const int64_t columns = std::min<int64_t>(kMaxVectors * L::kCount, n - j);
    const int vectors = static_cast<int>((columns + L::kCount - 1) / L::kCount);
    const typename L::Mask last = L::First(columns - (vectors - 1) * L::kCount);
    // Rows split into equal tiles (10 rows: 5 + 5, not 8 + 2).
    const int64_t max_rows = MaxRows(vectors);
    const int64_t row_tiles = (m + max_rows - 1) / max_rows;
    const int64_t tile_rows = (m + row_tiles - 1) / row_tiles;
    for (int64_t i = 0; i < m; i += tile_rows) {
      const int rows = static_cast<int>(std::min(tile_rows, m - i));
      const T* a_tile = a + i * a_row;
      T* c_tile = c + i * ldc + j;
      switch (vectors) {
        case 1:
          TileOfRows<T, 1>(rows, k, a_tile, a_row, a_col, b + j, b_row, last, beta, c_tile, ldc);
          break;
        case 2:
          TileOfRows<T, 2>(rows, k, a_tile, a_row, a_col, b + j, b_row, last, beta, c_tile, ldc);
          break;
        default:
          TileOfRows<T, 3>(rows, k, a_tile, a_row, a_col, b + j, b_row, last, beta, c_tile, ldc);
      }
    }
  }
}

// out[i * out_step] = sum_p rows[i * k + p] x[p] + beta out[i * out_step]
// for m contiguous rows of length k (a matrix times one vector: a layer to
// one output, or one row times a transposed matrix). Four rows at a time
// share each load of x.
template <typename T>
METAFUSE_AVX512 void Dots(int64_t m, int64_t k, const T* rows, const T* x, T beta, T* out,
                          int64_t out_step) {
  using L = Lanes<T>;
  const typename L::Mask full = L::First(L::kCount);
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    typename L::Vec acc[4] = {L::Zero(), L::Zero(), L::Zero(), L::Zero()};
    for (int64_t p = 0; p < k; p += L::kCount) {
      const typename L::Mask mask = k - p >= L::kCount ? full : L::First(k - p);
      const typename L::Vec xs = L::Load(mask, x + p);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r)
        acc[r] = L::MulAdd(L::Load(mask, rows + (i + r) * k + p), xs, acc[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      T& o = out[(i + r) * out_step];
      o = beta != T(0) ? L::Sum(acc[r]) + beta * o : L::Sum(acc[r]);
    }
  }
  for (; i < m; ++i) {
    typename L::Vec acc = L::Zero();
    for (int64_t p = 0; p < k; p += L::kCount) {
      const typename L::Mask mask = k - p >= L::kCount ? full : L::First(k - p);
      acc = L::MulAdd(L::Load(mask, rows + i * k + p), L::Load(mask, x + p), acc);
    }
    T& o = out[i * out_step];
    o = beta != T(0) ? L::Sum(acc) + beta * o : L::Sum(acc);
  }
}

// out (k x n, rows ldo apart) = in^T for in n x k (rows k apart), in 8 x 8
// blocks of floats or 4 x 4 blocks of doubles transposed in registers
// (unpack, shuffle, lane permute: 0.6 instructions per element, against
// two moves per element one at a time); the edges one element at a time.
METAFUSE_AVX512_INLINE void TransposeBlock(const float* in, int64_t k, float* out, int64_t n) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q) r[q] = _mm256_loadu_ps(in + q * k);
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    t[2 * q] = _mm256_unpacklo_ps(r[2 * q], r[2 * q + 1]);
    t[2 * q + 1] = _mm256_unpackhi_ps(r[2 * q], r[2 * q + 1]);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    r[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    r[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    r[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    r[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    _mm256_storeu_ps(out + q * n, _mm256_permute2f128_ps(r[q], r[q + 4], 0x20));
    _mm256_storeu_ps(out + (q + 4) * n, _mm256_permute2f128_ps(r[q], r[q + 4], 0x31));
  }
}

METAFUSE_AVX512_INLINE void TransposeBlock(const double* in, int64_t k, double* out, int64_t n) {
  __m256d r[4], t[4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) r[q] = _mm256_loadu_pd(in + q * k);
  t[0] = _mm256_unpacklo_pd(r[0], r[1]);
  t[1] = _mm256_unpackhi_pd(r[0], r[1]);
  t[2] = _mm256_unpacklo_pd(r[2], r[3]);
  t[3] = _mm256_unpackhi_pd(r[2], r[3]);
  _mm256_storeu_pd(out, _mm256_permute2f128_pd(t[0], t[2], 0x20));
  _mm256_storeu_pd(out + n, _mm256_permute2f128_pd(t[1], t[3], 0x20));
  _mm256_storeu_pd(out + 2 * n, _mm256_permute2f128_pd(t[0], t[2], 0x31));
  _mm256_storeu_pd(out + 3 * n, _mm256_permute2f128_pd(t[1], t[3], 0x31));
}

template <typename T>
METAFUSE_AVX512 void Transpose(int64_t n, int64_t k, const T* in, T* out) {
  constexpr int64_t kBlock = 32 / sizeof(T);
  const int64_t n_blocks = n / kBlock * kBlock, k_blocks = k / kBlock * kBlock;
  for (int64_t j = 0; j < n_blocks; j += kBlock)
    for (int64_t p = 0; p < k_blocks; p += kBlock)
      TransposeBlock(in + j * k + p, k, out + p * n + j, n);
  for (int64_t j = 0; j < n_blocks; ++j)
    for (int64_t p = k_blocks; p < k; ++p) out[p * n + j] = in[j * k + p];
  for (int64_t j = n_blocks; j < n; ++j)
    for (int64_t p = 0; p < k; ++p) out[p * n + j] = in[j * k + p];
}

template <typename T>
METAFUSE_AVX512 void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a,
                          const T* b, T beta, T* c) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta != T(0) ? beta * c[i] : T(0);
    return;
  }
  // A's element (i, p), for either layout.
  const int64_t a_row = ta ? 1 : k, a_col = ta ? m : 1;
  if (n == 1) {
    // One column: C[i] = A's row i . b (b is k contiguous elements in
    // either layout).
    if (!ta) return Dots<T>(m, k, a, b, beta, c, 1);
    // A stored k x m: C^T (1 x m) = b^T A, A's rows read in place.
    return Product<T>(1, m, k, b, 0, 1, a, m, beta, c, m);
  }
  // op(B)'s rows are contiguous (read in place, no copy) unless B is
  // stored transposed with more than one row of op(B).
  if (!tb || k == 1) return Product<T>(m, n, k, a, a_row, a_col, b, n, beta, c, n);
  // One row times B^T: C[j] = B's row j . a (a is k contiguous elements).
  if (m == 1) return Dots<T>(n, k, b, a, beta, c, 1);
  thread_local std::vector<T> scratch;
  scratch.resize(static_cast<size_t>(k * n));
  Transpose<T>(n, k, b, scratch.data());
  Product<T>(m, n, k, a, a_row, a_col, scratch.data(), n, beta, c, n);
}

}  // namespace

void SmallGemmAvx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                     const float* b, float beta, float* c) {
  Gemm<float>(trans_a, trans_b, m, n, k, a, b, beta, c);
}

void SmallGemmAvx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                     const double* a, const double* b, double beta, double* c) {
  Gemm<double>(trans_a, trans_b, m, n, k, a, b, beta, c);
}

}  // namespace metafuse::runtime
