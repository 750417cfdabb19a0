// Pass: a scatter into fresh zeros is one operation.
//
// Runs on a shape-specialized graph, before fusion. A max-pool's gradient is
// scatter_add(zeros, -1, indices, gradient) over flattened planes
// (compiler/autodiff/rules_linalg_conv_pool.cc; the zeros made by shape
// specialization from a zeros_like). As two instructions, the zeros are a
// pass over the whole full-resolution tensor (15 MB for the conv net's
// first layer on its query images) and the scatter reads it back.
// metafuse::scatter_add_into_zeros (runtime/compute/scatter_add.h) zeroes each row
// right before scattering into it. Only where nothing else reads the zeros.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// Returns the number of scatters rewritten.
int64_t ScatterIntoFreshZeros(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
