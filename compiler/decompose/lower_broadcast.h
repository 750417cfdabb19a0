// Pass: lower aten::broadcast_tensors + prim::ListUnpack (emitted by traced
// torch.nn.functional losses) to one aten::expand per tensor, using the
// traced (concrete) shapes: the inner loop is shape-specialized by its guard.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

void LowerBroadcastTensors(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
