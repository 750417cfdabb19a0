// 3x3 stride-1 convolutions with few input channels (an image net's first
// layer: 1 channel for Omniglot, 3 for RGB) computed directly: every
// output vector is the sum of C x 9 shifted input vectors, each scaled by
// one weight, with the input vectors held in registers across all output
// channels. The weight gradient is the transposed sum: per output channel,
// C x 9 vector accumulators over every image's gradient rows.
//
// Why: such a layer has too few multiplies per output for a GEMM (its depth
// is C x 9) and writes the largest activation of the net, so it is bound by
// the store of its output. On the Omniglot net's query layer (75 images of
// 28x28 to 64 channels) the GEMM of packed patches took 2.8 ms and ATen's
// convolution_backward weight gradient 3.2 ms per call inside a compiled
// program (bench/conv_bench.cc).
#pragma once

#include <ATen/ATen.h>

namespace metafuse::runtime {

// True where the direct kernels compute conv2d(input, weight, padding):
// float32 or float64 CPU, 4-D, one group, stride 1, dilation 1, a 3x3
// weight, 1 to 3 input channels, padding 0 to 2.
bool DirectConvolutionApplies(const at::Tensor& input, const at::Tensor& weight,
                              at::IntArrayRef stride, at::IntArrayRef padding,
                              at::IntArrayRef dilation, int64_t groups);

// aten::conv2d(input, weight, bias, stride 1, padding): NCHW, contiguous.
at::Tensor Conv2dDirect(const at::Tensor& input, const at::Tensor& weight,
                        const c10::optional<at::Tensor>& bias, at::IntArrayRef padding);

// True where WeightGradientDirect computes the weight gradient of a 3x3
// convolution of `input` [N, C, H, W] whose output gradient is
// `grad_output` [N, K, H', W'] (the same conditions, the kernel size
// following from H' = H + 2 padding - 2).
bool DirectWeightGradientApplies(const at::Tensor& input, const at::Tensor& grad_output,
                                 at::IntArrayRef padding);

// That weight gradient, [K, C, 3, 3], contiguous.
at::Tensor WeightGradientDirect(const at::Tensor& input, const at::Tensor& grad_output,
                                at::IntArrayRef padding);

}  // namespace metafuse::runtime
