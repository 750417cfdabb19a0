// Runtime operations for the small reductions of differentiated programs:
// sum_to_size (bias gradients: a [M, N] matrix summed over rows or columns),
// and full sum / mean (losses). ATen's reduction machinery costs microseconds
// per call at these sizes; a contiguous float32/float64 CPU input is summed
// here by a plain loop instead. Any other input (another dtype or layout, a
// dtype argument, a partial reduction of another form) takes ATen's operator.
// The order of additions differs from ATen's, so results may differ in the
// last bits.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

namespace metafuse::compiler {

// The operation for `node` (aten::sum_to_size, aten::sum, aten::mean), or
// nullptr if it is not one of the forms handled.
torch::jit::Operation MakeReductionOperation(torch::jit::Node* node);

}  // namespace metafuse::compiler
