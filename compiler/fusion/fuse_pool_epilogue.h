// Pass: a max-pool that reads a fused kernel's only output pools it as the
// kernel computes it.
//
// Runs on a fused, shape-specialized graph, before buffer planning. In a
// conv net the BatchNorm affine and ReLU kernel writes a full-resolution
// activation that only aten::max_pool2d_with_indices reads (its ReLU mask
// is recomputed in the backward, compiler/specialize/rematerialize.h): 15 MB for the
// Omniglot net's first layer on its query images, written to memory and
// read back. The group takes attr `pool` = {kh, kw} and the pool's two
// outputs; its launch computes a block of planes into a per-thread buffer
// and pools them from there (LaunchPlan::pool, runtime/compute/max_pool.h), with
// the same values and indices. Only where the pooling is one the runtime's
// plane kernels compute (window == stride, no padding, dilation 1, floor
// mode) on a one-segment CPU float32/float64 group without reductions.
#pragma once

#include <cstdint>
#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// Returns the number of max-pools moved into their kernel.
int64_t FusePoolEpilogues(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
