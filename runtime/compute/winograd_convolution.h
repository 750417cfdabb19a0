// 3x3 stride-1 convolutions of compiled programs by Winograd's minimal
// filtering (Lavin and Gray, "Fast Algorithms for Convolutional Neural
// Networks", 2015): F(m x m, 3x3) computes an m x m output tile from an
// (m+2) x (m+2) input tile with (m+2)^2 multiplies per channel pair instead
// of 9 m^2. Per block of images the tiles are transformed, the (m+2)^2
// transformed points become (m+2)^2 GEMMs over channels (the process's
// BLAS), and the products are transformed back.
//
// Why: the wide layers of a conv net's meta-step (64 channels, 3x3, stride
// 1) run on oneDNN's direct kernels at about 95% of this core's float32
// peak, and they are over half of a compiled MAML step; fewer multiplies is
// the only way left to make them faster (bench/conv_bench.cc).
//
// F(2x2) rounds as closely as the direct kernels (its transforms only add);
// F(4x4) has about 20x the rounding error (relative 1e-5 in float32), the
// price of 4x fewer multiplies. Float32 only; anything else stays with the
// caller's convolution.
#pragma once

#include <ATen/ATen.h>

namespace metafuse::runtime {

enum class WinogradTile { kNone, kF2, kF4 };

// The tile size this convolution runs with, kNone where Winograd does not
// apply or does not pay (a rule from bench/conv_bench.cc's measurements by
// channels, output size and image count). METAFUSE_WINOGRAD: unset, 1 or
// auto, F(2x2) where it pays; fast, F(4x4) where it pays (faster, 20x the
// rounding error); f2 or f4, that tile wherever it applies; 0, never.
WinogradTile ChooseWinogradTile(const at::Tensor& input, const at::Tensor& weight,
                                at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef dilation, int64_t groups);

// The tile a measured choice (runtime/compute/convolution.cc) times against the
// other algorithms where Winograd applies, whatever the size:
// METAFUSE_WINOGRAD fast or f4, F(4x4); 0, kNone (not timed); else F(2x2).
WinogradTile WinogradTileToMeasure();

// True where `tile` can compute conv2d(input, weight, padding) (float32 CPU,
// 4-D, 3x3 weight, stride 1, dilation 1, one group, padding 0..2).
bool WinogradApplies(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                     at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);

// aten::conv2d(input, weight, bias, stride 1, padding) with `tile` (not
// kNone); NCHW contiguous result.
at::Tensor Conv2dByWinograd(const at::Tensor& input, const at::Tensor& weight,
                            const c10::optional<at::Tensor>& bias, at::IntArrayRef padding,
                            WinogradTile tile);

// The weight gradient of conv2d(input, w, padding) for a 3x3 w at stride
// 1, [K, C, 3, 3], from input [N, C, H, W] and grad_output [N, K, H', W']:
// by the transposition of F(m x m, 3x3) (dW = G^T [(A dy A^T) . (B^T x B)] G,
// summed over the tiles, one GEMM per point with the tiles as its inner
// dimension). kNone where it does not apply or does not pay (the same rule).
WinogradTile ChooseWinogradWeightGradientTile(const at::Tensor& input,
                                              const at::Tensor& grad_output,
                                              at::IntArrayRef padding);
bool WinogradWeightGradientApplies(const at::Tensor& input, const at::Tensor& grad_output,
                                   at::IntArrayRef padding);
at::Tensor WeightGradientByWinograd(const at::Tensor& input, const at::Tensor& grad_output,
                                    at::IntArrayRef padding, WinogradTile tile);

}  // namespace metafuse::runtime
