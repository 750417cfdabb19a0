#include "runtime/compute/convolution.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/compute/direct_convolution.h"
#include "runtime/tuning/measured_choice.h"
#include "runtime/compute/small_gemm.h"
#include "runtime/compute/winograd_convolution.h"

namespace metafuse::runtime {
namespace {

// One spatial dimension of a convolution.
struct Axis {
  int64_t in, out, kernel, stride, padding, dilation;

  // The output positions [first, last) whose input position for kernel tap
  // `tap` lies inside the input.
  std::pair<int64_t, int64_t> Inside(int64_t tap) const {
    const int64_t offset = tap * dilation - padding;
    const int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    const int64_t limit = in - 1 - offset;
    const int64_t last = limit < 0 ? 0 : limit / stride + 1;
    const int64_t end = std::min(last, out);
    return {std::min(first, end), end};
  }
};

// The patches of `channels` input planes (x: [channels, h.in, w.in]) as
// GEMM rows: row (c, i, j) holds x[c, oh * sh - ph + i * dh, ow * sw - pw +
// j * dw] for every output position (0 outside the input), rows `stride`
// apart, zero from h.out * w.out to the stride.
template <typename T>
void PackPatches(const T* x, int64_t channels, const Axis& h, const Axis& w, T* packed,
                 int64_t stride) {
  const int64_t plane = h.out * w.out;
  T* row = packed;
  for (int64_t c = 0; c < channels; ++c) {
    const T* xc = x + c * h.in * w.in;
    for (int64_t i = 0; i < h.kernel; ++i) {
      for (int64_t j = 0; j < w.kernel; ++j, row += stride) {
        const auto [lo, hi] = w.Inside(j);
        const int64_t offset = j * w.dilation - w.padding;
        for (int64_t oh = 0; oh < h.out; ++oh) {
          T* out = row + oh * w.out;
          const int64_t ih = oh * h.stride - h.padding + i * h.dilation;
          if (ih < 0 || ih >= h.in) {
            std::fill(out, out + w.out, T(0));
            continue;
          }
          const T* in = xc + ih * w.in + offset;
          std::fill(out, out + lo, T(0));
          if (w.stride == 1) {
            std::memcpy(out + lo, in + lo, static_cast<size_t>(hi - lo) * sizeof(T));
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) out[ow] = in[ow * w.stride];
          }
          std::fill(out + hi, out + w.out, T(0));
        }
        std::fill(row + plane, row + stride, T(0));
      }
    }
  }
}

template <typename T>
void AddBias(at::Tensor& out, const c10::optional<at::Tensor>& bias) {
  if (!bias.has_value() || !bias->defined()) return;
  const at::Tensor b = bias->contiguous();
  const T* bp = b.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const int64_t n = out.size(0), channels = out.size(1), plane = out.size(2) * out.size(3);
  at::parallel_for(0, n * channels, 16, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      T* p = op + item * plane;
      const T value = bp[item % channels];
      for (int64_t q = 0; q < plane; ++q) p[q] += value;
    }
  });
}

template <typename T>
void Conv2dInto(const at::Tensor& x, const at::Tensor& weight, at::Tensor& out, const Axis& h,
                const Axis& w, int64_t groups) {
  const int64_t n = x.size(0), channels = x.size(1), group_in = weight.size(1);
  const int64_t group_out = weight.size(0) / groups;
  const int64_t depth = group_in * h.kernel * w.kernel, plane = h.out * w.out;
  const int64_t stride = SmallGemmPackedStride(plane, sizeof(T));
  const T* xp = x.data_ptr<T>();
  const T* wp = weight.data_ptr<T>();
  T* op = out.data_ptr<T>();
  at::parallel_for(0, n * groups, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<T> packed;
    packed.resize(static_cast<size_t>(depth * stride));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / groups, g = item % groups;
      PackPatches(xp + (b * channels + g * group_in) * h.in * w.in, group_in, h, w,
                  packed.data(), stride);
      SmallGemmPacked(group_out, plane, depth, wp + g * group_out * depth, depth, 1,
                      packed.data(), stride, T(0),
                      op + (b * weight.size(0) + g * group_out) * plane, plane);
    }
  });
}

// Transposed convolution: per image and group, columns = W_g^T x (one row
// per output channel and kernel tap, one column per input position), then
// each column entry added at its output position (col2im).
template <typename T>
void ConvTranspose2dInto(const at::Tensor& x, const at::Tensor& weight, at::Tensor& out,
                         const Axis& h, const Axis& w, int64_t groups) {
  const int64_t n = x.size(0), channels = x.size(1), group_in = channels / groups;
  const int64_t group_out = weight.size(1), out_channels = group_out * groups;
  const int64_t taps = h.kernel * w.kernel, rows = group_out * taps;
  const int64_t positions = h.in * w.in, out_plane = h.out * w.out;
  const int64_t stride = SmallGemmPackedStride(positions, sizeof(T));
  const T* xp = x.data_ptr<T>();
  const T* wp = weight.data_ptr<T>();
  T* op = out.data_ptr<T>();
  at::parallel_for(0, n * groups, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<T> packed, columns;
    packed.resize(static_cast<size_t>(group_in * stride));
    columns.resize(static_cast<size_t>(rows * positions));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / groups, g = item % groups;
      const T* xg = xp + (b * channels + g * group_in) * positions;
      for (int64_t c = 0; c < group_in; ++c) {
        T* row = packed.data() + c * stride;
        std::memcpy(row, xg + c * positions, static_cast<size_t>(positions) * sizeof(T));
        std::fill(row + positions, row + stride, T(0));
      }
      // op(A) = W_g^T: element (row r, step c) is W_g[c, r].
      SmallGemmPacked(rows, positions, group_in, wp + g * group_in * rows, 1, rows,
                      packed.data(), stride, T(0), columns.data(), positions);
      T* image = op + (b * out_channels + g * group_out) * out_plane;
      for (int64_t co = 0; co < group_out; ++co) {
        T* plane = image + co * out_plane;
        for (int64_t i = 0; i < h.kernel; ++i) {
          for (int64_t j = 0; j < w.kernel; ++j) {
            const T* column = columns.data() + ((co * h.kernel + i) * w.kernel + j) * positions;
            for (int64_t ih = 0; ih < h.in; ++ih) {
              const int64_t oh = ih * h.stride - h.padding + i * h.dilation;
              if (oh < 0 || oh >= h.out) continue;
              T* target = plane + oh * w.out;
              const T* source = column + ih * w.in;
              for (int64_t iw = 0; iw < w.in; ++iw) {
                const int64_t ow = iw * w.stride - w.padding + j * w.dilation;
                if (ow >= 0 && ow < w.out) target[ow] += source[iw];
              }
            }
          }
        }
      }
    }
  });
}

int64_t At(at::IntArrayRef values, size_t i, const char* what) {
  TORCH_CHECK(values.size() == 1 || values.size() == 2, "metafuse convolution: `", what,
              "` must have 1 or 2 entries, got ", values.size());
  return values.size() == 1 ? values[0] : values[i];
}

// Spatial dimension d (0: height, 1: width) of a convolution, all but its
// output size, which differs between a convolution and its transpose.
Axis SpatialAxis(const at::Tensor& input, const at::Tensor& weight, size_t d,
                 at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                 const char* op) {
  Axis a;
  a.in = input.size(2 + d);
  a.kernel = weight.size(2 + d);
  a.stride = At(stride, d, "stride");
  a.padding = At(padding, d, "padding");
  a.dilation = At(dilation, d, "dilation");
  TORCH_CHECK(a.stride >= 1 && a.dilation >= 1 && a.padding >= 0, "metafuse ", op,
              ": stride and dilation must be >= 1 and padding >= 0");
  return a;
}

// Whether every entry of a stride / dilation / padding list is `value`.
bool AllEqual(at::IntArrayRef v, int64_t value) {
  return std::all_of(v.begin(), v.end(), [value](int64_t x) { return x == value; });
}

bool GemmConvolutionsEnabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("METAFUSE_GEMM_CONVOLUTIONS");
    if (value == nullptr || *value == '\0' || std::string(value) == "1") return true;
    TORCH_CHECK(std::string(value) == "0", "METAFUSE_GEMM_CONVOLUTIONS must be 0 or 1, got '",
                value, "'");
    return false;
  }();
  return enabled;
}

// METAFUSE_CONV_ALGORITHM: unset or `measure`, the fastest algorithm of
// each convolution shape measured on this machine (RunFastest); `rules`,
// the fixed rules from bench/conv_bench.cc's measurements on one machine
// (no timing; what ran before the measured choice).
bool MeasuredChoiceEnabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("METAFUSE_CONV_ALGORITHM");
    const std::string v = value == nullptr ? "" : value;
    if (v.empty() || v == "measure") return true;
    TORCH_CHECK(v == "rules", "METAFUSE_CONV_ALGORITHM must be measure or rules, got '", v, "'");
    return false;
  }();
  return enabled;
}

// Raised whenever one of the candidates' implementations changes its
// speed (a choice measured against an older one is stale): revision 2, the
// Winograd products on runtime/compute/small_gemm where the GEMM choice measures it
// faster than the BLAS; 3, small_gemm's AVX-512 kernels read B in place;
// 4, timed by the tuning library's rule (runtime/tuning/timing_rule.h).
constexpr int kCandidatesRevision = 4;

// The machine a choice holds for: the CPU, the LibTorch build (its oneDNN
// and BLAS) and the candidates' revision, hashed into the file name by
// MeasuredChoiceFile.
const std::string& ConvolutionIdentity() {
  static const std::string identity =
      absl::StrCat(CpuModel(), "|", at::show_config(), "|", kCandidatesRevision);
  return identity;
}

std::string Describe(const at::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ","), "]/[", absl::StrJoin(t.strides(), ","),
                      "]");
}

// The key of a call: what it computes (form, dtype, operand shapes and
// strides, the convolution's parameters), where (threads; nested in a
// parallel region or not) and among which candidates.
std::string ChoiceKey(const char* form, const at::Tensor& input, const at::Tensor& weight,
                      bool has_bias, const std::vector<std::vector<int64_t>>& parameters,
                      const std::vector<Candidate>& candidates) {
  std::string key = absl::StrCat(form, " ", c10::toString(input.scalar_type()), " ",
                                 Describe(input), " ", Describe(weight), has_bias ? " bias" : "");
  for (const auto& p : parameters) absl::StrAppend(&key, " (", absl::StrJoin(p, ","), ")");
  absl::StrAppend(&key, " threads ", at::get_num_threads(),
                  at::in_parallel_region() ? " nested" : "", " of");
  for (const Candidate& c : candidates) absl::StrAppend(&key, " ", c.name);
  return key;
}

// The fastest candidate for a call of `form` (RunFastest, on this file's
// table and machine identity).
at::Tensor Fastest(const char* form, const at::Tensor& input, const at::Tensor& weight,
                   bool has_bias, const std::vector<std::vector<int64_t>>& parameters,
                   const std::vector<Candidate>& candidates) {
  return RunFastest("convolution_choices", ConvolutionIdentity(),
                    ChoiceKey(form, input, weight, has_bias, parameters, candidates), candidates);
}

const char* WinogradName(WinogradTile tile) {
  return tile == WinogradTile::kF2 ? "winograd-f2" : "winograd-f4";
}

// conv_transpose2d(dy, w, padding p) at stride 1 is conv2d(dy, w', padding
// 2 - p) for a 3x3 w, w' the kernel flipped with its channels swapped:
// the swapped view (w' without the flip, which copies) and that padding,
// for Winograd's convolution; nullopt for another kernel size.
struct FlippedKernel {
  at::Tensor swapped;
  std::vector<int64_t> padding;
  at::Tensor Flipped() const { return swapped.flip({2, 3}); }
};

std::optional<FlippedKernel> AsFlippedConvolution(const at::Tensor& weight,
                                                  at::IntArrayRef padding) {
  if (weight.dim() != 4 || weight.size(2) != 3 || weight.size(3) != 3) return std::nullopt;
  const int64_t pad_w = padding.size() > 1 ? padding[1] : padding[0];
  return FlippedKernel{weight.transpose(0, 1), {2 - padding[0], 2 - pad_w}};
}

}  // namespace

bool GemmConvolutionApplies(const at::Tensor& input, const at::Tensor& weight,
                            const c10::optional<at::Tensor>& bias) {
  const auto type = input.scalar_type();
  if (!input.defined() || !weight.defined() || !input.is_cpu() || !weight.is_cpu() ||
      input.dim() != 4 || weight.dim() != 4 || weight.scalar_type() != type ||
      (type != at::kFloat && type != at::kDouble) || input.is_mkldnn() || input.is_sparse())
    return false;
  if (bias.has_value() && bias->defined() &&
      (!bias->is_cpu() || bias->scalar_type() != type || bias->dim() != 1))
    return false;
  // Programs run without autograd; a call that records a graph keeps ATen's.
  const bool records = at::GradMode::is_enabled() &&
                       (input.requires_grad() || weight.requires_grad() ||
                        (bias.has_value() && bias->defined() && bias->requires_grad()));
  return !records;
}

bool PreferGemmConvolution(const at::Tensor& weight, int64_t groups, bool transposed) {
  // Measured in bench/conv_bench.cc: ATen's convolution from NCHW wins on
  // one wide group (64 channels, 3x3: the GEMMs reach 0.45x-0.7x of it),
  // and loses badly on few input channels per group (1 channel: 160x), on
  // groups (LibTorch 1.13 runs them several times slower than one after
  // another) and on transposed convolutions (1.5x).
  if (transposed || groups > 1) return true;
  return weight.size(1) * weight.size(2) * weight.size(3) <= 64;
}

at::Tensor Conv2dByGemm(const at::Tensor& input, const at::Tensor& weight,
                        const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                        at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  TORCH_CHECK(groups >= 1 && input.size(1) == weight.size(1) * groups &&
                  weight.size(0) % groups == 0,
              "metafuse conv2d: input ", input.sizes(), " and weight ", weight.sizes(),
              " do not match groups=", groups);
  Axis axes[2];
  for (size_t d = 0; d < 2; ++d) {
    Axis& a = axes[d] = SpatialAxis(input, weight, d, stride, padding, dilation, "conv2d");
    a.out = (a.in + 2 * a.padding - a.dilation * (a.kernel - 1) - 1) / a.stride + 1;
    TORCH_CHECK(a.out >= 1, "metafuse conv2d: input ", input.sizes(), " is smaller than the ",
                "dilated kernel ", weight.sizes());
  }
  const at::Tensor x = input.contiguous(), wt = weight.contiguous();
  at::Tensor out = at::empty({x.size(0), wt.size(0), axes[0].out, axes[1].out}, x.options());
  if (x.scalar_type() == at::kFloat) {
    Conv2dInto<float>(x, wt, out, axes[0], axes[1], groups);
    AddBias<float>(out, bias);
  } else {
    Conv2dInto<double>(x, wt, out, axes[0], axes[1], groups);
    AddBias<double>(out, bias);
  }
  return out;
}

at::Tensor ConvTranspose2dByGemm(const at::Tensor& input, const at::Tensor& weight,
                                 const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                 at::IntArrayRef padding, at::IntArrayRef output_padding,
                                 int64_t groups, at::IntArrayRef dilation) {
  TORCH_CHECK(groups >= 1 && input.size(1) == weight.size(0) && weight.size(0) % groups == 0,
              "metafuse conv_transpose2d: input ", input.sizes(), " and weight ",
              weight.sizes(), " do not match groups=", groups);
  Axis axes[2];
  for (size_t d = 0; d < 2; ++d) {
    Axis& a = axes[d] =
        SpatialAxis(input, weight, d, stride, padding, dilation, "conv_transpose2d");
    const int64_t extra = At(output_padding, d, "output_padding");
    TORCH_CHECK(extra >= 0, "metafuse conv_transpose2d: output_padding must be >= 0");
    a.out = (a.in - 1) * a.stride - 2 * a.padding + a.dilation * (a.kernel - 1) + extra + 1;
    TORCH_CHECK(a.out >= 1, "metafuse conv_transpose2d: empty output for input ",
                input.sizes(), " and weight ", weight.sizes());
  }
  const at::Tensor x = input.contiguous(), wt = weight.contiguous();
  at::Tensor out =
      at::zeros({x.size(0), wt.size(1) * groups, axes[0].out, axes[1].out}, x.options());
  if (x.scalar_type() == at::kFloat) {
    ConvTranspose2dInto<float>(x, wt, out, axes[0], axes[1], groups);
    AddBias<float>(out, bias);
  } else {
    ConvTranspose2dInto<double>(x, wt, out, axes[0], axes[1], groups);
    AddBias<double>(out, bias);
  }
  return out;
}

namespace {

// A 4-D tensor whose first two dims swapped are contiguous (a view made by
// transpose(0, 1) of a contiguous tensor; also a contiguous one with a
// single image or channel, for which both layouts are the same).
bool TransposedContiguous(const at::Tensor& t) {
  return t.dim() == 4 && t.transpose(0, 1).is_contiguous();
}

int64_t Area(const at::Tensor& t) { return t.size(2) * t.size(3); }

}  // namespace

bool IsWeightGradientForm(const at::Tensor& input, const at::Tensor& weight,
                          at::IntArrayRef stride, at::IntArrayRef dilation, int64_t groups) {
  if (!(groups == 1 && AllEqual(stride, 1) && AllEqual(dilation, 1) &&
        TransposedContiguous(input) && TransposedContiguous(weight) &&
        input.size(1) == weight.size(1))) {
    return false;
  }
  // A contiguous input may also be a forward convolution of one image or
  // channel: the form is the one whose kernel is image-sized, spanning more
  // than half the input (its result is a few taps wide).
  return !input.is_contiguous() ||
         (2 * weight.size(2) > input.size(2) && 2 * weight.size(3) > input.size(3));
}

at::Tensor WeightGradientByConvolutionBackward(const at::Tensor& input,
                                               const at::Tensor& weight,
                                               at::IntArrayRef padding) {
  const at::Tensor x = input.transpose(0, 1), dy = weight.transpose(0, 1);  // contiguous
  const int64_t kh = x.size(2) + 2 * padding[0] - dy.size(2) + 1;
  const int64_t kw = x.size(3) + 2 * (padding.size() > 1 ? padding[1] : padding[0]) -
                     dy.size(3) + 1;
  TORCH_CHECK(kh >= 1 && kw >= 1, "metafuse conv2d: the weight-gradient form of input ",
              input.sizes(), " and weight ", weight.sizes(), " has no output");
  // Only the weight's shape is read for a weight gradient.
  const at::Tensor shape = at::empty({dy.size(1), x.size(1), kh, kw}, x.options());
  auto grads = at::convolution_backward(dy, x, shape, c10::nullopt, {1, 1}, padding, {1, 1},
                                        /*transposed=*/false, {0, 0}, /*groups=*/1,
                                        {false, true, false});
  return std::get<1>(grads).transpose(0, 1);
}

at::Tensor WeightGradient(const at::Tensor& input, const at::Tensor& weight,
                          at::IntArrayRef padding) {
  const at::Tensor x = input.transpose(0, 1), dy = weight.transpose(0, 1);  // contiguous
  if (MeasuredChoiceEnabled()) {
    std::vector<Candidate> candidates;
    if (DirectWeightGradientApplies(x, dy, padding)) {
      candidates.push_back({"direct", [&] {
                              return WeightGradientDirect(x, dy, padding).transpose(0, 1);
                            }});
    }
    const WinogradTile tile = WinogradTileToMeasure();
    if (tile != WinogradTile::kNone && WinogradWeightGradientApplies(x, dy, padding)) {
      candidates.push_back({WinogradName(tile), [&] {
                              return WeightGradientByWinograd(x, dy, padding, tile)
                                  .transpose(0, 1);
                            }});
    }
    candidates.push_back({"convolution_backward", [&] {
                            return WeightGradientByConvolutionBackward(input, weight, padding);
                          }});
    return Fastest("weight_gradient", input, weight, false, {padding.vec()}, candidates);
  }
  // One input channel: the direct kernel (1.7x oneDNN's on the Omniglot
  // query layer); with 3 (the ResNet stem) oneDNN's is faster
  // (bench/conv_bench.cc).
  if (x.size(1) == 1 && DirectWeightGradientApplies(x, dy, padding))
    return WeightGradientDirect(x, dy, padding).transpose(0, 1);
  const WinogradTile tile = ChooseWinogradWeightGradientTile(x, dy, padding);
  if (tile != WinogradTile::kNone)
    return WeightGradientByWinograd(x, dy, padding, tile).transpose(0, 1);
  return WeightGradientByConvolutionBackward(input, weight, padding);
}

bool IsInputGradientForm(const at::Tensor& input, const at::Tensor& weight,
                         at::IntArrayRef stride, at::IntArrayRef output_padding, int64_t groups,
                         at::IntArrayRef dilation) {
  return input.scalar_type() == at::kFloat && at::hasMKLDNN() &&
         at::globalContext().userEnabledMkldnn() && groups == 1 && AllEqual(stride, 1) &&
         AllEqual(dilation, 1) && AllEqual(output_padding, 0) && input.dim() == 4 &&
         weight.dim() == 4 && input.size(1) == weight.size(0);
}

bool IsSwappedInputGradientForm(const at::Tensor& input, const at::Tensor& weight,
                                at::IntArrayRef stride, at::IntArrayRef output_padding,
                                int64_t groups, at::IntArrayRef dilation) {
  return groups == 1 && AllEqual(stride, 1) && AllEqual(dilation, 1) &&
         AllEqual(output_padding, 0) && TransposedContiguous(input) &&
         TransposedContiguous(weight) && input.size(1) == weight.size(0) &&
         weight.scalar_type() == input.scalar_type() && Area(weight) > Area(input);
}

at::Tensor SwappedInputGradient(const at::Tensor& input, const at::Tensor& weight,
                                at::IntArrayRef padding) {
  const at::Tensor dy = weight.transpose(0, 1), g = input.transpose(0, 1);  // contiguous
  const std::vector<int64_t> ones = {1, 1}, zeros = {0, 0};
  const at::Tensor swapped =
      IsInputGradientForm(dy, g, ones, zeros, 1, ones)
          ? InputGradient(dy, g, padding)
          : ConvTranspose2dByGemm(dy, g, c10::nullopt, ones, padding, zeros, 1, ones);
  return swapped.transpose(0, 1);
}

at::Tensor InputGradientByConvolutionBackward(const at::Tensor& input, const at::Tensor& weight,
                                              at::IntArrayRef padding) {
  const int64_t pad_w = padding.size() > 1 ? padding[1] : padding[0];
  const int64_t h = input.size(2) + weight.size(2) - 1 - 2 * padding[0];
  const int64_t w = input.size(3) + weight.size(3) - 1 - 2 * pad_w;
  TORCH_CHECK(h >= 1 && w >= 1, "metafuse conv_transpose2d: empty output for input ",
              input.sizes(), " and weight ", weight.sizes());
  // Only the input's shape is read for an input gradient (never touched:
  // no page of it is faulted in).
  const at::Tensor shape = at::empty({input.size(0), weight.size(1), h, w}, input.options());
  auto grads = at::convolution_backward(input.contiguous(), shape, weight.contiguous(),
                                        c10::nullopt, {1, 1}, padding, {1, 1},
                                        /*transposed=*/false, {0, 0}, /*groups=*/1,
                                        {true, false, false});
  return std::get<0>(grads);
}

at::Tensor InputGradient(const at::Tensor& input, const at::Tensor& weight,
                         at::IntArrayRef padding) {
  // conv_transpose2d(dy, w, padding p) with stride 1 is conv2d(dy, w',
  // padding k - 1 - p), w' the kernel flipped with its channels swapped.
  const std::vector<int64_t> ones = {1, 1}, zeros = {0, 0};
  const std::optional<FlippedKernel> flipped = AsFlippedConvolution(weight, padding);
  if (MeasuredChoiceEnabled()) {
    std::vector<Candidate> candidates;
    const WinogradTile tile = WinogradTileToMeasure();
    if (tile != WinogradTile::kNone && flipped &&
        WinogradApplies(input, flipped->swapped, ones, flipped->padding, ones, /*groups=*/1)) {
      candidates.push_back({WinogradName(tile), [&] {
                              return Conv2dByWinograd(input, flipped->Flipped(), c10::nullopt,
                                                      flipped->padding, tile);
                            }});
    }
    candidates.push_back({"convolution_backward", [&] {
                            return InputGradientByConvolutionBackward(input, weight, padding);
                          }});
    candidates.push_back({"gemm", [&] {
                            return ConvTranspose2dByGemm(input, weight, c10::nullopt, ones,
                                                         padding, zeros, 1, ones);
                          }});
    return Fastest("input_gradient", input, weight, false, {padding.vec()}, candidates);
  }
  if (flipped) {
    // The choice reads shapes only: the swapped view, flipped (a copy) only
    // when Winograd runs.
    const WinogradTile tile =
        ChooseWinogradTile(input, flipped->swapped, ones, flipped->padding, ones, /*groups=*/1);
    if (tile != WinogradTile::kNone)
      return Conv2dByWinograd(input, flipped->Flipped(), c10::nullopt, flipped->padding, tile);
  }
  return InputGradientByConvolutionBackward(input, weight, padding);
}

at::Tensor FastestConv2d(const at::Tensor& input, const at::Tensor& weight,
                         const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                         at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  std::vector<Candidate> candidates;
  if (DirectConvolutionApplies(input, weight, stride, padding, dilation, groups))
    candidates.push_back({"direct", [&] { return Conv2dDirect(input, weight, bias, padding); }});
  const WinogradTile tile = WinogradTileToMeasure();
  if (tile != WinogradTile::kNone &&
      WinogradApplies(input, weight, stride, padding, dilation, groups)) {
    candidates.push_back({WinogradName(tile), [&] {
                            return Conv2dByWinograd(input, weight, bias, padding, tile);
                          }});
  }
  candidates.push_back({"aten", [&] {
                          return at::conv2d(input, weight, bias, stride, padding, dilation,
                                            groups);
                        }});
  candidates.push_back({"gemm", [&] {
                          return Conv2dByGemm(input, weight, bias, stride, padding, dilation,
                                              groups);
                        }});
  return Fastest("conv2d", input, weight, bias.has_value() && bias->defined(),
                 {stride.vec(), padding.vec(), dilation.vec(), {groups}}, candidates);
}

at::Tensor FastestConvTranspose2d(const at::Tensor& input, const at::Tensor& weight,
                                  const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                  at::IntArrayRef padding, at::IntArrayRef output_padding,
                                  int64_t groups, at::IntArrayRef dilation) {
  const std::vector<Candidate> candidates = {
      {"aten",
       [&] {
         return at::conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups,
                                     dilation);
       }},
      {"gemm", [&] {
         return ConvTranspose2dByGemm(input, weight, bias, stride, padding, output_padding, groups,
                                      dilation);
       }}};
  return Fastest("conv_transpose2d", input, weight, bias.has_value() && bias->defined(),
                 {stride.vec(), padding.vec(), output_padding.vec(), dilation.vec(), {groups}},
                 candidates);
}

torch::jit::Operation MakeConvolutionOperation(bool transposed, torch::jit::Operation aten) {
  if (!GemmConvolutionsEnabled()) return aten;
  const size_t arity = transposed ? 8 : 7;
  return [transposed, arity, aten](torch::jit::Stack& stack) mutable {
    auto args = torch::jit::last(stack, arity);
    const at::Tensor& input = args[0].toTensor();
    const at::Tensor& weight = args[1].toTensor();
    const c10::optional<at::Tensor> bias = args[2].toOptional<at::Tensor>();
    if (!GemmConvolutionApplies(input, weight, bias)) {
      aten(stack);
      return;
    }
    const int64_t groups = args[6].toInt();  // both schemas
    const std::vector<int64_t> stride = args[3].toIntVector();
    const std::vector<int64_t> padding = args[4].toIntVector();
    // conv2d: dilation; conv_transpose2d: output_padding (dilation is last).
    const std::vector<int64_t> fifth = args[5].toIntVector();
    const std::vector<int64_t> dilation = transposed ? args[7].toIntVector() : fifth;
    const bool has_bias = bias.has_value() && bias->defined();
    at::Tensor out;
    // The gradient forms first (WeightGradient and InputGradient measure
    // or follow the rules themselves), then any other convolution.
    if (!transposed && !has_bias && IsWeightGradientForm(input, weight, stride, dilation, groups)) {
      out = WeightGradient(input, weight, padding);
    } else if (transposed && !has_bias &&
               IsSwappedInputGradientForm(input, weight, stride, fifth, groups, dilation)) {
      out = SwappedInputGradient(input, weight, padding);
    } else if (transposed && !has_bias &&
               IsInputGradientForm(input, weight, stride, fifth, groups, dilation)) {
      out = InputGradient(input, weight, padding);
    } else if (MeasuredChoiceEnabled()) {
      out = transposed ? FastestConvTranspose2d(input, weight, bias, stride, padding, fifth,
                                                groups, dilation)
                       : FastestConv2d(input, weight, bias, stride, padding, dilation, groups);
    } else if (!transposed &&
               DirectConvolutionApplies(input, weight, stride, padding, dilation, groups)) {
      out = Conv2dDirect(input, weight, bias, padding);
    } else if (const WinogradTile tile =
                   transposed ? WinogradTile::kNone
                              : ChooseWinogradTile(input, weight, stride, padding, dilation, groups);
               tile != WinogradTile::kNone) {
      out = Conv2dByWinograd(input, weight, bias, padding, tile);
    } else if (!PreferGemmConvolution(weight, groups, transposed)) {
      aten(stack);
      return;
    } else if (transposed) {
      out = ConvTranspose2dByGemm(input, weight, bias, stride, padding, fifth, groups, dilation);
    } else {
      out = Conv2dByGemm(input, weight, bias, stride, padding, dilation, groups);
    }
    torch::jit::drop(stack, arity);
    stack.emplace_back(std::move(out));
  };
}

}  // namespace metafuse::runtime
