// Pass: rematerialization between a forward and its backward.
//
// Saved values are forward outputs [num_outputs, ...) and backward inputs
// [0, num_saved). A saved value that at most four elementwise ops (or
// transposes) compute from forward inputs (held by the caller anyway),
// other saved values and tensors small beside it (saved for it: a
// BatchNorm's per-channel scale and shift beside a ReLU output) costs its
// whole buffer from the forward to the backward; recomputing it in the
// backward, just before its first reader (where fusion folds it into a
// kernel), costs a few flops. Slots nothing reads any more leave both
// graphs. Runs on shape-specialized graphs.
#pragma once

#include <cstdint>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// Returns how many saved values were rematerialized.
int64_t Rematerialize(torch::jit::Graph& forward, torch::jit::Graph& backward,
                      int64_t num_outputs);

}  // namespace metafuse::compiler
