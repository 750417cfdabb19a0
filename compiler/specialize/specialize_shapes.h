// Pass: shape specialization.
//
// A compiled function is guarded on the shapes, dtypes and devices of its
// inputs, and every op in the primitive set has a shape that follows from
// its inputs' shapes alone. So one run on inputs of the guarded shapes tells
// the shape of every value for every later run under that guard. This pass
//   1. runs the graph once (runtime::Program) and gives every tensor value its
//      complete TensorType (sizes, strides, dtype, device),
//   2. replaces the shape queries (aten::size, aten::numel, aten::dim) by
//      constants and folds the integer arithmetic built on them,
//      Likewise a zeros_like that no fusible elementwise op reads becomes aten::zeros
//      of the recorded type (it read its input only for the shape),
//   3. removes shape ops that became identities: sum_to_size and expand to
//      the shape the value already has, type_as to the dtype it already has,
//      reshape/view to its own shape, contiguous of a contiguous value.
// Saved tensors that the backward read only for their sizes become unused.
// Its result is the graph itself, typed: later passes read the shapes with
// CompleteTensorType (ir/shape_facts.h).
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

#include "compiler/ir/shape_facts.h"  // what the passes after this one read

namespace metafuse::compiler {

struct ShapeSpecialization {
  std::vector<c10::IValue> outputs;  // of the recording run
  int64_t shape_queries_folded = 0;
  int64_t identities_removed = 0;
};

// Specializes `graph` in place to the shapes of `inputs` (one per graph
// input) and returns the outputs of the run that recorded them.
ShapeSpecialization SpecializeShapes(const std::shared_ptr<torch::jit::Graph>& graph,
                                     std::vector<c10::IValue> inputs);


}  // namespace metafuse::compiler
