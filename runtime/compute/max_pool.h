// aten::max_pool2d_with_indices for the pooling image nets use (window ==
// stride, no padding, dilation 1, floor mode) on contiguous NCHW float32 /
// float64 CPU tensors, plane by plane.
//
// Why: LibTorch 1.13's NCHW kernel takes 20 ms for the Omniglot net's
// 75 x 64 x 28 x 28 query activations on this machine, 5 ns per element
// (its channels-last kernel: 2.7 ms); it was 17% of the compiled query
// loss (bench/max_pool_bench.cc). Float32 2x2 windows on AVX-512 run 16 outputs a
// step through a column permute, any row width (ATen / planes on the
// query layers: 13x at 28x28, 16x at 14x14, 6.5x at 7x7). Values and
// indices are ATen's: a window's first
// maximum in row-major order, except that a NaN replaces any number (the
// window's last NaN wins), and each index is the flat position in its
// input plane (what the derivative rule scatters the gradient to).
//
// Programs call it through MakeMaxPoolOperation for
// aten::max_pool2d_with_indices; any other call takes ATen's operator.
#pragma once

#include <tuple>

#include <ATen/ATen.h>
#include <ATen/core/stack.h>

namespace metafuse::runtime {

// True when MaxPool2dByPlanes computes this call.
bool PlaneMaxPoolApplies(const at::Tensor& input, at::IntArrayRef kernel, at::IntArrayRef stride,
                         at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode);

// (values, int64 indices) of a [N, C, H, W] or [C, H, W] input pooled by
// `kernel` windows at stride `kernel`.
std::tuple<at::Tensor, at::Tensor> MaxPool2dByPlanes(const at::Tensor& input,
                                                     at::IntArrayRef kernel);

// The same pooling of `planes` contiguous [height, width] planes at `in`
// into `out` and `index` (planes x (height / kh) x (width / kw) each), on
// the calling thread: a fused kernel's launch pools the planes it has just
// computed into its per-thread buffer (LaunchPlan::pool).
void MaxPoolPlanes(const float* in, int64_t planes, int64_t height, int64_t width, int64_t kh,
                   int64_t kw, float* out, int64_t* index);
void MaxPoolPlanes(const double* in, int64_t planes, int64_t height, int64_t width, int64_t kh,
                   int64_t kw, double* out, int64_t* index);

torch::jit::Operation MakeMaxPoolOperation(torch::jit::Operation aten);

}  // namespace metafuse::runtime
