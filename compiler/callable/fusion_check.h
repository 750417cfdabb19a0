// The fusion cost check for C++ callers: what metafuse/_fusion_check.py
// does for Python's. The specialized (fused) programs and the generic ones
// of a function are each timed on `inputs`, a call and its backward, by the
// tuning library's rule (runtime/tuning/timing_rule.h); the generic ones are
// kept only if they beat the specialized ones by the rule's margin. The
// choice is set on the function and added to the tuning report (table
// "fusion").
//
// The timed calls run on detached copies of the inputs: no gradient reaches
// the caller's tensors, and the CPU random generator is restored afterwards.
// METAFUSE_FUSION_CHECK=0 turns it off; a value other than 0 or 1 is an
// error naming the variable.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "compiler/callable/specializing_function.h"

namespace metafuse::compiler {

struct FusionChoice {
  bool fusion = true;
  double fused_seconds = 0, unfused_seconds = 0;
};

// Runs the check (nullopt when it is off, or fusion is already off).
// `label` names the function in the report.
std::optional<FusionChoice> CheckFusion(SpecializingFunction& function,
                                        const std::vector<at::Tensor>& inputs,
                                        const std::string& label);

}  // namespace metafuse::compiler
