// Pass: lower the few ATen ops metafuse's eager optimizer transforms use
// (traced when a user function calls the optimizer API inside
// metafuse.compile) to primitives:
//   addcmul(s, a, b, v)  -> s + v * a * b        addcdiv -> s + v * a / b
//   full_like(x, v)      -> zeros_like(x) + v
//   aten::item / _local_scalar_dense of constants: dropped (folded on the
//   host); of a value that depends on the inputs: UnsupportedOp, since the
//   trace would bake one input's value in.
#pragma once

#include <memory>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

void LowerOptimizerOps(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
