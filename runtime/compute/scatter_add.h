// aten::scatter_add along the last dimension, for the scatters compiled
// programs make: a max-pool's gradient sent to each window's winner
// (compiler/autodiff/rules_linalg_conv_pool.cc: zeros_like(plane), then
// scatter_add(plane, -1, indices, gradient) over flattened planes).
//
// Why: LibTorch 1.13's CPU scatter_add takes 2.3 ms for the Omniglot net's
// query layer (75 x 64 planes of 196 gradients into 784 positions), about
// 2 ns per element, and the zeros it adds into are a separate 15 MB
// allocation. Here each row is a plain loop, rows split over ATen's
// threads, and a `self` nothing else holds (the fresh zeros) is written in
// place instead of copied. Within a row the additions run in index order,
// as ATen's do, so repeated indices give ATen's bits; an index outside the
// row is an error naming it.
//
// Programs call it through MakeScatterAddOperation for
// aten::scatter_add(self, dim, index, src); other calls (another dim,
// non-contiguous or mixed dtypes, not the CPU, recording a graph) take
// ATen's operator.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/stack.h>

namespace metafuse::runtime {

// True when ScatterAddLastDim computes this call.
bool LastDimScatterAddApplies(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const at::Tensor& src);

// self.scatter_add(-1, index, src); writes into `self` when `in_place`.
at::Tensor ScatterAddLastDim(at::Tensor self, const at::Tensor& index, const at::Tensor& src,
                             bool in_place);

torch::jit::Operation MakeScatterAddOperation(torch::jit::Operation aten);

// zeros(size, dtype, device).scatter_add_(dim, index, src) in one pass where
// ScatterAddLastDim applies: each row zeroed right before its scatter,
// instead of a pass of zeros over the whole tensor first (a pooling
// gradient of the conv net's first layer is 15 MB). Registered as
// metafuse::scatter_add_into_zeros, which compiler/fusion/scatter_into_zeros.h
// puts in programs; other devices and layouts take the two ATen calls.
at::Tensor ScatterAddIntoZeros(at::IntArrayRef size, at::ScalarType dtype, at::Device device,
                               int64_t dim, const at::Tensor& index, const at::Tensor& src);

}  // namespace metafuse::runtime
