// A fused kernel that also sums some of its outputs (LaunchPlan::reductions,
// compiler/fusion/fusion_group.h), run on the host. Each thread runs its share of
// the loop in blocks small enough to stay in cache and, after each block,
// adds the block's values of every reduced output into its own partial sums
// (double; a run of one reduced element is first summed in vector lanes of
// the input's type); the partials are then combined in thread order and
// scaled (a mean). An output that only the reductions read (a scratch
// output) lives in a per-thread block buffer and is never written whole: a
// BatchNorm gradient's sums of a conv activation cost no pass over memory.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "runtime/jit/jit_kernel.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

// Runs `kernel` over [0, n). `outputs` holds one buffer per kernel output,
// null for the scratch ones; `output_dtypes` their dtypes (float32 or
// float64). Returns one tensor per reduction, of its out_sizes and its
// source output's dtype. Throws c10::Error naming the kernel when a
// reduction does not fit the loop.
std::vector<at::Tensor> RunReducing(const JitKernel& kernel, int64_t n,
                                    const void* const* inputs, void* const* outputs,
                                    const double* scalars,
                                    const std::vector<c10::ScalarType>& output_dtypes,
                                    const std::vector<LaunchPlan::Reduction>& reductions);

}  // namespace metafuse::runtime
