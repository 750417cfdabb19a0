#include "runtime/compute/direct_convolution.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace metafuse::runtime {
namespace {

// 32-byte vectors: 8 floats or 4 doubles (GCC vector extensions, which each
// target clone below lowers to its own instructions), and the integer
// vectors of the same lanes, for lane masks.
template <typename T>
struct VectorOf;
template <>
struct VectorOf<float> {
  typedef float type __attribute__((vector_size(32)));
  typedef int32_t mask __attribute__((vector_size(32)));
};
template <>
struct VectorOf<double> {
  typedef double type __attribute__((vector_size(32)));
  typedef int64_t mask __attribute__((vector_size(32)));
};

template <typename V, typename T>
__attribute__((always_inline)) inline V Load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

constexpr int64_t kMaxChannels = 3;

int64_t PaddingAt(at::IntArrayRef padding, size_t d) {
  return padding.size() == 1 ? padding[0] : padding[d];
}

// Sizes of one convolution and of the zero-padded copy of its input: each
// image's channels as rows `wp` wide, the input at (ph, pw), zeros around
// it and up to a whole number of vectors past the last output column, so
// that every vector load is inside the copy.
struct Geometry {
  int64_t n, channels, h, w, k, ph, pw, ho, wo, hp, wp, chunks;

  Geometry(const at::Tensor& input, int64_t out_channels, at::IntArrayRef padding, int64_t lanes)
      : n(input.size(0)),
        channels(input.size(1)),
        h(input.size(2)),
        w(input.size(3)),
        k(out_channels),
        ph(PaddingAt(padding, 0)),
        pw(PaddingAt(padding, 1)),
        ho(h + 2 * ph - 2),
        wo(w + 2 * pw - 2),
        hp(h + 2 * ph),
        chunks((wo + lanes - 1) / lanes) {
    wp = chunks * lanes + 2;
  }
  int64_t PaddedImage() const { return channels * hp * wp; }
  // Where output vector q of a row starts. On rows at least a vector wide
  // the last one ends at the row's end, overlapping the one before it, so
  // that every load and store is a whole vector; on narrower rows (wide <
  // lanes) one vector covers the row and the part past it is not stored.
  int64_t ChunkStart(int64_t q, int64_t lanes) const {
    return wo >= lanes ? std::min(q * lanes, wo - lanes) : 0;
  }
};

template <typename T>
std::vector<T> PaddedCopy(const T* x, const Geometry& g, int64_t begin, int64_t end) {
  std::vector<T> padded(static_cast<size_t>((end - begin) * g.PaddedImage()), T(0));
  for (int64_t image = begin; image < end; ++image) {
    for (int64_t c = 0; c < g.channels; ++c) {
      const T* plane = x + (image * g.channels + c) * g.h * g.w;
      T* rows = padded.data() + (image - begin) * g.PaddedImage() + c * g.hp * g.wp;
      for (int64_t r = 0; r < g.h; ++r)
        std::memcpy(rows + (r + g.ph) * g.wp + g.pw, plane + r * g.w,
                    static_cast<size_t>(g.w) * sizeof(T));
    }
  }
  return padded;
}

// The C x 9 input vectors under output vector (oh, ow0) of one padded
// image, tap (c, i, j) at c * 9 + i * 3 + j (the weight's order).
template <int C, typename T, typename V>
__attribute__((always_inline)) inline void LoadTaps(const T* padded, const Geometry& g,
                                                    int64_t oh, int64_t ow0, V* in) {
#pragma GCC unroll 27
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 3
    for (int i = 0; i < 3; ++i)
#pragma GCC unroll 3
      for (int j = 0; j < 3; ++j)
        in[(c * 3 + i) * 3 + j] = Load<V>(padded + (c * g.hp + oh + i) * g.wp + ow0 + j);
}

// One image: out[k, oh, ow0 + lane] for every output channel from the
// C x 9 input vectors at (oh, ow0), loaded once.
template <typename T, int C>
__attribute__((always_inline)) inline void ForwardImage(const T* padded, const Geometry& g,
                                                        const T* weight, const T* bias, T* out) {
  using V = typename VectorOf<T>::type;
  constexpr int64_t kLanes = sizeof(V) / sizeof(T);
  constexpr int kTaps = C * 9;
  const int64_t plane = g.ho * g.wo;
  const bool narrow = g.wo < kLanes;
  for (int64_t oh = 0; oh < g.ho; ++oh) {
    for (int64_t q = 0; q < g.chunks; ++q) {
      const int64_t ow0 = g.ChunkStart(q, kLanes);
      V in[kTaps];
      LoadTaps<C>(padded, g, oh, ow0, in);
      T* o = out + oh * g.wo + ow0;
      for (int64_t k = 0; k < g.k; ++k, o += plane) {
        V acc = V{} + (bias != nullptr ? bias[k] : T(0));
        const T* wk = weight + k * kTaps;
#pragma GCC unroll 27
        for (int t = 0; t < kTaps; ++t) acc += wk[t] * in[t];
        if (narrow) {
          T lanes[kLanes];
          std::memcpy(lanes, &acc, sizeof acc);
          std::copy(lanes, lanes + g.wo, o);
        } else {
          std::memcpy(o, &acc, sizeof acc);
        }
      }
    }
  }
}

// Output channels [k_begin, k_end)'s C x 9 weight-gradient sums over every
// image: per channel, accumulators of products of a gradient row vector
// with the input vectors under its taps, added across lanes at the end.
// Images outermost, so that the gradient is read in memory order (plane
// by plane, each a few KB: read channel-first, every plane would restart
// the hardware prefetcher); the accumulators wait in `acc` between images.
template <typename T, int C>
__attribute__((always_inline)) inline void WeightGradientChannels(
    const T* padded, const Geometry& g, const T* dy, int64_t k_begin, int64_t k_end, T* acc,
    T* dw) {
  using V = typename VectorOf<T>::type;
  using Mask = typename VectorOf<T>::mask;
  constexpr int64_t kLanes = sizeof(V) / sizeof(T);
  constexpr int kTaps = C * 9;
  Mask lane_index;
  for (int64_t lane = 0; lane < kLanes; ++lane) lane_index[lane] = lane;
  const bool narrow = g.wo < kLanes;
  std::fill(acc, acc + (k_end - k_begin) * kTaps * kLanes, T(0));
  for (int64_t image = 0; image < g.n; ++image) {
    const T* x = padded + image * g.PaddedImage();
    for (int64_t k = k_begin; k < k_end; ++k) {
      const T* rows = dy + (image * g.k + k) * g.ho * g.wo;
      V sums[kTaps];
      T* saved = acc + (k - k_begin) * kTaps * kLanes;
#pragma GCC unroll 27
      for (int t = 0; t < kTaps; ++t) sums[t] = Load<V>(saved + t * kLanes);
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        for (int64_t q = 0; q < g.chunks; ++q) {
          const int64_t ow0 = g.ChunkStart(q, kLanes);
          V d;
          if (narrow) {  // the row's values, 0 past it
            T lanes[kLanes] = {};
            std::copy(rows + oh * g.wo, rows + (oh + 1) * g.wo, lanes);
            std::memcpy(&d, lanes, sizeof d);
          } else {
            // The lanes an overlapping last vector shares with the one
            // before it were counted there: 0 here.
            d = Load<V>(rows + oh * g.wo + ow0);
            const Mask keep = lane_index >= static_cast<int>(q * kLanes - ow0);
            d = reinterpret_cast<V>(reinterpret_cast<Mask>(d) & keep);
          }
          // Each input vector is read, used and dropped (all C x 9 at once
          // would not stay in registers beside the sums).
#pragma GCC unroll 27
          for (int c = 0; c < C; ++c)
#pragma GCC unroll 3
            for (int i = 0; i < 3; ++i)
#pragma GCC unroll 3
              for (int j = 0; j < 3; ++j)
                sums[(c * 3 + i) * 3 + j] +=
                    d * Load<V>(x + (c * g.hp + oh + i) * g.wp + ow0 + j);
        }
      }
#pragma GCC unroll 27
      for (int t = 0; t < kTaps; ++t) std::memcpy(saved + t * kLanes, &sums[t], sizeof(V));
    }
  }
  for (int64_t k = k_begin; k < k_end; ++k) {
    for (int t = 0; t < kTaps; ++t) {
      const T* v = acc + ((k - k_begin) * kTaps + t) * kLanes;
      T sum = 0;
      for (int64_t lane = 0; lane < kLanes; ++lane) sum += v[lane];
      dw[k * kTaps + t] = sum;
    }
  }
}

// Built for AVX-512, AVX2 and the baseline; the loader picks one.
#define METAFUSE_DIRECT_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

#define METAFUSE_DIRECT_KERNELS(T, C)                                                           \
  METAFUSE_DIRECT_CLONES void Forward_##T##_##C(const T* padded, const Geometry& g,             \
                                                const T* weight, const T* bias, T* out) {       \
    ForwardImage<T, C>(padded, g, weight, bias, out);                                           \
  }                                                                                             \
  METAFUSE_DIRECT_CLONES void WeightGradient_##T##_##C(                                        \
      const T* padded, const Geometry& g, const T* dy, int64_t k_begin, int64_t k_end,          \
      T* acc, T* dw) {                                                                          \
    WeightGradientChannels<T, C>(padded, g, dy, k_begin, k_end, acc, dw);                       \
  }
METAFUSE_DIRECT_KERNELS(float, 1)
METAFUSE_DIRECT_KERNELS(float, 2)
METAFUSE_DIRECT_KERNELS(float, 3)
METAFUSE_DIRECT_KERNELS(double, 1)
METAFUSE_DIRECT_KERNELS(double, 2)
METAFUSE_DIRECT_KERNELS(double, 3)
#undef METAFUSE_DIRECT_KERNELS

template <typename T>
struct Kernels;
template <>
struct Kernels<float> {
  static constexpr decltype(&Forward_float_1) kForward[] = {Forward_float_1, Forward_float_2,
                                                            Forward_float_3};
  static constexpr decltype(&WeightGradient_float_1) kWeightGradient[] = {
      WeightGradient_float_1, WeightGradient_float_2, WeightGradient_float_3};
};
template <>
struct Kernels<double> {
  static constexpr decltype(&Forward_double_1) kForward[] = {Forward_double_1, Forward_double_2,
                                                             Forward_double_3};
  static constexpr decltype(&WeightGradient_double_1) kWeightGradient[] = {
      WeightGradient_double_1, WeightGradient_double_2, WeightGradient_double_3};
};

template <typename T>
constexpr int64_t Lanes() {
  return sizeof(typename VectorOf<T>::type) / sizeof(T);
}

template <typename T>
void Forward(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
             const Geometry& g, at::Tensor& out) {
  const T* xp = x.data_ptr<T>();
  const T* wp = weight.data_ptr<T>();
  at::Tensor b;
  if (bias.has_value() && bias->defined()) b = bias->contiguous();
  const T* bp = b.defined() ? b.data_ptr<T>() : nullptr;
  T* op = out.data_ptr<T>();
  const auto kernel = Kernels<T>::kForward[g.channels - 1];
  at::parallel_for(0, g.n, 1, [&](int64_t begin, int64_t end) {
    const std::vector<T> padded = PaddedCopy(xp, g, begin, end);
    for (int64_t image = begin; image < end; ++image)
      kernel(padded.data() + (image - begin) * g.PaddedImage(), g, wp, bp,
             op + image * g.k * g.ho * g.wo);
  });
}

template <typename T>
void WeightGradientInto(const at::Tensor& x, const at::Tensor& dy, const Geometry& g,
                        at::Tensor& dw) {
  const std::vector<T> padded = PaddedCopy(x.data_ptr<T>(), g, 0, g.n);
  const T* dyp = dy.data_ptr<T>();
  T* out = dw.data_ptr<T>();
  const auto kernel = Kernels<T>::kWeightGradient[g.channels - 1];
  at::parallel_for(0, g.k, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> acc(static_cast<size_t>((end - begin) * g.channels * 9 * Lanes<T>()));
    kernel(padded.data(), g, dyp, begin, end, acc.data(), out);
  });
}

bool PaddingFits(at::IntArrayRef padding) {
  return (padding.size() == 1 || padding.size() == 2) &&
         std::all_of(padding.begin(), padding.end(), [](int64_t p) { return p >= 0 && p <= 2; });
}

bool AllOnes(at::IntArrayRef v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; });
}

bool FloatingCpu4d(const at::Tensor& t, at::ScalarType type) {
  return t.defined() && t.is_cpu() && t.dim() == 4 && t.scalar_type() == type &&
         !t.is_mkldnn() && !t.is_sparse();
}

}  // namespace

bool DirectConvolutionApplies(const at::Tensor& input, const at::Tensor& weight,
                              at::IntArrayRef stride, at::IntArrayRef padding,
                              at::IntArrayRef dilation, int64_t groups) {
  if (!input.defined()) return false;
  const auto type = input.scalar_type();
  if ((type != at::kFloat && type != at::kDouble) || !FloatingCpu4d(input, type) ||
      !FloatingCpu4d(weight, type))
    return false;
  if (groups != 1 || !AllOnes(stride) || !AllOnes(dilation) || !PaddingFits(padding))
    return false;
  const int64_t channels = input.size(1);
  return weight.size(1) == channels && channels >= 1 && channels <= kMaxChannels &&
         weight.size(2) == 3 && weight.size(3) == 3 &&
         input.size(2) + 2 * PaddingAt(padding, 0) >= 3 &&
         input.size(3) + 2 * PaddingAt(padding, 1) >= 3;
}

at::Tensor Conv2dDirect(const at::Tensor& input, const at::Tensor& weight,
                        const c10::optional<at::Tensor>& bias, at::IntArrayRef padding) {
  const std::vector<int64_t> ones = {1, 1};
  TORCH_CHECK(DirectConvolutionApplies(input, weight, ones, padding, ones, 1),
              "metafuse direct conv2d: input ", input.sizes(), " and weight ", weight.sizes(),
              " are not a float 3x3 convolution of 1 to 3 channels with padding 0 to 2");
  if (bias.has_value() && bias->defined())
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == weight.size(0) &&
                    bias->scalar_type() == input.scalar_type(),
                "metafuse direct conv2d: bias must be [", weight.size(0), "] of the input's "
                "dtype, got ", bias->sizes());
  const at::Tensor x = input.contiguous(), w = weight.contiguous();
  if (x.scalar_type() == at::kFloat) {
    const Geometry g(x, w.size(0), padding, Lanes<float>());
    at::Tensor out = at::empty({g.n, g.k, g.ho, g.wo}, x.options());
    Forward<float>(x, w, bias, g, out);
    return out;
  }
  const Geometry g(x, w.size(0), padding, Lanes<double>());
  at::Tensor out = at::empty({g.n, g.k, g.ho, g.wo}, x.options());
  Forward<double>(x, w, bias, g, out);
  return out;
}

bool DirectWeightGradientApplies(const at::Tensor& input, const at::Tensor& grad_output,
                                 at::IntArrayRef padding) {
  if (!input.defined() || !grad_output.defined() || !PaddingFits(padding)) return false;
  const auto type = input.scalar_type();
  if ((type != at::kFloat && type != at::kDouble) || !FloatingCpu4d(input, type) ||
      !FloatingCpu4d(grad_output, type))
    return false;
  return input.size(1) >= 1 && input.size(1) <= kMaxChannels &&
         grad_output.size(0) == input.size(0) &&
         grad_output.size(2) == input.size(2) + 2 * PaddingAt(padding, 0) - 2 &&
         grad_output.size(3) == input.size(3) + 2 * PaddingAt(padding, 1) - 2 &&
         grad_output.size(2) >= 1 && grad_output.size(3) >= 1;
}

at::Tensor WeightGradientDirect(const at::Tensor& input, const at::Tensor& grad_output,
                                at::IntArrayRef padding) {
  TORCH_CHECK(DirectWeightGradientApplies(input, grad_output, padding),
              "metafuse direct weight gradient: input ", input.sizes(), " and grad_output ",
              grad_output.sizes(), " are not a float 3x3 convolution of 1 to 3 channels with "
              "padding 0 to 2");
  const at::Tensor x = input.contiguous(), dy = grad_output.contiguous();
  at::Tensor dw = at::empty({dy.size(1), x.size(1), 3, 3}, x.options());
  if (x.scalar_type() == at::kFloat) {
    WeightGradientInto<float>(x, dy, Geometry(x, dy.size(1), padding, Lanes<float>()), dw);
  } else {
    WeightGradientInto<double>(x, dy, Geometry(x, dy.size(1), padding, Lanes<double>()), dw);
  }
  return dw;
}

}  // namespace metafuse::runtime
