// Runtime operations for the small reductions of differentiated programs:
// sum_to_size (bias gradients: a [M, N] matrix summed over rows or columns),
// and full sum / mean (losses). ATen's reduction machinery costs microseconds
// per call at these sizes; a contiguous float32/float64 CPU input is summed
// here by a plain loop instead. Any other input takes the operator the plan
// names. The order of additions differs from ATen's, so results may differ
// in the last bits. The compiler picks the plan (compiler/lowering/lower_to_program.h).
#pragma once

#include <ATen/core/stack.h>

#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

// `num_inputs`: the instruction's (sum / mean(x, dtype=None),
// sum_to_size(x, size): the tensor comes first).
torch::jit::Operation MakeReductionOperation(const ReductionPlan& plan, size_t num_inputs);

}  // namespace metafuse::runtime
