#include "runtime/compute/winograd_convolution.h"

// The transforms' channel loops vectorize only at -O3 (Bazel's opt mode is
// -O2, whose cost model leaves loops of unknown length scalar); built once
// per instruction set below, as runtime/compute/max_pool.cc.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/compute/gemm.h"
#include "runtime/compute/small_gemm.h"

namespace metafuse::runtime {
namespace {

enum class Mode { kAuto, kFast, kOff, kF2, kF4 };

Mode ModeFromEnvironment() {
  static const Mode mode = [] {
    const char* value = std::getenv("METAFUSE_WINOGRAD");
    const std::string v = value == nullptr ? "" : value;
    if (v.empty() || v == "1" || v == "auto") return Mode::kAuto;
    if (v == "fast") return Mode::kFast;
    if (v == "0") return Mode::kOff;
    if (v == "f2") return Mode::kF2;
    if (v == "f4") return Mode::kF4;
    TORCH_CHECK(false, "METAFUSE_WINOGRAD must be 0, 1, auto, fast, f2 or f4, got '", v, "'");
  }();
  return mode;
}

// One-dimensional transforms of F(m, 3), each over n channels at once (the
// channels are the contiguous, vectorized dimension). Input: (m+2) values
// to (m+2); output: (m+2) products to m results; weights: 3 taps to (m+2).
template <int M>
struct Transform;

template <>
struct Transform<2> {
  static constexpr int kAlpha = 4;
  static constexpr float kG[4][3] = {{1, 0, 0}, {.5f, .5f, .5f}, {.5f, -.5f, .5f}, {0, 0, 1}};
  // (A dy): the output gradient's m values to alpha points (the transpose
  // of Output), for weight gradients.
  __attribute__((always_inline)) static inline void Gradient(const float* const* d,
                                                             float* const* o, int n) {
    const float *__restrict__ d0 = d[0], *__restrict__ d1 = d[1];
    float *__restrict__ o0 = o[0], *__restrict__ o1 = o[1], *__restrict__ o2 = o[2],
                           *__restrict__ o3 = o[3];
#pragma GCC ivdep
    for (int c = 0; c < n; ++c) {
      o0[c] = d0[c];
      o1[c] = d0[c] + d1[c];
      o2[c] = d0[c] - d1[c];
      o3[c] = -d1[c];
    }
  }
  __attribute__((always_inline)) static inline void Input(const float* const* d, float* const* o,
                                                          int n) {
    const float *__restrict__ d0 = d[0], *__restrict__ d1 = d[1], *__restrict__ d2 = d[2],
                                 *__restrict__ d3 = d[3];
    float *__restrict__ o0 = o[0], *__restrict__ o1 = o[1], *__restrict__ o2 = o[2],
                           *__restrict__ o3 = o[3];
#pragma GCC ivdep
    for (int c = 0; c < n; ++c) {
      o0[c] = d0[c] - d2[c];
      o1[c] = d1[c] + d2[c];
      o2[c] = d2[c] - d1[c];
      o3[c] = d1[c] - d3[c];
    }
  }
  __attribute__((always_inline)) static inline void Output(const float* const* m,
                                                           float* const* o, int n) {
    const float *__restrict__ m0 = m[0], *__restrict__ m1 = m[1], *__restrict__ m2 = m[2],
                                 *__restrict__ m3 = m[3];
    float *__restrict__ o0 = o[0], *__restrict__ o1 = o[1];
#pragma GCC ivdep
    for (int c = 0; c < n; ++c) {
      o0[c] = m0[c] + m1[c] + m2[c];
      o1[c] = m1[c] - m2[c] - m3[c];
    }
  }
};

template <>
struct Transform<4> {
  static constexpr int kAlpha = 6;
  static constexpr float kG[6][3] = {{1.f / 4, 0, 0},
                                     {-1.f / 6, -1.f / 6, -1.f / 6},
                                     {-1.f / 6, 1.f / 6, -1.f / 6},
                                     {1.f / 24, 1.f / 12, 1.f / 6},
                                     {1.f / 24, -1.f / 12, 1.f / 6},
                                     {0, 0, 1}};
  __attribute__((always_inline)) static inline void Gradient(const float* const* d,
                                                             float* const* o, int n) {
    const float *__restrict__ d0 = d[0], *__restrict__ d1 = d[1], *__restrict__ d2 = d[2],
                                 *__restrict__ d3 = d[3];
    float *__restrict__ o0 = o[0], *__restrict__ o1 = o[1], *__restrict__ o2 = o[2],
                           *__restrict__ o3 = o[3], *__restrict__ o4 = o[4],
                           *__restrict__ o5 = o[5];
#pragma GCC ivdep
    for (int c = 0; c < n; ++c) {
      const float even = d0[c] + d2[c], odd = d1[c] + d3[c];
      const float even4 = d0[c] + 4 * d2[c], odd8 = 2 * d1[c] + 8 * d3[c];
      o0[c] = d0[c];
      o1[c] = even + odd;
      o2[c] = even - odd;
      o3[c] = even4 + odd8;
      o4[c] = even4 - odd8;
      o5[c] = d3[c];
    }
  }
  __attribute__((always_inline)) static inline void Input(const float* const* d, float* const* o,
                                                          int n) {
    const float *__restrict__ d0 = d[0], *__restrict__ d1 = d[1], *__restrict__ d2 = d[2],
                                 *__restrict__ d3 = d[3], *__restrict__ d4 = d[4],
                                 *__restrict__ d5 = d[5];
    float *__restrict__ o0 = o[0], *__restrict__ o1 = o[1], *__restrict__ o2 = o[2],
                           *__restrict__ o3 = o[3], *__restrict__ o4 = o[4],
                           *__restrict__ o5 = o[5];
#pragma GCC ivdep
    for (int c = 0; c < n; ++c) {
      // Rows of B^T: the shared sums first (Lavin and Gray's factoring).
      const float a = d4[c] - 4 * d2[c], b = d3[c] - 4 * d1[c];
      const float e = d4[c] - d2[c], f = 2 * (d3[c] - d1[c]);
      o0[c] = 4 * d0[c] - 5 * d2[c] + d4[c];
      o1[c] = a + b;
      o2[c] = a - b;
      o3[c] = e + f;
      o4[c] = e - f;
      o5[c] = 4 * d1[c] - 5 * d3[c] + d5[c];
    }
  }
  __attribute__((always_inline)) static inline void Output(const float* const* m,
                                                           float* const* o, int n) {
    const float *__restrict__ m0 = m[0], *__restrict__ m1 = m[1], *__restrict__ m2 = m[2],
                                 *__restrict__ m3 = m[3], *__restrict__ m4 = m[4],
                                 *__restrict__ m5 = m[5];
    float *__restrict__ o0 = o[0], *__restrict__ o1 = o[1], *__restrict__ o2 = o[2],
                           *__restrict__ o3 = o[3];
#pragma GCC ivdep
    for (int c = 0; c < n; ++c) {
      const float p = m1[c] + m2[c], q = m1[c] - m2[c], r = m3[c] + m4[c], s = m3[c] - m4[c];
      o0[c] = m0[c] + p + r;
      o1[c] = q + 2 * s;
      o2[c] = p + 4 * r;
      o3[c] = q + 8 * s + m5[c];
    }
  }
};

struct Geometry {
  int n, c, h, w, k;       // images, input channels, input size, output channels
  int pad_h, pad_w;        // zero padding
  int out_h, out_w;        // output size
  int tiles_h, tiles_w;    // output tiles per image
  int images_per_block;    // images transformed and multiplied together
};

// Tile t of a block: its image in the block, and its row and column among
// that image's tiles (every tile transform walks the block this way).
struct TilePosition {
  int img, ty, tx;
};
__attribute__((always_inline)) inline TilePosition TileAt(const Geometry& g, int t) {
  const int per_image = g.tiles_h * g.tiles_w;
  return {t / per_image, (t / g.tiles_w) % g.tiles_h, t % g.tiles_w};
}

// Per-thread scratch, grown as needed and kept (a program calls the same
// shapes every step).
struct Scratch {
  std::vector<float> image, result, points, products, rows, zeros;
};

// dst[j * dst_stride + i] = src[i * src_stride + j] (+ add[j]) for i < rows,
// j < cols: 8 x 8 blocks transposed in registers (GCC vector shuffles, which
// each target clone lowers to its own instructions), the edges one by one.
// An element at a time, the strided side misses the cache on every load.
typedef float Vec8 __attribute__((vector_size(32)));
typedef int Mask8 __attribute__((vector_size(32)));

__attribute__((always_inline)) inline Vec8 Load8(const float* p) {
  Vec8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

__attribute__((always_inline)) inline void Transpose(const float* src, int64_t src_stride,
                                                     float* dst, int64_t dst_stride, int rows,
                                                     int cols, const float* add) {
  const Mask8 lo = {0, 8, 1, 9, 4, 12, 5, 13}, hi = {2, 10, 3, 11, 6, 14, 7, 15};
  const Mask8 even = {0, 1, 8, 9, 4, 5, 12, 13}, odd = {2, 3, 10, 11, 6, 7, 14, 15};
  const Mask8 low = {0, 1, 2, 3, 8, 9, 10, 11}, high = {4, 5, 6, 7, 12, 13, 14, 15};
  int i0 = 0;
  for (; i0 + 8 <= rows; i0 += 8) {
    int j0 = 0;
    for (; j0 + 8 <= cols; j0 += 8) {
      Vec8 r[8], t[8], u[8], o[8];
      for (int i = 0; i < 8; ++i) r[i] = Load8(src + (i0 + i) * src_stride + j0);
      for (int p = 0; p < 4; ++p) {
        t[2 * p] = __builtin_shuffle(r[2 * p], r[2 * p + 1], lo);
        t[2 * p + 1] = __builtin_shuffle(r[2 * p], r[2 * p + 1], hi);
      }
      for (int q = 0; q < 2; ++q) {
        u[4 * q] = __builtin_shuffle(t[4 * q], t[4 * q + 2], even);
        u[4 * q + 1] = __builtin_shuffle(t[4 * q], t[4 * q + 2], odd);
        u[4 * q + 2] = __builtin_shuffle(t[4 * q + 1], t[4 * q + 3], even);
        u[4 * q + 3] = __builtin_shuffle(t[4 * q + 1], t[4 * q + 3], odd);
      }
      for (int j = 0; j < 4; ++j) {
        o[j] = __builtin_shuffle(u[j], u[j + 4], low);
        o[j + 4] = __builtin_shuffle(u[j], u[j + 4], high);
      }
      for (int j = 0; j < 8; ++j) {
        if (add != nullptr) o[j] += add[j0 + j];
        std::memcpy(dst + (j0 + j) * dst_stride + i0, &o[j], sizeof o[j]);
      }
    }
    for (; j0 < cols; ++j0)
      for (int i = i0; i < i0 + 8; ++i)
        dst[j0 * dst_stride + i] = src[i * src_stride + j0] + (add ? add[j0] : 0.f);
  }
  for (int j = 0; j < cols; ++j)
    for (int i = i0; i < rows; ++i)
      dst[j * dst_stride + i] = src[i * src_stride + j] + (add ? add[j] : 0.f);
}

// NCHW images to NHWC, each image placed in a cover_h x cover_w frame whose
// margin beyond h x w is zero (the partial tiles at the bottom and right).
__attribute__((always_inline)) inline void ToNhwc(const float* src, int images, int channels,
                                                  int h, int w, int cover_h, int cover_w,
                                                  float* dst) {
  const int plane = h * w;
  for (int i = 0; i < images; ++i) {
    const float* in = src + size_t(i) * channels * plane;
    float* out = dst + size_t(i) * cover_h * cover_w * channels;
    for (int r = 0; r < cover_h; ++r) {  // zero the margin only
      float* row = out + size_t(r) * cover_w * channels;
      if (r >= h) {
        std::fill(row, row + size_t(cover_w) * channels, 0.f);
      } else if (cover_w > w) {
        std::fill(row + size_t(w) * channels, row + size_t(cover_w) * channels, 0.f);
      }
    }
    if (cover_w == w) {  // the image's rows are contiguous on both sides
      Transpose(in, plane, out, channels, channels, plane, nullptr);
      continue;
    }
    for (int r = 0; r < h; ++r)
      Transpose(in + r * w, plane, out + size_t(r) * cover_w * channels, channels, channels, w,
                nullptr);
  }
}

// U[(i * alpha + j)][c][k] = (G g G^T)[i][j] for the weight g = w[k][c] of
// a contiguous [K, C, 3, 3] w, into u (alpha^2 C K floats, every entry
// written: no zero fill). The taps go to [c][tap][k] first (the output
// channels contiguous, as the loops read them) by the 8 x 8 register
// transposes above; both buffers are the calling thread's and kept, so
// their pages are warm. For the 5-image support convolutions of a MAML step
// (about 200 us each) the permuted ATen copy, a fresh 256 KB array and the
// baseline-ISA loops this replaced were a fifth of the call.
template <int M>
__attribute__((always_inline)) inline void TransformWeightsInto(const float* w, int K, int C,
                                                                float* taps, float* u) {
  using T = Transform<M>;
  constexpr int kA = T::kAlpha;
  Transpose(w, int64_t(C) * 9, taps, K, K, C * 9, nullptr);
  float half[kA * 3 * 64];
  for (int k0 = 0; k0 < K; k0 += 64) {  // 64 output channels at a time: `half` on the stack
    const int kn = std::min(64, K - k0);
    for (int c = 0; c < C; ++c) {
      const float* gc = taps + size_t(c) * 9 * K + k0;
      for (int i = 0; i < kA; ++i)
        for (int j = 0; j < 3; ++j) {
          float* out = half + (i * 3 + j) * 64;
#pragma GCC ivdep
          for (int k = 0; k < kn; ++k)
            out[k] = T::kG[i][0] * gc[(0 * 3 + j) * K + k] + T::kG[i][1] * gc[(1 * 3 + j) * K + k] +
                     T::kG[i][2] * gc[(2 * 3 + j) * K + k];
        }
      for (int i = 0; i < kA; ++i)
        for (int j = 0; j < kA; ++j) {
          float* out = u + ((size_t(i) * kA + j) * C + c) * K + k0;
          const float* row = half + i * 3 * 64;
#pragma GCC ivdep
          for (int k = 0; k < kn; ++k)
            out[k] = row[k] * T::kG[j][0] + row[64 + k] * T::kG[j][1] + row[2 * 64 + k] * T::kG[j][2];
        }
    }
  }
}

// The input tiles of a block (s.image, NHWC) to points[xi][t][c].
template <int M>
__attribute__((always_inline)) inline void InputTiles(const Geometry& g, int tiles, Scratch& s) {
  using T = Transform<M>;
  constexpr int kA = T::kAlpha;
  const int C = g.c, H = g.h, W = g.w;
  for (int t = 0; t < tiles; ++t) {
    const auto [img, ty, tx] = TileAt(g, t);
    const int r0 = ty * M - g.pad_h, c0 = tx * M - g.pad_w;
    float* tmp = s.rows.data();
    for (int j = 0; j < kA; ++j) {  // along each column of the tile
      const float* d[kA];
      float* o[kA];
      const int col = c0 + j;
      for (int i = 0; i < kA; ++i) {
        const int row = r0 + i;
        d[i] = row >= 0 && row < H && col >= 0 && col < W
                   ? s.image.data() + ((size_t(img) * H + row) * W + col) * C
                   : s.zeros.data();
        o[i] = tmp + (i * kA + j) * C;
      }
      T::Input(d, o, C);
    }
    for (int i = 0; i < kA; ++i) {  // then along each row
      const float* d[kA];
      float* o[kA];
      for (int j = 0; j < kA; ++j) {
        d[j] = tmp + (i * kA + j) * C;
        o[j] = s.points.data() + (size_t(i * kA + j) * tiles + t) * C;
      }
      T::Input(d, o, C);
    }
  }
}

// F(2x2): each tile's 16 points in one pass over the channels, both 1-D
// transforms (adds and subtracts only) in registers, instead of the two
// passes through a scratch row above (the same operations in the same
// order: the same bits).
template <>
__attribute__((always_inline)) inline void InputTiles<2>(const Geometry& g, int tiles,
                                                         Scratch& s) {
  const int C = g.c, H = g.h, W = g.w;
  const size_t point_stride = size_t(tiles) * C;
  for (int t = 0; t < tiles; ++t) {
    const auto [img, ty, tx] = TileAt(g, t);
    const int r0 = ty * 2 - g.pad_h, c0 = tx * 2 - g.pad_w;
    const float* d[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const int row = r0 + i, col = c0 + j;
        d[i][j] = row >= 0 && row < H && col >= 0 && col < W
                      ? s.image.data() + ((size_t(img) * H + row) * W + col) * C
                      : s.zeros.data();
      }
    float* __restrict__ out = s.points.data() + size_t(t) * C;
#pragma GCC ivdep
    for (int c = 0; c < C; ++c) {
      float e[4][4];
      for (int j = 0; j < 4; ++j) {  // along each column: Transform<2>::Input
        e[0][j] = d[0][j][c] - d[2][j][c];
        e[1][j] = d[1][j][c] + d[2][j][c];
        e[2][j] = d[2][j][c] - d[1][j][c];
        e[3][j] = d[1][j][c] - d[3][j][c];
      }
      for (int i = 0; i < 4; ++i) {  // then along each row
        out[(i * 4 + 0) * point_stride + c] = e[i][0] - e[i][2];
        out[(i * 4 + 1) * point_stride + c] = e[i][1] + e[i][2];
        out[(i * 4 + 2) * point_stride + c] = e[i][2] - e[i][1];
        out[(i * 4 + 3) * point_stride + c] = e[i][1] - e[i][3];
      }
    }
  }
}

// The products of a block (s.products[xi][t][k]) to output tiles in
// s.result (NHWC over the tiles' cover, rows x cols).
template <int M>
__attribute__((always_inline)) inline void OutputTiles(const Geometry& g, int tiles, int rows,
                                                       int cols, Scratch& s) {
  using T = Transform<M>;
  constexpr int kA = T::kAlpha;
  const int K = g.k;
  for (int t = 0; t < tiles; ++t) {
    const auto [img, ty, tx] = TileAt(g, t);
    float* tmp = s.rows.data();
    for (int j = 0; j < kA; ++j) {
      const float* m[kA];
      float* o[M];
      for (int i = 0; i < kA; ++i) m[i] = s.products.data() + (size_t(i * kA + j) * tiles + t) * K;
      for (int i = 0; i < M; ++i) o[i] = tmp + (i * kA + j) * K;
      T::Output(m, o, K);
    }
    for (int i = 0; i < M; ++i) {
      const float* m[kA];
      float* o[M];
      for (int j = 0; j < kA; ++j) m[j] = tmp + (i * kA + j) * K;
      for (int j = 0; j < M; ++j)
        o[j] = s.result.data() + ((size_t(img) * rows + ty * M + i) * cols + tx * M + j) * K;
      T::Output(m, o, K);
    }
  }
}

// F(2x2): each tile's 4 outputs from its 16 products in one pass over the
// channels (same operations, same order as above).
template <>
__attribute__((always_inline)) inline void OutputTiles<2>(const Geometry& g, int tiles, int rows,
                                                          int cols, Scratch& s) {
  const int K = g.k;
  const size_t point_stride = size_t(tiles) * K;
  for (int t = 0; t < tiles; ++t) {
    const auto [img, ty, tx] = TileAt(g, t);
    const float* __restrict__ m = s.products.data() + size_t(t) * K;
    float* o[2][2];
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        o[i][j] = s.result.data() + ((size_t(img) * rows + ty * 2 + i) * cols + tx * 2 + j) * K;
#pragma GCC ivdep
    for (int k = 0; k < K; ++k) {
      float e[2][4];
      for (int j = 0; j < 4; ++j) {  // along each column: Transform<2>::Output
        const float m0 = m[(0 * 4 + j) * point_stride + k], m1 = m[(1 * 4 + j) * point_stride + k],
                    m2 = m[(2 * 4 + j) * point_stride + k], m3 = m[(3 * 4 + j) * point_stride + k];
        e[0][j] = m0 + m1 + m2;
        e[1][j] = m1 - m2 - m3;
      }
      for (int i = 0; i < 2; ++i) {  // then along each row
        o[i][0][k] = e[i][0] + e[i][1] + e[i][2];
        o[i][1][k] = e[i][1] - e[i][2] - e[i][3];
      }
    }
  }
}

// The output gradient's tiles of a block (s.result, NHWC over the tiles'
// cover) to s.products[xi][t][k] (A dy A^T per tile).
template <int M>
__attribute__((always_inline)) inline void GradientTiles(const Geometry& g, int tiles, int rows,
                                                         int cols, Scratch& s) {
  using T = Transform<M>;
  constexpr int kA = T::kAlpha;
  const int K = g.k;
  for (int t = 0; t < tiles; ++t) {
    const auto [img, ty, tx] = TileAt(g, t);
    float* tmp = s.rows.data();  // [alpha][M][K]
    for (int j = 0; j < M; ++j) {
      const float* d[M];
      float* o[kA];
      for (int i = 0; i < M; ++i)
        d[i] = s.result.data() + ((size_t(img) * rows + ty * M + i) * cols + tx * M + j) * K;
      for (int i = 0; i < kA; ++i) o[i] = tmp + (i * M + j) * K;
      T::Gradient(d, o, K);
    }
    for (int i = 0; i < kA; ++i) {
      const float* d[M];
      float* o[kA];
      for (int j = 0; j < M; ++j) d[j] = tmp + (i * M + j) * K;
      for (int j = 0; j < kA; ++j)
        o[j] = s.products.data() + (size_t(i * kA + j) * tiles + t) * K;
      T::Gradient(d, o, K);
    }
  }
}

// F(2x2): each tile's 16 points from its 4 gradients in one pass over the
// channels (same operations, same order as above).
template <>
__attribute__((always_inline)) inline void GradientTiles<2>(const Geometry& g, int tiles,
                                                            int rows, int cols, Scratch& s) {
  const int K = g.k;
  const size_t point_stride = size_t(tiles) * K;
  for (int t = 0; t < tiles; ++t) {
    const auto [img, ty, tx] = TileAt(g, t);
    const float* d[2][2];
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        d[i][j] = s.result.data() + ((size_t(img) * rows + ty * 2 + i) * cols + tx * 2 + j) * K;
    float* __restrict__ out = s.products.data() + size_t(t) * K;
#pragma GCC ivdep
    for (int k = 0; k < K; ++k) {
      float e[4][2];
      for (int j = 0; j < 2; ++j) {  // along each column: Transform<2>::Gradient
        e[0][j] = d[0][j][k];
        e[1][j] = d[0][j][k] + d[1][j][k];
        e[2][j] = d[0][j][k] - d[1][j][k];
        e[3][j] = -d[1][j][k];
      }
      for (int i = 0; i < 4; ++i) {  // then along each row
        out[(i * 4 + 0) * point_stride + k] = e[i][0];
        out[(i * 4 + 1) * point_stride + k] = e[i][0] + e[i][1];
        out[(i * 4 + 2) * point_stride + k] = e[i][0] - e[i][1];
        out[(i * 4 + 3) * point_stride + k] = -e[i][1];
      }
    }
  }
}

// C = op(A) B + beta C. `concurrent`: this call's blocks run on several
// threads, so the product goes to runtime/compute/small_gemm (per-thread scratch);
// Debian's serial OpenBLAS is not safe from two threads at once. Otherwise
// the BLAS, unless another thread (a program of metafuse.vmap's parallel
// strategies) is in it right now.
inline void Product(bool concurrent, bool trans_a, int m, int n, int k, const float* a,
                    const float* b, float beta, float* c) {
  if (concurrent || !TryRowMajorSgemm(trans_a, m, n, k, a, b, beta, c))
    SmallGemm(trans_a, false, m, n, k, a, b, beta, c);
}

void Reserve(Scratch& s, int points, int tiles, size_t image, size_t result, int c, int k) {
  s.image.resize(image);
  s.result.resize(result);
  s.points.resize(size_t(points) * tiles * c);
  s.products.resize(size_t(points) * tiles * k);
  s.rows.resize(size_t(points) * std::max(c, k));
  s.zeros.assign(c, 0.f);
}

// Images [n0, n0 + images) of the convolution: NCHW input to an NHWC copy,
// its tiles to the transformed points, one GEMM per point, the products
// back to output tiles (NHWC), and those into the NCHW output with the bias.
template <int M>
__attribute__((always_inline)) inline void RunBlock(const Geometry& g, const float* x,
                                                    const float* u, const float* bias, float* y,
                                                    int n0, int images, bool concurrent,
                                                    Scratch& s) {
  using T = Transform<M>;
  constexpr int kA = T::kAlpha, kPoints = kA * kA;
  const int C = g.c, K = g.k, H = g.h, W = g.w;
  const int per_image = g.tiles_h * g.tiles_w, tiles = images * per_image;
  const int rows = g.tiles_h * M, cols = g.tiles_w * M;  // the output tiles' cover
  Reserve(s, kPoints, tiles, size_t(images) * H * W * C, size_t(images) * rows * cols * K, C, K);
  ToNhwc(x + size_t(n0) * C * H * W, images, C, H, W, H, W, s.image.data());
  InputTiles<M>(g, tiles, s);

  for (int xi = 0; xi < kPoints; ++xi) {  // products[xi] = points[xi] u[xi]
    Product(concurrent, false, tiles, K, C, s.points.data() + size_t(xi) * tiles * C,
            u + size_t(xi) * C * K, 0.f, s.products.data() + size_t(xi) * tiles * K);
  }

  OutputTiles<M>(g, tiles, rows, cols, s);  // products -> output tiles (NHWC)

  const int plane = g.out_h * g.out_w;
  for (int i = 0; i < images; ++i) {  // NHWC (tile cover) -> NCHW output, plus bias
    const float* src = s.result.data() + size_t(i) * rows * cols * K;
    float* dst = y + size_t(n0 + i) * K * plane;
    if (cols == g.out_w) {
      Transpose(src, K, dst, plane, plane, K, bias);
      continue;
    }
    for (int r = 0; r < g.out_h; ++r)
      Transpose(src + size_t(r) * cols * K, K, dst + r * g.out_w, plane, g.out_w, K, bias);
  }
}

// Images [n0, n0 + images) of a weight gradient: by the transposition of
// F(m, 3), dW = G^T [(A dy A^T) . (B^T x B)] G summed over the tiles, so per
// point acc[xi] (K x C) += gradients[xi]^T points[xi], the tiles being the
// GEMMs' inner dimension. The output gradient's tiles go to
// s.products[xi][t][k] (zero past its edge). The first block of a chunk
// writes acc instead of adding to it (no zero fill).
template <int M>
__attribute__((always_inline)) inline void GradientBlock(const Geometry& g, const float* x,
                                                         const float* dy, float* acc, int n0,
                                                         int images, bool first,
                                                         bool concurrent, Scratch& s) {
  using T = Transform<M>;
  constexpr int kA = T::kAlpha, kPoints = kA * kA;
  const int C = g.c, K = g.k, H = g.h, W = g.w;
  const int per_image = g.tiles_h * g.tiles_w, tiles = images * per_image;
  const int rows = g.tiles_h * M, cols = g.tiles_w * M;
  Reserve(s, kPoints, tiles, size_t(images) * H * W * C, size_t(images) * rows * cols * K, C, K);
  ToNhwc(x + size_t(n0) * C * H * W, images, C, H, W, H, W, s.image.data());
  ToNhwc(dy + size_t(n0) * K * g.out_h * g.out_w, images, K, g.out_h, g.out_w, rows, cols,
         s.result.data());
  InputTiles<M>(g, tiles, s);

  GradientTiles<M>(g, tiles, rows, cols, s);  // dy tiles -> products[xi][t][k]

  for (int xi = 0; xi < kPoints; ++xi) {
    Product(concurrent, /*trans_a=*/true, K, C, tiles, s.products.data() + size_t(xi) * tiles * K,
            s.points.data() + size_t(xi) * tiles * C, first ? 0.f : 1.f,
            acc + size_t(xi) * K * C);
  }
}

// Built for AVX-512, AVX2 and the baseline; the loader picks one.
#define METAFUSE_WINOGRAD_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
METAFUSE_WINOGRAD_CLONES void RunBlockF2(const Geometry& g, const float* x, const float* u,
                                         const float* bias, float* y, int n0, int images,
                                         bool concurrent, Scratch& s) {
  RunBlock<2>(g, x, u, bias, y, n0, images, concurrent, s);
}
METAFUSE_WINOGRAD_CLONES void RunBlockF4(const Geometry& g, const float* x, const float* u,
                                         const float* bias, float* y, int n0, int images,
                                         bool concurrent, Scratch& s) {
  RunBlock<4>(g, x, u, bias, y, n0, images, concurrent, s);
}
METAFUSE_WINOGRAD_CLONES void GradientBlockF2(const Geometry& g, const float* x, const float* dy,
                                              float* acc, int n0, int images, bool first,
                                              bool concurrent, Scratch& s) {
  GradientBlock<2>(g, x, dy, acc, n0, images, first, concurrent, s);
}
METAFUSE_WINOGRAD_CLONES void GradientBlockF4(const Geometry& g, const float* x, const float* dy,
                                              float* acc, int n0, int images, bool first,
                                              bool concurrent, Scratch& s) {
  GradientBlock<4>(g, x, dy, acc, n0, images, first, concurrent, s);
}
METAFUSE_WINOGRAD_CLONES void TransformWeightsF2(const float* w, int K, int C, float* taps,
                                                 float* u) {
  TransformWeightsInto<2>(w, K, C, taps, u);
}
METAFUSE_WINOGRAD_CLONES void TransformWeightsF4(const float* w, int K, int C, float* taps,
                                                 float* u) {
  TransformWeightsInto<4>(w, K, C, taps, u);
}
#undef METAFUSE_WINOGRAD_CLONES

// acc[xi][k][c] (summed over tiles) -> dW[k][c][u][v] = (G^T acc G)[u][v].
template <int M>
at::Tensor KernelFromPoints(const float* acc, int K, int C,
                            const at::TensorOptions& options) {
  using T = Transform<M>;
  constexpr int kA = T::kAlpha;
  const size_t kc = size_t(K) * C;
  at::Tensor dw = at::empty({K, C, 3, 3}, options);
  float* out = dw.data_ptr<float>();
  std::unique_ptr<float[]> half(new float[size_t(3) * kA * kc]);  // [u][xj][k * C + c]
  for (int u = 0; u < 3; ++u)
    for (int xj = 0; xj < kA; ++xj) {
      float* h = half.get() + (size_t(u) * kA + xj) * kc;
      const float* a = acc + size_t(xj) * kc;  // acc[xi][xj] at a + xi * kA * kc
#pragma GCC ivdep
      for (size_t e = 0; e < kc; ++e) {
        float sum = 0.f;
        for (int xi = 0; xi < kA; ++xi) sum += T::kG[xi][u] * a[size_t(xi) * kA * kc + e];
        h[e] = sum;
      }
    }
  for (int u = 0; u < 3; ++u)
    for (int v = 0; v < 3; ++v)
      for (size_t e = 0; e < kc; ++e) {
        float sum = 0.f;
        for (int xj = 0; xj < kA; ++xj) sum += T::kG[xj][v] * half[(size_t(u) * kA + xj) * kc + e];
        out[e * 9 + u * 3 + v] = sum;
      }
  return dw;
}

int64_t Entry(at::IntArrayRef v, size_t d) { return v.size() == 1 ? v[0] : v[d]; }

// bench/conv_bench.cc on the Omniglot net's 64-channel layers (one thread):
// F(4x4) runs 1.4-1.7x oneDNN from 5 images of 7x7 to 75 of 14x14, forward,
// input and weight gradients alike; F(2x2) 1.3-1.4x on the 14x14 layers and
// 0.9-1.0x on 7x7. Both lose on 3x3 outputs (one tile for 9 outputs), on
// few output pixels, where the weight transform and the scratch copies do
// not amortize, and on narrow layers, where the GEMMs are too thin (16
// channels, the ResNet cell's: 0.8-1.0x; 32: 1.5x).
//
// By default F(2x2), whose rounding is the direct kernels': on the conv
// net's MAML step with an Adam inner loop, an ill-conditioned meta-gradient,
// F(4x4) everywhere put the float32 result 2.3e-2 from the float64 truth,
// against 1.1-1.2e-2 without Winograd or with F(2x2) (plain PyTorch: 5e-3).
// METAFUSE_WINOGRAD=fast takes F(4x4) for the speed.
WinogradTile TileFor(int64_t images, int64_t in_channels, int64_t out_channels, int64_t out_h,
                     int64_t out_w) {
  const Mode mode = ModeFromEnvironment();
  if (mode == Mode::kOff) return WinogradTile::kNone;
  if (mode == Mode::kF2) return WinogradTile::kF2;
  if (mode == Mode::kF4) return WinogradTile::kF4;
  if (in_channels < 32 || out_channels < 32) return WinogradTile::kNone;
  const int64_t pixels = images * out_h * out_w;
  if (mode == Mode::kFast)
    return out_h >= 6 && out_w >= 6 && pixels >= 192 ? WinogradTile::kF4 : WinogradTile::kNone;
  return out_h >= 8 && out_w >= 8 && pixels >= 768 ? WinogradTile::kF2 : WinogradTile::kNone;
}

int TileSize(WinogradTile tile) { return tile == WinogradTile::kF2 ? 2 : 4; }

Geometry MakeGeometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                      at::IntArrayRef padding, int m) {
  Geometry g;
  g.n = n, g.c = c, g.h = h, g.w = w, g.k = k;
  g.pad_h = Entry(padding, 0), g.pad_w = Entry(padding, 1);
  g.out_h = g.h + 2 * g.pad_h - 2, g.out_w = g.w + 2 * g.pad_w - 2;
  g.tiles_h = (g.out_h + m - 1) / m, g.tiles_w = (g.out_w + m - 1) / m;
  // Enough tiles per block for GEMMs the BLAS runs near its peak, few
  // enough that a block's points and products stay near this core's L2.
  const int per_image = g.tiles_h * g.tiles_w;
  g.images_per_block = std::max(1, std::min(g.n, (64 + per_image - 1) / per_image));
  return g;
}

// True where this call's blocks run on several threads at once.
bool Concurrent(int blocks) {
  return at::in_parallel_region() || (blocks > 1 && at::get_num_threads() > 1);
}

// A float32 CPU tensor of 4 dims, not empty (an empty batch has no block
// to sum), with 32-bit indices.
bool PlainFloat(const at::Tensor& t) {
  return t.defined() && t.is_cpu() && t.scalar_type() == at::kFloat && !t.is_mkldnn() &&
         !t.is_sparse() && t.dim() == 4 && t.numel() > 0 && t.numel() < (int64_t{1} << 31);
}

}  // namespace

bool WinogradApplies(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                     at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  if (!PlainFloat(input) || !PlainFloat(weight) || groups != 1 ||
      weight.size(1) != input.size(1) || weight.size(2) != 3 || weight.size(3) != 3 ||
      !DirectBlasAvailable())
    return false;
  for (at::IntArrayRef v : {stride, padding, dilation})
    if (v.size() != 1 && v.size() != 2) return false;
  for (size_t d = 0; d < 2; ++d) {
    const int64_t pad = Entry(padding, d);
    if (Entry(stride, d) != 1 || Entry(dilation, d) != 1 || pad < 0 || pad > 2 ||
        input.size(2 + d) + 2 * pad - 2 < 1)
      return false;
  }
  return true;
}

WinogradTile ChooseWinogradTile(const at::Tensor& input, const at::Tensor& weight,
                                at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef dilation, int64_t groups) {
  if (!WinogradApplies(input, weight, stride, padding, dilation, groups))
    return WinogradTile::kNone;
  return TileFor(input.size(0), input.size(1), weight.size(0),
                 input.size(2) + 2 * Entry(padding, 0) - 2, input.size(3) + 2 * Entry(padding, 1) - 2);
}

at::Tensor Conv2dByWinograd(const at::Tensor& input, const at::Tensor& weight,
                            const c10::optional<at::Tensor>& bias, at::IntArrayRef padding,
                            WinogradTile tile) {
  const std::vector<int64_t> ones = {1, 1};
  TORCH_CHECK(tile != WinogradTile::kNone && WinogradApplies(input, weight, ones, padding, ones, 1),
              "metafuse Winograd conv2d: input ", input.sizes(), " and weight ", weight.sizes(),
              " with padding ", padding, " are not a float32 3x3 stride-1 convolution");
  const bool has_bias = bias.has_value() && bias->defined();
  TORCH_CHECK(!has_bias || (bias->dim() == 1 && bias->size(0) == weight.size(0) &&
                            bias->scalar_type() == at::kFloat && bias->is_cpu()),
              "metafuse Winograd conv2d: bias must be float32 [", weight.size(0), "], got ",
              has_bias ? bias->sizes() : at::IntArrayRef{});
  const int m = TileSize(tile);
  const Geometry g = MakeGeometry(input.size(0), input.size(1), input.size(2), input.size(3),
                                  weight.size(0), padding, m);
  const at::Tensor x = input.contiguous(), w = weight.contiguous();
  // This thread's (TransformWeightsInto); nothing on it runs another
  // convolution before this one returns.
  thread_local std::vector<float> taps, transformed;
  taps.resize(size_t(9) * g.c * g.k);
  transformed.resize(size_t(m + 2) * (m + 2) * g.c * g.k);
  float* const u = transformed.data();
  (m == 2 ? TransformWeightsF2 : TransformWeightsF4)(w.data_ptr<float>(), g.k, g.c, taps.data(),
                                                      u);
  const at::Tensor b = has_bias ? bias->contiguous() : at::Tensor();
  at::Tensor y = at::empty({g.n, g.k, g.out_h, g.out_w}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* bp = has_bias ? b.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const int blocks = (g.n + g.images_per_block - 1) / g.images_per_block;
  const bool concurrent = Concurrent(blocks);
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    thread_local Scratch scratch;
    for (int64_t blk = begin; blk < end; ++blk) {
      const int n0 = static_cast<int>(blk) * g.images_per_block;
      const int images = std::min(g.images_per_block, g.n - n0);
      (m == 2 ? RunBlockF2 : RunBlockF4)(g, xp, u, bp, yp, n0, images, concurrent,
                                          scratch);
    }
  });
  return y;
}

WinogradTile WinogradTileToMeasure() {
  switch (ModeFromEnvironment()) {
    case Mode::kOff:
      return WinogradTile::kNone;
    case Mode::kFast:
    case Mode::kF4:
      return WinogradTile::kF4;
    default:
      return WinogradTile::kF2;
  }
}

bool WinogradWeightGradientApplies(const at::Tensor& input, const at::Tensor& grad_output,
                                   at::IntArrayRef padding) {
  if (!PlainFloat(input) || !PlainFloat(grad_output) || input.size(0) != grad_output.size(0) ||
      (padding.size() != 1 && padding.size() != 2) || !DirectBlasAvailable())
    return false;
  for (size_t d = 0; d < 2; ++d) {
    const int64_t pad = Entry(padding, d);
    if (pad < 0 || pad > 2 || input.size(2 + d) + 2 * pad - 2 != grad_output.size(2 + d))
      return false;  // not a 3x3 kernel's gradient
  }
  return true;
}

WinogradTile ChooseWinogradWeightGradientTile(const at::Tensor& input,
                                              const at::Tensor& grad_output,
                                              at::IntArrayRef padding) {
  if (!WinogradWeightGradientApplies(input, grad_output, padding)) return WinogradTile::kNone;
  return TileFor(input.size(0), input.size(1), grad_output.size(1), grad_output.size(2),
                 grad_output.size(3));
}

at::Tensor WeightGradientByWinograd(const at::Tensor& input, const at::Tensor& grad_output,
                                    at::IntArrayRef padding, WinogradTile tile) {
  TORCH_CHECK(tile != WinogradTile::kNone && PlainFloat(input) && PlainFloat(grad_output) &&
                  input.size(0) == grad_output.size(0) &&
                  (padding.size() == 1 || padding.size() == 2) &&
                  input.size(2) + 2 * Entry(padding, 0) - 2 == grad_output.size(2) &&
                  input.size(3) + 2 * Entry(padding, 1) - 2 == grad_output.size(3),
              "metafuse Winograd weight gradient: input ", input.sizes(), " and grad_output ",
              grad_output.sizes(), " with padding ", padding,
              " are not a float32 3x3 stride-1 convolution's");
  const int m = TileSize(tile);
  const Geometry g = MakeGeometry(input.size(0), input.size(1), input.size(2), input.size(3),
                                  grad_output.size(1), padding, m);
  const at::Tensor x = input.contiguous(), dy = grad_output.contiguous();
  const float* xp = x.data_ptr<float>();
  const float* dyp = dy.data_ptr<float>();
  const int alpha = m + 2, blocks = (g.n + g.images_per_block - 1) / g.images_per_block;
  const size_t points = size_t(alpha) * alpha * g.k * g.c;
  const bool concurrent = Concurrent(blocks);
  // Each chunk of blocks (one per thread) sums into its own accumulator;
  // those add up in the order of their first block, so that a thread count
  // gives the same bits every run.
  std::vector<std::pair<int64_t, std::unique_ptr<float[]>>> chunks;
  std::mutex chunks_mutex;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    thread_local Scratch scratch;
    std::unique_ptr<float[]> acc(new float[points]);  // written by the first block
    for (int64_t blk = begin; blk < end; ++blk) {
      const int n0 = static_cast<int>(blk) * g.images_per_block;
      const int images = std::min(g.images_per_block, g.n - n0);
      (m == 2 ? GradientBlockF2 : GradientBlockF4)(g, xp, dyp, acc.get(), n0, images,
                                                    blk == begin, concurrent, scratch);
    }
    std::lock_guard<std::mutex> lock(chunks_mutex);
    chunks.emplace_back(begin, std::move(acc));
  });
  std::sort(chunks.begin(), chunks.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  float* total = chunks.front().second.get();
  for (size_t i = 1; i < chunks.size(); ++i)
    for (size_t e = 0; e < points; ++e) total[e] += chunks[i].second[e];
  return m == 2 ? KernelFromPoints<2>(total, g.k, g.c, x.options())
                : KernelFromPoints<4>(total, g.k, g.c, x.options());
}

}  // namespace metafuse::runtime
