// Shape facts: what shape specialization (specialize/specialize_shapes.h)
// returns in the graph itself. After it, every tensor value carries its
// complete TensorType (sizes, strides, dtype, device): the passes after it
// read those facts from the graph they are given, through this accessor,
// not from the pass that recorded them.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// The complete tensor type of `value`, or null where specialization gave
// it none (a value that is not a tensor, or a graph not specialized).
inline c10::TensorTypePtr CompleteTensorType(const torch::jit::Value* value) {
  auto type = value->type()->cast<c10::TensorType>();
  if (!type || !type->isComplete()) return nullptr;
  return type;
}

}  // namespace metafuse::compiler
