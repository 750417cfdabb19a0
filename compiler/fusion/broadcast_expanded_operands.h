// Pass: elementwise operations read an expanded tensor's source, not the
// expansion.
//
// Runs on a shape-specialized graph, before elementwise fusion. metafuse.vmap
// expands every unmapped argument (the shared meta-parameters) to the task
// count at the program's entry: products read the expansion in place (a
// task stride of 0), but a fused kernel indexes its inputs densely, so an
// expanded [T, R, C] input was copied out to T real matrices at every
// launch. Where an elementwise operation (add, mul, where, a comparison)
// would broadcast to the same result shape anyway, it reads the source
// [R, C] instead: the fuser then reads it with the inner-broadcast access,
// and an unfused ATen operation broadcasts it. The expansion stays for its
// other readers, and goes when none is left. Operands of one dtype only, so
// that type promotion (which ranks 0-dim tensors below the others) cannot
// change.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// Returns the number of operands rewired.
int64_t BroadcastExpandedOperands(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
