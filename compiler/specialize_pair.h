// Joint specialization of a compiled function's forward and backward.
//
// The forward program returns, after its outputs, every value the generic
// backward reads ("saved"). Many of those are read only for their sizes,
// which shape specialization turns into constants: saving them would keep
// them alive from the forward to the backward for nothing. So the pair is
// specialized together, on the first call under a new input signature:
//   1. the generic forward runs once, recording every value's shape,
//   2. the generic backward runs once on its saved values and cotangents of
//      ones, recording its shapes,
//   3. saved values the specialized backward does not read are removed from
//      both: the forward stops returning them (dead code after them goes),
//      the backward stops taking them; a saved value one elementwise op
//      computes from forward inputs and other saved values is recomputed at
//      the start of the backward instead (rematerialization: its buffer no
//      longer lives from forward to backward),
//   4. both are fused and lowered (BuildFusedProgram).
// The specialized forward then runs on the call's inputs.
#pragma once

#include <memory>
#include <vector>

#include "compiler/inner_loop.h"
#include "compiler/ir_dump.h"
#include "compiler/specializing_program.h"
#include "runtime/program.h"

namespace metafuse::compiler {

struct SpecializedPair {
  std::unique_ptr<runtime::Program> forward;   // inputs -> outputs, kept saved
  std::unique_ptr<runtime::Program> backward;  // kept saved, cotangents -> grads
  SpecializationReport forward_report, backward_report;
  int64_t saved_before = 0;  // values the generic forward saves
  int64_t saved_after = 0;   // values the specialized forward saves
  int64_t rematerialized = 0;  // saved values recomputed in the backward instead
};

// Specializes `split` to `inputs` (one per forward input); `outputs`
// receives the specialized forward's outputs for them. `log` (may be null)
// receives the specialized and fused graphs.
std::shared_ptr<SpecializedPair> SpecializePair(const SplitProgram& split,
                                                const std::vector<c10::IValue>& inputs,
                                                StageLog* log,
                                                std::vector<c10::IValue>* outputs);

}  // namespace metafuse::compiler
