#include "runtime/compute/max_pool.h"

// The window loops vectorize (compares and selects over lanes) only at -O3
// and with AVX2's blends: built three times below, once per instruction
// set, and the CPU's best chosen at run time (as runtime/compute/small_gemm.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include <immintrin.h>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "runtime/compute/cpu_isa.h"

namespace metafuse::runtime {
namespace {

// ATen's rule for the next element of a window: it replaces the running
// maximum if larger, or if it is a NaN. Written as selects, not branches:
// on random data the comparison is a coin toss, and a mispredicted branch
// per element is what makes ATen's own NCHW kernel slow.
template <typename T>
__attribute__((always_inline)) inline void Consider(T v, int64_t i, T& best, int64_t& at) {
  const bool take = (v > best) | std::isnan(v);
  best = take ? v : best;
  at = take ? i : at;
}

// One plane: out[oh, ow] = max over the window at (oh * kh, ow * kw). A
// window's first element always starts it (it beats the -inf ATen starts
// from, or is -inf itself, or a NaN: the same value and index).
template <typename T>
__attribute__((always_inline)) inline void PoolPlane(const T* __restrict__ in, int64_t width,
                                                     int64_t out_h, int64_t out_w, int64_t kh,
                                                     int64_t kw, T* __restrict__ out,
                                                     int64_t* __restrict__ index) {
  for (int64_t oh = 0; oh < out_h; ++oh) {
    const int64_t h0 = oh * kh;
    if (kh == 2 && kw == 2) {
      const T* r0 = in + h0 * width;
      const T* r1 = r0 + width;
      for (int64_t ow = 0; ow < out_w; ++ow) {
        const int64_t w0 = 2 * ow, i0 = h0 * width + w0;
        T best = r0[w0];
        int64_t at = i0;
        Consider(r0[w0 + 1], i0 + 1, best, at);
        Consider(r1[w0], i0 + width, best, at);
        Consider(r1[w0 + 1], i0 + width + 1, best, at);
        out[oh * out_w + ow] = best;
        index[oh * out_w + ow] = at;
      }
      continue;
    }
    for (int64_t ow = 0; ow < out_w; ++ow) {
      const int64_t w0 = ow * kw;
      T best = in[h0 * width + w0];
      int64_t at = h0 * width + w0;
      for (int64_t h = h0; h < h0 + kh; ++h) {
        for (int64_t w = (h == h0 ? w0 + 1 : w0); w < w0 + kw; ++w) {
          Consider(in[h * width + w], h * width + w, best, at);
        }
      }
      out[oh * out_w + ow] = best;
      index[oh * out_w + ow] = at;
    }
  }
}

// Planes [begin, end) of `in` (each height x width) into `out` / `index`.
template <typename T>
__attribute__((always_inline)) inline void PoolPlanes(int64_t begin, int64_t end, const T* in,
                                                      int64_t height, int64_t width,
                                                      int64_t out_h, int64_t out_w, int64_t kh,
                                                      int64_t kw, T* out, int64_t* index) {
  for (int64_t p = begin; p < end; ++p) {
    PoolPlane<T>(in + p * height * width, width, out_h, out_w, kh, kw, out + p * out_h * out_w,
                 index + p * out_h * out_w);
  }
}

// The 2x2 float32 windows of one plane, 16 outputs a step: both input rows
// loaded as 32 lanes, split into even and odd columns by a permute, so a
// row of any width runs vectorized (the Omniglot net's 14- and 7-wide
// output rows left the compiler's loop scalar: 3.5 ns per input element).
// The window's four elements are taken as two pairs, (r0[w], r0[w+1]) and
// (r1[w], r1[w+1]), then the pairs: a later element replaces the running
// maximum if larger or a NaN in both orders, so the earliest maximum and
// the last NaN win either way, and the values and indices are ATen's.
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"))) void Pool2x2PlaneAvx512(
    const float* __restrict__ in, int64_t width, int64_t out_h, int64_t out_w,
    float* __restrict__ out, int64_t* __restrict__ index) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                         28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i lane_column = _mm512_slli_epi32(  // 2 * lane: a window's first column
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
  const __m512i one = _mm512_set1_epi32(1);
  auto take = [](__m512 later, __m512 best) {  // later > best, or later is a NaN
    return static_cast<__mmask16>(_mm512_cmp_ps_mask(later, best, _CMP_GT_OQ) |
                                  _mm512_cmp_ps_mask(later, later, _CMP_UNORD_Q));
  };
  for (int64_t oh = 0; oh < out_h; ++oh) {
    const float* r0 = in + 2 * oh * width;
    const float* r1 = r0 + width;
    for (int64_t ow = 0; ow < out_w; ow += 16) {
      const int64_t n = std::min<int64_t>(16, out_w - ow);  // outputs this step
      const int64_t lo = std::min<int64_t>(16, 2 * n), hi = 2 * n - lo;
      const __mmask16 lo_mask = static_cast<__mmask16>((1u << lo) - 1);
      const __mmask16 hi_mask = static_cast<__mmask16>((1u << hi) - 1);
      const __mmask16 out_mask = static_cast<__mmask16>((1u << n) - 1);
      const float* a = r0 + 2 * ow;
      const float* b = r1 + 2 * ow;
      const __m512 a_lo = _mm512_maskz_loadu_ps(lo_mask, a);
      const __m512 a_hi = _mm512_maskz_loadu_ps(hi_mask, a + 16);
      const __m512 b_lo = _mm512_maskz_loadu_ps(lo_mask, b);
      const __m512 b_hi = _mm512_maskz_loadu_ps(hi_mask, b + 16);
      const __m512 a0 = _mm512_permutex2var_ps(a_lo, even, a_hi);
      const __m512 a1 = _mm512_permutex2var_ps(a_lo, odd, a_hi);
      const __m512 b0 = _mm512_permutex2var_ps(b_lo, even, b_hi);
      const __m512 b1 = _mm512_permutex2var_ps(b_lo, odd, b_hi);
      const __m512i column = _mm512_add_epi32(lane_column,
                                              _mm512_set1_epi32(static_cast<int>(2 * ow)));
      const __mmask16 ta = take(a1, a0), tb = take(b1, b0);
      const __m512 pa = _mm512_mask_blend_ps(ta, a0, a1);
      const __m512 pb = _mm512_mask_blend_ps(tb, b0, b1);
      // Plane indices of each pair's first element, + 1 where the second won.
      const __m512i row0 = _mm512_add_epi32(
          column, _mm512_set1_epi32(static_cast<int>(2 * oh * width)));
      const __m512i row1 = _mm512_add_epi32(row0, _mm512_set1_epi32(static_cast<int>(width)));
      const __m512i ia = _mm512_mask_add_epi32(row0, ta, row0, one);
      const __m512i ib = _mm512_mask_add_epi32(row1, tb, row1, one);
      const __mmask16 t = take(pb, pa);
      _mm512_mask_storeu_ps(out + oh * out_w + ow, out_mask, _mm512_mask_blend_ps(t, pa, pb));
      const __m512i at = _mm512_mask_blend_epi32(t, ia, ib);
      _mm512_mask_storeu_epi64(index + oh * out_w + ow, static_cast<__mmask8>(out_mask),
                               _mm512_cvtepi32_epi64(_mm512_castsi512_si256(at)));
      _mm512_mask_storeu_epi64(index + oh * out_w + ow + 8, static_cast<__mmask8>(out_mask >> 8),
                               _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(at, 1)));
    }
  }
}

template <typename T>
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void PoolPlanesAvx512(
    int64_t begin, int64_t end, const T* in, int64_t height, int64_t width, int64_t out_h,
    int64_t out_w, int64_t kh, int64_t kw, T* out, int64_t* index) {
  if constexpr (std::is_same_v<T, float>) {
    if (kh == 2 && kw == 2 && width * height < (int64_t{1} << 30)) {
      for (int64_t p = begin; p < end; ++p) {
        Pool2x2PlaneAvx512(in + p * height * width, width, out_h, out_w,
                           out + p * out_h * out_w, index + p * out_h * out_w);
      }
      return;
    }
  }
  PoolPlanes<T>(begin, end, in, height, width, out_h, out_w, kh, kw, out, index);
}

template <typename T>
__attribute__((target("avx2,fma"))) void PoolPlanesAvx2(int64_t begin, int64_t end, const T* in,
                                                        int64_t height, int64_t width,
                                                        int64_t out_h, int64_t out_w, int64_t kh,
                                                        int64_t kw, T* out, int64_t* index) {
  PoolPlanes<T>(begin, end, in, height, width, out_h, out_w, kh, kw, out, index);
}

template <typename T>
void PoolPlanesBase(int64_t begin, int64_t end, const T* in, int64_t height, int64_t width,
                    int64_t out_h, int64_t out_w, int64_t kh, int64_t kw, T* out,
                    int64_t* index) {
  PoolPlanes<T>(begin, end, in, height, width, out_h, out_w, kh, kw, out, index);
}

template <typename T>
auto PlanesKernel() {
  return BestIsa() == Isa::kAvx512 ? PoolPlanesAvx512<T>
         : BestIsa() == Isa::kAvx2 ? PoolPlanesAvx2<T>
                                   : PoolPlanesBase<T>;
}

template <typename T>
void Pool(const at::Tensor& x, int64_t kh, int64_t kw, at::Tensor& values, at::Tensor& indices) {
  const int64_t height = x.size(-2), width = x.size(-1);
  const int64_t planes = x.numel() / (height * width);
  const int64_t out_h = values.size(-2), out_w = values.size(-1);
  const T* in = x.data_ptr<T>();
  T* out = values.data_ptr<T>();
  int64_t* index = indices.data_ptr<int64_t>();
  const auto run = PlanesKernel<T>();
  // Planes split over ATen's threads, at least ~32k input elements a chunk.
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, height * width));
  at::parallel_for(0, planes, grain, [&](int64_t begin, int64_t end) {
    run(begin, end, in, height, width, out_h, out_w, kh, kw, out, index);
  });
}

// A 1- or 2-element int list as (h, w), as ATen reads kernel_size etc.
std::pair<int64_t, int64_t> Pair(at::IntArrayRef v, int64_t fallback) {
  if (v.empty()) return {fallback, fallback};
  return {v[0], v.size() > 1 ? v[1] : v[0]};
}

}  // namespace

bool PlaneMaxPoolApplies(const at::Tensor& input, at::IntArrayRef kernel, at::IntArrayRef stride,
                         at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  if (!input.defined() || !input.is_cpu() || (input.dim() != 3 && input.dim() != 4) ||
      (input.scalar_type() != at::kFloat && input.scalar_type() != at::kDouble) ||
      !input.is_contiguous() || input.numel() == 0 || ceil_mode) {
    return false;
  }
  // Programs run without autograd; a call that records a graph keeps ATen's.
  if (at::GradMode::is_enabled() && input.requires_grad()) return false;
  if (kernel.size() < 1 || kernel.size() > 2) return false;
  const auto k = Pair(kernel, 0);
  const auto s = Pair(stride, -1);
  const auto p = Pair(padding, 0);
  const auto d = Pair(dilation, 1);
  const bool stride_is_kernel = stride.empty() || (s.first == k.first && s.second == k.second);
  return k.first >= 1 && k.second >= 1 && stride_is_kernel && p.first == 0 && p.second == 0 &&
         d.first == 1 && d.second == 1 && input.size(-2) >= k.first &&
         input.size(-1) >= k.second;
}

std::tuple<at::Tensor, at::Tensor> MaxPool2dByPlanes(const at::Tensor& input,
                                                     at::IntArrayRef kernel) {
  const auto k = Pair(kernel, 0);
  TORCH_CHECK(k.first >= 1 && k.second >= 1 && input.dim() >= 3 &&
                  input.size(-2) >= k.first && input.size(-1) >= k.second,
              "metafuse max_pool2d: input ", input.sizes(), " and kernel ", kernel,
              " do not pool");
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes[sizes.size() - 2] = input.size(-2) / k.first;
  sizes[sizes.size() - 1] = input.size(-1) / k.second;
  const at::Tensor x = input.contiguous();
  at::Tensor values = at::empty(sizes, x.options());
  at::Tensor indices = at::empty(sizes, x.options().dtype(at::kLong));
  if (x.scalar_type() == at::kFloat) {
    Pool<float>(x, k.first, k.second, values, indices);
  } else {
    Pool<double>(x, k.first, k.second, values, indices);
  }
  return {values, indices};
}

void MaxPoolPlanes(const float* in, int64_t planes, int64_t height, int64_t width, int64_t kh,
                   int64_t kw, float* out, int64_t* index) {
  PlanesKernel<float>()(0, planes, in, height, width, height / kh, width / kw, kh, kw, out, index);
}

void MaxPoolPlanes(const double* in, int64_t planes, int64_t height, int64_t width, int64_t kh,
                   int64_t kw, double* out, int64_t* index) {
  PlanesKernel<double>()(0, planes, in, height, width, height / kh, width / kw, kh, kw, out,
                         index);
}

torch::jit::Operation MakeMaxPoolOperation(torch::jit::Operation aten) {
  return [aten](torch::jit::Stack& stack) mutable {
    auto args = torch::jit::last(stack, 6);
    const at::Tensor& input = args[0].toTensor();
    const std::vector<int64_t> kernel = args[1].toIntVector(), stride = args[2].toIntVector(),
                               padding = args[3].toIntVector(),
                               dilation = args[4].toIntVector();
    if (!PlaneMaxPoolApplies(input, kernel, stride, padding, dilation, args[5].toBool())) {
      aten(stack);
      return;
    }
    auto [values, indices] = MaxPool2dByPlanes(input, kernel);
    torch::jit::drop(stack, 6);
    stack.emplace_back(std::move(values));
    stack.emplace_back(std::move(indices));
  };
}

}  // namespace metafuse::runtime
