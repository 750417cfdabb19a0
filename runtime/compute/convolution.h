// 2-D convolutions of compiled programs on the CPU as one small GEMM per
// image and group (runtime/compute/small_gemm.h), with the image patches written
// straight into the GEMM's packed layout (no separate im2col matrix).
//
// Why: LibTorch 1.13's CPU convolution runs a one-channel input layer (the
// first layer of an image net) below 1 GFLOP/s on this machine (75 images
// of 28x28 to 64 channels: 119 ms, as GEMMs 0.7 ms), grouped convolutions
// (task batching's) several times slower than their groups one by one, and
// transposed convolutions (input gradients) 1.5x slower than a GEMM and a
// col2im scatter (bench/conv_bench.cc, docs/benchmarks.md).
//
// Programs call these through MakeConvolutionOperation for aten::conv2d and
// aten::conv_transpose2d.input, which takes the direct kernels
// (runtime/compute/direct_convolution.h) for 3x3 stride-1 layers of 1 to 3 input
// channels and Winograd's (runtime/compute/winograd_convolution.h) for wide 3x3
// ones where they pay; anything none of them cover (not CPU, not
// float32/float64, not 4-D, mixed dtypes) goes to ATen's operator.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/stack.h>

namespace metafuse::runtime {

// True when the GEMM convolutions below compute this call.
bool GemmConvolutionApplies(const at::Tensor& input, const at::Tensor& weight,
                            const c10::optional<at::Tensor>& bias);

// True where the GEMM convolution is the faster one (a rule from the
// measurements of bench/conv_bench.cc, by weight shape and groups).
bool PreferGemmConvolution(const at::Tensor& weight, int64_t groups, bool transposed);

// aten::conv2d's result (NCHW, contiguous).
at::Tensor Conv2dByGemm(const at::Tensor& input, const at::Tensor& weight,
                        const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                        at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);

// aten::conv_transpose2d's result (NCHW, contiguous).
at::Tensor ConvTranspose2dByGemm(const at::Tensor& input, const at::Tensor& weight,
                                 const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                 at::IntArrayRef padding, at::IntArrayRef output_padding,
                                 int64_t groups, at::IntArrayRef dilation);

// A weight gradient in the form the derivative rule writes it:
// conv2d(x^T, dy^T) with x [N, Cin, H, W] and dy [N, Cout, H', W'] both
// transposed in their first two dims (with one image or channel, a
// contiguous tensor is both), its kernel larger than its result, stride 1,
// dilation 1, one group. It
// equals the transpose of ATen's convolution_backward weight gradient,
// which runs oneDNN's backward-weights kernel on x and dy as they are
// (1.4x-1.8x faster here than the forward kernel on copies of the
// transposes with an image-sized kernel; bench/conv_bench.cc).
bool IsWeightGradientForm(const at::Tensor& input, const at::Tensor& weight,
                          at::IntArrayRef stride, at::IntArrayRef dilation, int64_t groups);
// conv2d(input, weight, padding) for that form, as a [Cin, Cout, kh, kw]
// view (the transpose of a contiguous [Cout, Cin, kh, kw] tensor).
at::Tensor WeightGradientByConvolutionBackward(const at::Tensor& input,
                                               const at::Tensor& weight,
                                               at::IntArrayRef padding);
// That weight gradient by the faster kernel: for a 3x3 kernel of one input
// channel the direct kernel (runtime/compute/direct_convolution.h), for a 3x3
// kernel Winograd's where ChooseWinogradWeightGradientTile picks a tile
// (runtime/compute/winograd_convolution.h), else convolution_backward's.
at::Tensor WeightGradient(const at::Tensor& input, const at::Tensor& weight,
                          at::IntArrayRef padding);

// An input gradient: conv_transpose2d(dy, w) with stride 1, dilation 1, no
// output padding, one group, float32 where ATen has oneDNN: ATen's
// convolution_backward input gradient, oneDNN's backward-data kernel (1.8x
// the GEMM convolution on the Omniglot net's query layers). Float64 keeps
// the GEMM convolution (ATen's float64 kernel is no faster than it).
bool IsInputGradientForm(const at::Tensor& input, const at::Tensor& weight,
                         at::IntArrayRef stride, at::IntArrayRef output_padding, int64_t groups,
                         at::IntArrayRef dilation);
at::Tensor InputGradientByConvolutionBackward(const at::Tensor& input, const at::Tensor& weight,
                                              at::IntArrayRef padding);
// That input gradient by the faster of the two kernels: a 3x3 one as the
// Winograd convolution of the flipped kernel where ChooseWinogradTile picks
// one (runtime/compute/winograd_convolution.h), else convolution_backward's.
at::Tensor InputGradient(const at::Tensor& input, const at::Tensor& weight,
                         at::IntArrayRef padding);

// The second-order term of the weight-gradient form (the meta-gradient
// through an inner step reaching x): conv_transpose2d(g^T, dy^T) with g a
// [Cout, Cin, kh, kw] cotangent of the weight and dy [N, Cout, H', W'],
// both transposed in their first two dims, stride 1 — a transposed
// convolution with an image-sized kernel. Substituting the summation index
// shows it equals conv_transpose2d(dy, g)^T, the ordinary input gradient
// with the small kernel, which oneDNN runs 3.7x faster on the Omniglot
// net's 14x14 layer (2.5 ms -> 0.7 ms).
bool IsSwappedInputGradientForm(const at::Tensor& input, const at::Tensor& weight,
                                at::IntArrayRef stride, at::IntArrayRef output_padding,
                                int64_t groups, at::IntArrayRef dilation);
// conv_transpose2d(input, weight, padding) of that form, as a view (the
// transpose of a contiguous tensor).
at::Tensor SwappedInputGradient(const at::Tensor& input, const at::Tensor& weight,
                                at::IntArrayRef padding);

// aten::conv2d and aten::conv_transpose2d.input by the fastest of the
// algorithms that apply (the direct kernels, Winograd's, ATen's, the GEMM
// convolution), measured on this machine at the first call of each shape
// and kept per process and on disk (runtime/tuning/measured_choice.h). Fixed rules
// from one machine's measurements were wrong on another: on an AVX-512
// core oneDNN's direct kernels beat the F(2x2) Winograd that wins on an
// AVX2 one (docs/benchmarks.md). WeightGradient and InputGradient measure
// the same way. METAFUSE_CONV_ALGORITHM=rules keeps the fixed rules.
at::Tensor FastestConv2d(const at::Tensor& input, const at::Tensor& weight,
                         const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                         at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);
at::Tensor FastestConvTranspose2d(const at::Tensor& input, const at::Tensor& weight,
                                  const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                  at::IntArrayRef padding, at::IntArrayRef output_padding,
                                  int64_t groups, at::IntArrayRef dilation);

// The operation of an aten::conv2d (transposed: aten::conv_transpose2d.input)
// instruction: a weight or input gradient form through convolution_backward,
// the GEMM convolution where it applies and is preferred, `aten` otherwise.
// METAFUSE_GEMM_CONVOLUTIONS=0 always takes `aten`.
torch::jit::Operation MakeConvolutionOperation(bool transposed, torch::jit::Operation aten);

}  // namespace metafuse::runtime
