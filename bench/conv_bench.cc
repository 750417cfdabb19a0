// runtime/compute/convolution (GEMMs of packed patches) against ATen's conv2d and
// conv_transpose2d on the shapes of the Omniglot conv-net MAML meta-step
// (bench/sweep.py's conv model: 75 query / 5 support images, 64 channels;
// its ResNet block's 16 channels) and of its derivatives, with the Winograd
// convolutions where ChooseWinogradTile takes them; one thread, fresh input
// tensors every call (as a program gives them), median of 7 after one
// warm-up call. The last column is what METAFUSE_CONV_ALGORITHM=rules
// picks; programs by default measure the candidates on the machine
// (runtime/compute/convolution.h, FastestConv2d), so this table shows the times
// they choose from.
//   bazel run //bench:conv_bench
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "runtime/compute/convolution.h"
#include "runtime/compute/direct_convolution.h"
#include "runtime/compute/winograd_convolution.h"

namespace {

double MedianMs(const std::function<void()>& run) {
  run();
  std::vector<double> times;
  for (int i = 0; i < 7; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - start)
                        .count());
  }
  std::sort(times.begin(), times.end());
  return times[3];
}

}  // namespace

int main() {
  at::set_num_threads(1);
  at::NoGradGuard no_grad;
  struct Shape {
    const char* name;
    std::vector<int64_t> input, weight;
    int64_t padding;
    bool transposed;
    int64_t groups = 1;
  };
  const Shape shapes[] = {
      {"layer 1, query (1 -> 64 ch, 28x28)", {75, 1, 28, 28}, {64, 1, 3, 3}, 1, false},
      {"layer 2, query (64 ch, 14x14)", {75, 64, 14, 14}, {64, 64, 3, 3}, 1, false},
      {"layer 3, query (64 ch, 7x7)", {75, 64, 7, 7}, {64, 64, 3, 3}, 1, false},
      {"layer 4, query (64 ch, 3x3)", {75, 64, 3, 3}, {64, 64, 3, 3}, 1, false},
      {"layer 2, support (5 images)", {5, 64, 14, 14}, {64, 64, 3, 3}, 1, false},
      {"layer 3, support (5 images)", {5, 64, 7, 7}, {64, 64, 3, 3}, 1, false},
      {"layer 4, support (5 images)", {5, 64, 3, 3}, {64, 64, 3, 3}, 1, false},
      {"weight gradient of layer 2 (as conv)", {64, 75, 14, 14}, {64, 75, 14, 14}, 1, false},
      {"weight gradient of layer 3 (as conv)", {64, 75, 7, 7}, {64, 75, 7, 7}, 1, false},
      {"weight gradient of layer 2, support", {64, 5, 14, 14}, {64, 5, 14, 14}, 1, false},
      {"weight gradient of layer 3, support", {64, 5, 7, 7}, {64, 5, 7, 7}, 1, false},
      {"input gradient of layer 2 (transposed)", {75, 64, 14, 14}, {64, 64, 3, 3}, 1, true},
      {"input gradient of layer 3 (transposed)", {75, 64, 7, 7}, {64, 64, 3, 3}, 1, true},
      {"input gradient of layer 2, support", {5, 64, 14, 14}, {64, 64, 3, 3}, 1, true},
      {"ResNet block, query (25 x 16 ch, 16x16)", {25, 16, 16, 16}, {16, 16, 3, 3}, 1, false},
      {"ResNet block input gradient, query", {25, 16, 16, 16}, {16, 16, 3, 3}, 1, true},
      {"ResNet block, support (5 images)", {5, 16, 16, 16}, {16, 16, 3, 3}, 1, false},
      {"32 channels, 25 images of 16x16", {25, 32, 16, 16}, {32, 32, 3, 3}, 1, false},
      {"layer 2, 4 tasks batched (groups 4)", {75, 256, 14, 14}, {256, 64, 3, 3}, 1, false, 4},
      {"layer 1, 4 tasks batched (groups 4)", {75, 4, 28, 28}, {256, 1, 3, 3}, 1, false, 4},
      {"input gradient, 4 tasks (groups 4)", {75, 256, 14, 14}, {256, 64, 3, 3}, 1, true, 4},
  };
  std::printf("%-42s %10s %10s %8s %13s %8s %s\n", "convolution", "ATen ms", "GEMM ms", "speed-up",
              "Winograd ms", "speed-up", " fixed rules use");
  for (const Shape& s : shapes) {
    // A weight gradient (an image-sized kernel): x^T and dy^T as the
    // derivative rules pass them, views of contiguous [N, C, H, W] tensors.
    const bool image_sized = std::string(s.name).rfind("weight gradient", 0) == 0;
    auto make = [&](const std::vector<int64_t>& shape) {
      if (!image_sized) return at::randn(shape);
      return at::randn({shape[1], shape[0], shape[2], shape[3]}).transpose(0, 1);
    };
    const at::Tensor weight = make(s.weight);
    const at::Tensor input = make(s.input);
    // A fresh input every call, as a program's instructions produce them.
    auto fresh = [&] {
      return image_sized ? input.transpose(0, 1).clone().transpose(0, 1) : input.clone();
    };
    const std::vector<int64_t> one = {1, 1}, pad = {s.padding, s.padding}, none = {0, 0};
    const double aten = MedianMs([&] {
      s.transposed ? at::conv_transpose2d(fresh(), weight, {}, one, pad, none, s.groups, one)
                   : at::conv2d(fresh(), weight, {}, one, pad, one, s.groups);
    });
    // What programs ran input gradients on before Winograd: oneDNN's
    // backward-data kernel through convolution_backward.
    const bool backward_data = s.transposed && s.groups == 1;
    const double onednn_backward =
        backward_data ? MedianMs([&] {
          metafuse::runtime::InputGradientByConvolutionBackward(fresh(), weight, pad);
        })
                      : 0;
    const double gemm = MedianMs([&] {
      s.transposed
          ? metafuse::runtime::ConvTranspose2dByGemm(fresh(), weight, c10::nullopt, one, pad,
                                                     none, s.groups, one)
          : metafuse::runtime::Conv2dByGemm(fresh(), weight, c10::nullopt, one, pad, one,
                                            s.groups);
    });
    // Winograd: the convolution, or for an input gradient the convolution
    // of the flipped kernel (runtime/compute/convolution.cc's InputGradient).
    using metafuse::runtime::WinogradTile;
    const at::Tensor as_conv = s.transposed ? weight.transpose(0, 1).flip({2, 3}) : weight;
    const std::vector<int64_t> conv_pad = s.transposed
                                              ? std::vector<int64_t>{2 - s.padding, 2 - s.padding}
                                              : pad;
    const WinogradTile tile = metafuse::runtime::ChooseWinogradTile(input, as_conv, one, conv_pad,
                                                                    one, s.groups);
    double winograd = 0;
    // A weight gradient in the derivative rules' form (x^T, dy^T): Winograd's
    // weight gradient against oneDNN's backward-weights kernel.
    const bool weight_gradient =
        !s.transposed &&
        metafuse::runtime::IsWeightGradientForm(input, weight, one, one, s.groups);
    double onednn_weights = 0;
    WinogradTile gradient_tile = WinogradTile::kNone;
    if (weight_gradient) {
      const at::Tensor x = input.transpose(0, 1).contiguous();
      const at::Tensor dy = weight.transpose(0, 1).contiguous();
      gradient_tile = metafuse::runtime::ChooseWinogradWeightGradientTile(x, dy, pad);
      onednn_weights = MedianMs([&] {
        metafuse::runtime::WeightGradientByConvolutionBackward(fresh(), weight, pad);
      });
      if (gradient_tile != WinogradTile::kNone) {
        winograd = MedianMs([&] {
          metafuse::runtime::WeightGradientByWinograd(x.clone(), dy, pad, gradient_tile);
        });
      }
    }
    if (tile != WinogradTile::kNone && !weight_gradient) {
      winograd = MedianMs([&] {
        metafuse::runtime::Conv2dByWinograd(fresh(), as_conv, c10::nullopt, conv_pad, tile);
      });
    }
    const bool chosen = metafuse::runtime::PreferGemmConvolution(weight, s.groups, s.transposed);
    const WinogradTile shown = weight_gradient ? gradient_tile : tile;
    const char* used = shown == WinogradTile::kF4   ? "Winograd F(4x4)"
                       : shown == WinogradTile::kF2 ? "Winograd F(2x2)"
                       : backward_data && metafuse::runtime::IsInputGradientForm(
                                              input, weight, one, none, s.groups, one)
                           ? "convolution_backward"
                       : chosen ? "GEMM"
                                                   : "ATen";
    if (winograd > 0) {
      // Against the kernel the program would run otherwise.
      const double before =
          backward_data ? onednn_backward : weight_gradient ? onednn_weights : aten;
      char baseline[64] = "";
      if (backward_data || weight_gradient) {
        std::snprintf(baseline, sizeof baseline, " (vs convolution_backward %.2f ms)",
                      backward_data ? onednn_backward : onednn_weights);
      }
      std::printf("%-42s %10.2f %10.2f %7.2fx %13.2f %7.2fx  %s%s\n", s.name, aten, gemm,
                  aten / gemm, winograd, before / winograd, used, baseline);
    } else {
      std::printf("%-42s %10.2f %10.2f %7.2fx %13s %8s  %s\n", s.name, aten, gemm, aten / gemm,
                  "-", "-", used);
    }
  }

  // Few-input-channel layers (runtime/compute/direct_convolution): the direct
  // kernels against what programs ran before, the GEMM of packed patches
  // for the forward and convolution_backward for the weight gradient.
  struct FirstLayer {
    const char* name;
    std::vector<int64_t> input;
    int64_t out_channels;
  };
  const FirstLayer first_layers[] = {
      {"Omniglot layer 1, query (75 x 1 ch, 28x28)", {75, 1, 28, 28}, 64},
      {"Omniglot layer 1, support (5 images)", {5, 1, 28, 28}, 64},
      {"ResNet stem, query (25 x 3 ch, 16x16)", {25, 3, 16, 16}, 16},
      {"ResNet stem, support (5 images)", {5, 3, 16, 16}, 16},
  };
  std::printf("\n%-42s %10s %10s %8s %14s %10s %8s\n", "first layer (3x3, padding 1)",
              "GEMM ms", "direct ms", "speed-up", "wgrad bwd ms", "direct ms", "speed-up");
  for (const FirstLayer& f : first_layers) {
    const at::Tensor input = at::randn(f.input);
    const at::Tensor weight = at::randn({f.out_channels, f.input[1], 3, 3});
    const at::Tensor dy = at::randn({f.input[0], f.out_channels, f.input[2], f.input[3]});
    const std::vector<int64_t> one = {1, 1};
    const double gemm = MedianMs([&] {
      metafuse::runtime::Conv2dByGemm(input.clone(), weight, c10::nullopt, one, one, one, 1);
    });
    const double direct = MedianMs(
        [&] { metafuse::runtime::Conv2dDirect(input.clone(), weight, c10::nullopt, one); });
    const double backward = MedianMs([&] {
      metafuse::runtime::WeightGradientByConvolutionBackward(input.clone().transpose(0, 1),
                                                             dy.transpose(0, 1), one);
    });
    const double direct_gradient =
        MedianMs([&] { metafuse::runtime::WeightGradientDirect(input.clone(), dy, one); });
    std::printf("%-42s %10.2f %10.2f %7.2fx %14.2f %10.2f %7.2fx\n", f.name, gemm, direct,
                gemm / direct, backward, direct_gradient, backward / direct_gradient);
  }
}
