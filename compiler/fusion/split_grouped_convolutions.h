// Pass: grouped convolutions run as one convolution per group, where that is
// measured to be faster.
//
// metafuse.vmap batches per-task convolutions into one grouped convolution
// (groups = tasks), and the symbolic derivatives of a grouped convolution
// are grouped convolutions again. LibTorch's CPU kernels can be far slower on
// a grouped convolution than on its groups one after another (measured
// 8-10x with torch 1.13 on the Omniglot MAML shapes: bench/grouped_conv.py). Which is
// faster depends on the shapes, the LibTorch build and the threads, so this
// pass does not guess: for each distinct grouped aten::conv2d /
// aten::conv_transpose2d of a shape-specialized graph it times both forms
// once on a one-image proxy (the work of both is linear in the batch) and
// splits only when the split form is clearly faster (the cost check). Results
// are remembered per shape, dtype and thread count for the process.
// METAFUSE_SPLIT_CONVOLUTIONS=always|never replaces the measurement (tests,
// benchmarks). Depthwise-like convolutions (a group of fewer than 4 input channels, e.g.
// average pooling as a convolution) are never split.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

struct ConvolutionSplitStats {
  int64_t grouped = 0;   // grouped convolutions considered
  int64_t split = 0;     // of them, split (measured faster)
  double measure_seconds = 0;  // spent timing (first sight of a shape only)
};

enum class ConvolutionSplitPolicy { kMeasure, kAlways, kNever };

// METAFUSE_SPLIT_CONVOLUTIONS; throws c10::Error naming a bad value.
ConvolutionSplitPolicy ConvolutionSplitPolicyFromEnvironment();

ConvolutionSplitStats SplitGroupedConvolutions(const std::shared_ptr<torch::jit::Graph>& graph,
                                               ConvolutionSplitPolicy policy);

}  // namespace metafuse::compiler
