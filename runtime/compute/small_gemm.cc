#include "runtime/compute/small_gemm.h"

#include "runtime/compute/cpu_isa.h"
#include "runtime/compute/small_gemm_in_place.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

// a*b + c in the micro-kernels becomes one FMA instruction (ISO C++ mode
// keeps GCC from contracting by default). Only this file's arithmetic.
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
// Vector types wider than the default target's registers appear only inside
// functions compiled for the wider targets; GCC warns about their ABI anyway.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace metafuse::runtime {
namespace {

// A SIMD register of `kBytes` holding T lanes (GCC/Clang vector extension:
// the arithmetic operators work lane-wise, a scalar operand is broadcast).
template <typename T, int kBytes>
struct Simd {
  typedef T Vec __attribute__((vector_size(kBytes)));
  static constexpr int kLanes = kBytes / static_cast<int>(sizeof(T));
};

// The largest micro-tile per register file: its accumulators, one row of
// B and a broadcast must fit the registers (AVX-512: 32, of which 6 x 3
// accumulators; AVX2 and SSE2: 16, of which 4 x 2).
template <int kBytes>
constexpr int kMaxTileRows = kBytes == 64 ? 6 : 4;
template <int kBytes>
constexpr int kMaxTileVectors = kBytes == 64 ? 3 : 2;

// op(B) copied into `packed`: k rows of `stride` elements, each row's
// columns past n zero, so every micro-kernel load is a whole vector inside
// the buffer whatever n is.
template <typename T>
inline void PackB(bool trans_b, int64_t n, int64_t k, const T* b, int64_t stride, T* packed) {
  if (trans_b) {
    // B is n x k: four of its rows at a time become four adjacent
    // columns of op(B), so every write is a 4-element run.
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const T *b0 = b + j * k, *b1 = b0 + k, *b2 = b1 + k, *b3 = b2 + k;
      for (int64_t p = 0; p < k; ++p) {
        T* out = packed + p * stride + j;
        out[0] = b0[p];
        out[1] = b1[p];
        out[2] = b2[p];
        out[3] = b3[p];
      }
    }
    for (; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) packed[p * stride + j] = b[j * k + p];
  } else {
    for (int64_t p = 0; p < k; ++p)
      std::memcpy(packed + p * stride, b + p * n, static_cast<size_t>(n) * sizeof(T));
  }
  for (int64_t p = 0; p < k; ++p) std::fill(packed + p * stride + n, packed + (p + 1) * stride, T(0));
}

// One micro-tile: rows [0, kRows) of C, columns [0, columns) (at most
// kVectors whole vectors; lanes past `columns` are computed and dropped).
template <typename T, int kBytes, int kRows, int kVectors>
__attribute__((always_inline)) inline void Tile(int64_t k, const T* a, int64_t a_row,
                                                int64_t a_col, const T* packed, int64_t stride,
                                                T beta, T* c, int64_t ldc, int64_t columns) {
  using Vec = typename Simd<T, kBytes>::Vec;
  constexpr int kLanes = Simd<T, kBytes>::kLanes;
  // The loops over rows and vectors are unrolled so that the accumulators
  // live in registers (at -O2 GCC keeps the arrays in memory otherwise).
  Vec acc[kRows][kVectors];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) acc[r][v] = Vec{};
  for (int64_t p = 0; p < k; ++p) {
    Vec row[kVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v)
      std::memcpy(&row[v], packed + p * stride + v * kLanes, sizeof(Vec));
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const T scale = a[r * a_row + p * a_col];
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) acc[r][v] += scale * row[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      T* out = c + r * ldc + v * kLanes;
      const int64_t valid = columns - v * kLanes;
      if (valid >= kLanes) {
        Vec result = acc[r][v];
        if (beta != T(0)) {
          Vec old;
          std::memcpy(&old, out, sizeof(Vec));
          result += beta * old;
        }
        std::memcpy(out, &result, sizeof(Vec));
      } else if (valid > 0) {
        T lanes[kLanes];
        std::memcpy(lanes, &acc[r][v], sizeof(Vec));
        for (int64_t q = 0; q < valid; ++q)
          out[q] = beta != T(0) ? lanes[q] + beta * out[q] : lanes[q];
      }
    }
  }
}

// The micro-tile of `rows` x `vectors` (run-time values within the
// register file's limits) as one of the compiled Tile instances.
template <typename T, int kBytes, int kRows>
__attribute__((always_inline)) inline void TileOfVectors(int vectors, int64_t k, const T* a,
                                                         int64_t a_row, int64_t a_col,
                                                         const T* packed, int64_t stride,
                                                         T beta, T* c, int64_t ldc,
                                                         int64_t columns) {
  switch (vectors) {
    case 1:
      return Tile<T, kBytes, kRows, 1>(k, a, a_row, a_col, packed, stride, beta, c, ldc,
                                       columns);
    case 2:
      return Tile<T, kBytes, kRows, 2>(k, a, a_row, a_col, packed, stride, beta, c, ldc,
                                       columns);
    default:
      if constexpr (kMaxTileVectors<kBytes> >= 3)
        return Tile<T, kBytes, kRows, 3>(k, a, a_row, a_col, packed, stride, beta, c, ldc,
                                         columns);
  }
}

template <typename T, int kBytes>
__attribute__((always_inline)) inline void TileOf(int rows, int vectors, int64_t k,
                                                  const T* a, int64_t a_row, int64_t a_col,
                                                  const T* packed, int64_t stride, T beta,
                                                  T* c, int64_t ldc, int64_t columns) {
#define METAFUSE_TILE_ROWS(R)                                                                 \
  case R:                                                                                     \
    if constexpr (kMaxTileRows<kBytes> >= R)                                                  \
      TileOfVectors<T, kBytes, R>(vectors, k, a, a_row, a_col, packed, stride, beta, c, ldc, \
                                  columns);                                                   \
    return;
  switch (rows) {
    METAFUSE_TILE_ROWS(1)
    METAFUSE_TILE_ROWS(2)
    METAFUSE_TILE_ROWS(3)
    METAFUSE_TILE_ROWS(4)
    METAFUSE_TILE_ROWS(5)
    METAFUSE_TILE_ROWS(6)
    default:
      return;
  }
#undef METAFUSE_TILE_ROWS
}

// C (ldc apart rows) = op(A) B + beta C with B packed: k rows of `stride`
// elements, zero past column n (stride a multiple of this target's lanes).
template <typename T, int kBytes>
__attribute__((always_inline)) inline void GemmPacked(int64_t m, int64_t n, int64_t k,
                                                      const T* a, int64_t a_row, int64_t a_col,
                                                      const T* packed, int64_t stride, T beta,
                                                      T* c, int64_t ldc) {
  constexpr int kLanes = Simd<T, kBytes>::kLanes;
  constexpr int kMaxRows = kMaxTileRows<kBytes>, kMaxVectors = kMaxTileVectors<kBytes>;
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T& out = c[i * ldc + j];
        out = beta != T(0) ? beta * out : T(0);
      }
    return;
  }
  // Rows split into equal tiles (10 rows: 5 + 5, not 6 + 4), so no tile is
  // much smaller than the registers allow.
  const int64_t row_tiles = (m + kMaxRows - 1) / kMaxRows;
  const int64_t tile_rows = (m + row_tiles - 1) / row_tiles;
  for (int64_t j = 0; j < n; j += kMaxVectors * kLanes) {
    const int64_t columns = std::min<int64_t>(kMaxVectors * kLanes, n - j);
    const int vectors = static_cast<int>((columns + kLanes - 1) / kLanes);
    for (int64_t i = 0; i < m; i += tile_rows) {
      const int rows = static_cast<int>(std::min(tile_rows, m - i));
      TileOf<T, kBytes>(rows, vectors, k, a + i * a_row, a_row, a_col, packed + j, stride, beta,
                        c + i * ldc + j, ldc, columns);
    }
  }
}

// The SSE2 product (AVX2 and AVX-512 CPUs take runtime/compute/small_gemm_in_place,
// which reads B without this copy): op(B) packed, then GemmPacked.
template <typename T>
void GemmSse2(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a,
              const T* b, T beta, T* c) {
  if (m <= 0 || n <= 0) return;
  constexpr int kLanes = Simd<T, 16>::kLanes;
  const int64_t stride = (n + kLanes - 1) / kLanes * kLanes;
  thread_local std::vector<T> scratch;
  scratch.resize(static_cast<size_t>(std::max<int64_t>(k, 1) * stride));
  PackB(trans_b, n, k, b, stride, scratch.data());
  // A is read one element per row and step: (row, step) at row * a_row +
  // step * a_col, so both layouts need no copy.
  GemmPacked<T, 16>(m, n, k, a, trans_a ? 1 : k, trans_a ? m : 1, scratch.data(), stride, beta,
                    c, n);
}

// GemmPacked (the convolutions' products on pre-packed patches) compiled
// once per instruction set.
template <typename T>
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void GemmPackedAvx512(
    int64_t m, int64_t n, int64_t k, const T* a, int64_t a_row, int64_t a_col, const T* packed,
    int64_t stride, T beta, T* c, int64_t ldc) {
  GemmPacked<T, 64>(m, n, k, a, a_row, a_col, packed, stride, beta, c, ldc);
}

template <typename T>
__attribute__((target("avx2,fma"))) void GemmPackedAvx2(int64_t m, int64_t n, int64_t k,
                                                        const T* a, int64_t a_row,
                                                        int64_t a_col, const T* packed,
                                                        int64_t stride, T beta, T* c,
                                                        int64_t ldc) {
  GemmPacked<T, 32>(m, n, k, a, a_row, a_col, packed, stride, beta, c, ldc);
}

template <typename T>
void GemmPackedSse2(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_row, int64_t a_col,
                    const T* packed, int64_t stride, T beta, T* c, int64_t ldc) {
  GemmPacked<T, 16>(m, n, k, a, a_row, a_col, packed, stride, beta, c, ldc);
}

template <typename T>
void Run(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, const T* b,
         T beta, T* c) {
  switch (isa) {
    case Isa::kAvx512:
    case Isa::kAvx2:  // masked loads: B read in place (small_gemm_in_place.h)
      return SmallGemmInPlace(isa, ta, tb, m, n, k, a, b, beta, c);
    case Isa::kSse2:
      return GemmSse2<T>(ta, tb, m, n, k, a, b, beta, c);
  }
}

template <typename T>
void RunPacked(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_row, int64_t a_col,
               const T* packed, int64_t stride, T beta, T* c, int64_t ldc) {
  if (stride % SmallGemmPackedStride(1, sizeof(T)) != 0 || stride < n)
    throw std::invalid_argument("SmallGemmPacked: `stride` must be at least n and a multiple of " +
                                std::to_string(SmallGemmPackedStride(1, sizeof(T))) + ", got " +
                                std::to_string(stride));
  switch (BestIsa()) {
    case Isa::kAvx512:
      return GemmPackedAvx512<T>(m, n, k, a, a_row, a_col, packed, stride, beta, c, ldc);
    case Isa::kAvx2:
      return GemmPackedAvx2<T>(m, n, k, a, a_row, a_col, packed, stride, beta, c, ldc);
    case Isa::kSse2:
      return GemmPackedSse2<T>(m, n, k, a, a_row, a_col, packed, stride, beta, c, ldc);
  }
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kSse2:
      return "sse2";
  }
  return "?";
}

Isa IsaNamed(const char* name) {
  for (Isa isa : {Isa::kSse2, Isa::kAvx2, Isa::kAvx512}) {
    if (std::string(name) != IsaName(isa)) continue;
    if (static_cast<int>(isa) > static_cast<int>(BestIsa()))
      throw std::invalid_argument(std::string("SmallGemmOn: this CPU cannot run `") + name +
                                  "` (its best is " + IsaName(BestIsa()) + ")");
    return isa;
  }
  throw std::invalid_argument(std::string("SmallGemmOn: `isa` must be sse2, avx2 or avx512, got `") +
                              name + "`");
}

}  // namespace

void SmallGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
               const float* b, float beta, float* c) {
  Run<float>(BestIsa(), trans_a, trans_b, m, n, k, a, b, beta, c);
}

void SmallGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a,
               const double* b, double beta, double* c) {
  Run<double>(BestIsa(), trans_a, trans_b, m, n, k, a, b, beta, c);
}

void SmallGemmOn(const char* isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const float* a, const float* b, float beta, float* c) {
  Run<float>(IsaNamed(isa), trans_a, trans_b, m, n, k, a, b, beta, c);
}

void SmallGemmOn(const char* isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const double* a, const double* b, double beta, double* c) {
  Run<double>(IsaNamed(isa), trans_a, trans_b, m, n, k, a, b, beta, c);
}

int64_t SmallGemmPackedStride(int64_t n, size_t element_size) {
  // Whole vectors of the widest target (64 bytes), so any target's loads fit.
  const int64_t lanes = 64 / static_cast<int64_t>(element_size);
  return (n + lanes - 1) / lanes * lanes;
}

void SmallGemmPacked(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row,
                     int64_t a_col, const float* packed, int64_t stride, float beta, float* c,
                     int64_t ldc) {
  RunPacked<float>(m, n, k, a, a_row, a_col, packed, stride, beta, c, ldc);
}

void SmallGemmPacked(int64_t m, int64_t n, int64_t k, const double* a, int64_t a_row,
                     int64_t a_col, const double* packed, int64_t stride, double beta,
                     double* c, int64_t ldc) {
  RunPacked<double>(m, n, k, a, a_row, a_col, packed, stride, beta, c, ldc);
}

bool PreferSmallGemm(int64_t m, int64_t n, int64_t k) {
  // Measured up to 256 x 256 x 256 (1.2x to 2x faster than OpenBLAS there,
  // 0.9x for single-column products); B is packed whole, without cache
  // blocking, so larger products stay with the BLAS.
  return n <= 256 && k <= 256 && m * n * k <= (int64_t{1} << 24);
}

const char* SmallGemmIsa() { return IsaName(BestIsa()); }

}  // namespace metafuse::runtime
