#include "runtime/winograd_convolution.h"

// The transforms' channel loops vectorize only at -O3 (Bazel's opt mode is
// -O2, whose cost model leaves loops of unknown length scalar); built once
// per instruction set below, as runtime/max_pool.cc.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/gemm.h"
#include "runtime/small_gemm.h"

namespace metafuse::runtime {
namespace {

enum class Mode { kAuto, kOff, kF2, kF4 };

Mode ModeFromEnvironment() {
  static const Mode mode = [] {
    const char* value = std::getenv("METAFUSE_WINOGRAD");
    const std::string v = value == nullptr ? "" : value;
    if (v.empty() || v == "1" || v == "auto") return Mode::kAuto;
    if (v == "0") return Mode::kOff;
    if (v == "f2") return Mode::kF2;
    if (v == "f4") return Mode::kF4;
    TORCH_CHECK(false, "METAFUSE_WINOGRAD must be 0, 1, auto, f2 or f4, got '", v, "'");
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

// Per-thread scratch, grown as needed and kept (a program calls the same
// shapes every step).
struct Scratch {
  std::vector<float> image, result, points, products, rows, zeros;
};

// U[(i * alpha + j)][c][k] = (G g G^T)[i][j] for weight g = w[k][c].
template <int M>
std::vector<float> TransformWeights(const at::Tensor& weight) {
  using T = Transform<M>;
  constexpr int kA = T::kAlpha;
  const int K = weight.size(0), C = weight.size(1);
  // [c][tap][k]: the output channels contiguous, as the loops below read them.
  const at::Tensor taps = weight.reshape({K, C, 9}).permute({1, 2, 0}).contiguous();
  const float* g = taps.data_ptr<float>();
  std::vector<float> u(size_t(kA) * kA * C * K), half(size_t(kA) * 3 * K);
  for (int c = 0; c < C; ++c) {
    const float* gc = g + size_t(c) * 9 * K;
    for (int i = 0; i < kA; ++i)
      for (int j = 0; j < 3; ++j) {
        float* out = half.data() + (i * 3 + j) * K;
#pragma GCC ivdep
        for (int k = 0; k < K; ++k)
          out[k] = T::kG[i][0] * gc[(0 * 3 + j) * K + k] + T::kG[i][1] * gc[(1 * 3 + j) * K + k] +
                   T::kG[i][2] * gc[(2 * 3 + j) * K + k];
      }
    for (int i = 0; i < kA; ++i)
      for (int j = 0; j < kA; ++j) {
        float* out = u.data() + ((size_t(i) * kA + j) * C + c) * K;
        const float* row = half.data() + i * 3 * K;
#pragma GCC ivdep
        for (int k = 0; k < K; ++k)
          out[k] = row[k] * T::kG[j][0] + row[K + k] * T::kG[j][1] + row[2 * K + k] * T::kG[j][2];
      }
  }
  return u;
}

// Images [n0, n0 + images) of the convolution: NCHW input to an NHWC copy,
// its tiles to the transformed points, one GEMM per point, the products
// back to output tiles (NHWC), and those into the NCHW output with the bias.
// `concurrent`: other threads may be in the BLAS at the same time; Debian's
// serial OpenBLAS shares its work buffers between calls, so the GEMMs go to
// runtime/small_gemm (per-thread scratch) instead.
template <int M>
__attribute__((always_inline)) inline void RunBlock(const Geometry& g, const float* x,
                                                    const float* u, const float* bias, float* y,
                                                    int n0, int images, bool concurrent,
                                                    Scratch& s) {
  using T = Transform<M>;
  constexpr int kA = T::kAlpha, kPoints = kA * kA;
  const int C = g.c, K = g.k, H = g.h, W = g.w, plane = H * W;
  const int per_image = g.tiles_h * g.tiles_w, tiles = images * per_image;
  const int rows = g.tiles_h * M, cols = g.tiles_w * M;  // the output tiles' cover
  s.image.resize(size_t(images) * plane * C);
  s.result.resize(size_t(images) * rows * cols * K);
  s.points.resize(size_t(kPoints) * tiles * C);
  s.products.resize(size_t(kPoints) * tiles * K);
  s.rows.resize(size_t(kPoints) * std::max(C, K));
  s.zeros.assign(C, 0.f);

  for (int i = 0; i < images; ++i) {  // NCHW -> NHWC, 16 x 16 blocks
    const float* src = x + size_t(n0 + i) * C * plane;
    float* dst = s.image.data() + size_t(i) * plane * C;
    for (int p0 = 0; p0 < plane; p0 += 16)
      for (int c0 = 0; c0 < C; c0 += 16) {
        const int p1 = std::min(p0 + 16, plane), c1 = std::min(c0 + 16, C);
        for (int p = p0; p < p1; ++p)
#pragma GCC ivdep
          for (int c = c0; c < c1; ++c) dst[size_t(p) * C + c] = src[size_t(c) * plane + p];
      }
  }

  for (int t = 0; t < tiles; ++t) {  // input tiles -> points[xi][t][c]
    const int img = t / per_image, ty = (t / g.tiles_w) % g.tiles_h, tx = t % g.tiles_w;
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

  for (int xi = 0; xi < kPoints; ++xi) {  // products[xi] = points[xi] u[xi]
    const float* a = s.points.data() + size_t(xi) * tiles * C;
    float* c = s.products.data() + size_t(xi) * tiles * K;
    if (concurrent) {
      SmallGemm(false, false, tiles, K, C, a, u + size_t(xi) * C * K, 0.f, c);
    } else {
      RowMajorSgemm(tiles, K, C, a, u + size_t(xi) * C * K, c);
    }
  }

  for (int t = 0; t < tiles; ++t) {  // products -> output tiles (NHWC)
    const int img = t / per_image, ty = (t / g.tiles_w) % g.tiles_h, tx = t % g.tiles_w;
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

  for (int i = 0; i < images; ++i) {  // NHWC (tile cover) -> NCHW output, plus bias
    const float* src = s.result.data() + size_t(i) * rows * cols * K;
    float* dst = y + size_t(n0 + i) * K * g.out_h * g.out_w;
    for (int k0 = 0; k0 < K; k0 += 16) {
      const int k1 = std::min(k0 + 16, K);
      for (int r = 0; r < g.out_h; ++r)
        for (int k = k0; k < k1; ++k) {
          const float b = bias == nullptr ? 0.f : bias[k];
          float* out = dst + (size_t(k) * g.out_h + r) * g.out_w;
          const float* in = src + size_t(r) * cols * K + k;
          for (int col = 0; col < g.out_w; ++col) out[col] = in[size_t(col) * K] + b;
        }
    }
  }
}

// Built for AVX-512, AVX2 and the baseline; the loader picks one.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void RunBlockF2(
    const Geometry& g, const float* x, const float* u, const float* bias, float* y, int n0,
    int images, bool concurrent, Scratch& s) {
  RunBlock<2>(g, x, u, bias, y, n0, images, concurrent, s);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void RunBlockF4(
    const Geometry& g, const float* x, const float* u, const float* bias, float* y, int n0,
    int images, bool concurrent, Scratch& s) {
  RunBlock<4>(g, x, u, bias, y, n0, images, concurrent, s);
}

int64_t Entry(at::IntArrayRef v, size_t d) { return v.size() == 1 ? v[0] : v[d]; }

}  // namespace

bool WinogradApplies(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                     at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  if (!input.defined() || !weight.defined() || !input.is_cpu() || !weight.is_cpu() ||
      input.scalar_type() != at::kFloat || weight.scalar_type() != at::kFloat ||
      input.is_mkldnn() || input.is_sparse() || input.dim() != 4 || weight.dim() != 4 ||
      groups != 1 || weight.size(1) != input.size(1) || weight.size(2) != 3 ||
      weight.size(3) != 3 || !DirectBlasAvailable())
    return false;
  for (at::IntArrayRef v : {stride, padding, dilation})
    if (v.size() != 1 && v.size() != 2) return false;
  for (size_t d = 0; d < 2; ++d) {
    const int64_t pad = Entry(padding, d);
    if (Entry(stride, d) != 1 || Entry(dilation, d) != 1 || pad < 0 || pad > 2 ||
        input.size(2 + d) + 2 * pad - 2 < 1)
      return false;
  }
  // 32-bit indexing inside.
  return input.numel() < (int64_t{1} << 31) && weight.numel() < (int64_t{1} << 31);
}

WinogradTile ChooseWinogradTile(const at::Tensor& input, const at::Tensor& weight,
                                at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef dilation, int64_t groups) {
  const Mode mode = ModeFromEnvironment();
  if (mode == Mode::kOff || !WinogradApplies(input, weight, stride, padding, dilation, groups))
    return WinogradTile::kNone;
  if (mode == Mode::kF2) return WinogradTile::kF2;
  if (mode == Mode::kF4) return WinogradTile::kF4;
  // bench/conv_bench.cc on the Omniglot net's 64-channel layers (one
  // thread): F(4x4) 2.6x oneDNN on 75 images of 14x14 and 1.4x on 75 of
  // 7x7; F(2x2) 1.2x on 5 of 14x14; both lose on 3x3 outputs and on few
  // output pixels, where the weight transform and the scratch copies do not
  // amortize, and on narrow layers, where the GEMMs are too thin (16
  // channels, the ResNet cell's: 1.0x forward, 0.9x on 5 images; 32: 1.6x).
  const int64_t out_h = input.size(2) + 2 * Entry(padding, 0) - 2;
  const int64_t out_w = input.size(3) + 2 * Entry(padding, 1) - 2;
  if (input.size(1) < 32 || weight.size(0) < 32 || out_h < 6 || out_w < 6)
    return WinogradTile::kNone;
  const int64_t pixels = input.size(0) * out_h * out_w;
  if (pixels >= 2048) return WinogradTile::kF4;
  if (pixels >= 768) return WinogradTile::kF2;
  return WinogradTile::kNone;
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
  const int m = tile == WinogradTile::kF2 ? 2 : 4;
  Geometry g;
  g.n = input.size(0), g.c = input.size(1), g.h = input.size(2), g.w = input.size(3);
  g.k = weight.size(0);
  g.pad_h = Entry(padding, 0), g.pad_w = Entry(padding, 1);
  g.out_h = g.h + 2 * g.pad_h - 2, g.out_w = g.w + 2 * g.pad_w - 2;
  g.tiles_h = (g.out_h + m - 1) / m, g.tiles_w = (g.out_w + m - 1) / m;
  // Enough tiles per block for GEMMs the BLAS runs near its peak, few
  // enough that a block's points and products stay in this core's L2.
  const int per_image = g.tiles_h * g.tiles_w;
  g.images_per_block = std::max(1, std::min(g.n, (64 + per_image - 1) / per_image));

  const at::Tensor x = input.contiguous();
  const std::vector<float> u =
      m == 2 ? TransformWeights<2>(weight.contiguous()) : TransformWeights<4>(weight.contiguous());
  const at::Tensor b = has_bias ? bias->contiguous() : at::Tensor();
  at::Tensor y = at::empty({g.n, g.k, g.out_h, g.out_w}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* bp = has_bias ? b.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const int blocks = (g.n + g.images_per_block - 1) / g.images_per_block;
  const bool concurrent =
      at::in_parallel_region() || (blocks > 1 && at::get_num_threads() > 1);
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    thread_local Scratch scratch;
    for (int64_t blk = begin; blk < end; ++blk) {
      const int n0 = static_cast<int>(blk) * g.images_per_block;
      const int images = std::min(g.images_per_block, g.n - n0);
      (m == 2 ? RunBlockF2 : RunBlockF4)(g, xp, u.data(), bp, yp, n0, images, concurrent,
                                          scratch);
    }
  });
  return y;
}

}  // namespace metafuse::runtime
